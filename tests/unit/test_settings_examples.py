"""The ``Example:`` sections of the public classes' docstrings run as written (doctest)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "audit_producer.settings",
    "audit_producer.producer",
    "audit_consumer.settings",
    "audit_consumer.audited",
    "spark_streaming.settings",
    "alerts.settings",
    "control_loop.settings",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):  # the examples show the defaults, not this environment's settings
        if key.startswith("KAFKA_AUDIT_"):
            monkeypatch.delenv(key)
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, raise_on_error=False, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctest examples of {name} failed"
    assert result.attempted > 0, f"{name} has no example"
