"""config_error: one ConfigError from a pydantic ValidationError, naming each bad key and what is allowed."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field, ValidationError, model_validator

from kafka_audit import PRODUCT_PACKAGES
from kafka_plumbing.errors import ConfigError, config_error


class _Nested(BaseModel):
    mode: Literal["fast", "safe"] = "safe"


class _Settings(BaseModel):
    window_ms: int = Field(1000, gt=0)
    nested: _Nested = _Nested()
    low: int = 0
    high: int = 1

    @model_validator(mode="after")
    def _ordered(self) -> _Settings:
        if self.low > self.high:
            raise ValueError("low must not exceed high")
        return self


def _error(**values: object) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        _Settings(**values)  # type: ignore[arg-type]
    return info.value


def test_each_key_is_named_with_pydantics_message():
    err = config_error(_error(window_ms=0, nested={"mode": "quick"}), "invalid test settings")
    assert isinstance(err, ConfigError)
    assert str(err) == (
        "invalid test settings: window_ms: Input should be greater than 0; "
        "nested.mode: Input should be 'fast' or 'safe'"
    )


def test_a_model_level_error_has_no_key_and_the_naming_is_the_callers():
    assert str(config_error(_error(low=2), "bad")) == "bad: low must not exceed high"  # no "Value error, "
    named = config_error(_error(window_ms=-1), "bad", lambda loc: f"X_{'_'.join(map(str, loc)).upper()}")
    assert str(named) == "bad: X_WINDOW_MS: Input should be greater than 0"
    whole = config_error(_error(low=2), "bad", lambda loc: ".".join(map(str, loc)) or "settings")
    assert str(whole) == "bad: settings: low must not exceed high"


def test_the_input_value_is_not_in_the_message():
    assert "hunter2" not in str(config_error(_error(window_ms="hunter2"), "bad"))


def _product_exceptions() -> list[type[BaseException]]:
    """Every exception class defined (not merely imported) in a module of a product package."""
    import importlib
    import inspect
    import pkgutil

    found: list[type[BaseException]] = []
    for name in PRODUCT_PACKAGES:
        package = importlib.import_module(name)
        modules = [package.__name__]
        modules += [
            m.name
            for m in pkgutil.walk_packages(package.__path__, f"{name}.")
            if not m.name.endswith(".__main__")  # running it is what importing it does
        ]
        for module_name in modules:
            module = importlib.import_module(module_name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, BaseException) and cls.__module__ == module_name:
                    found.append(cls)
    return found


def test_every_error_the_product_defines_derives_from_kafka_audit_error():
    from kafka_plumbing.errors import KafkaAuditError

    errors = _product_exceptions()
    assert len(errors) >= 20, "the walk should find the product's errors"
    strays = [
        f"{cls.__module__}.{cls.__qualname__}" for cls in errors if not issubclass(cls, KafkaAuditError)
    ]
    assert strays == [], f"not derived from KafkaAuditError: {strays}"


def test_errors_that_were_value_errors_still_are():
    from audit_producer.autotune import ConfigRejectedError
    from audit_record.stamp import MalformedStampError
    from kafka_plumbing.errors import KafkaAuditError

    assert issubclass(MalformedStampError, ValueError) and issubclass(MalformedStampError, KafkaAuditError)
    assert issubclass(ConfigRejectedError, KafkaAuditError)
