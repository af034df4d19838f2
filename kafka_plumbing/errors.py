"""The project's root exception; each package derives its own errors from it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class KafkaAuditError(Exception):
    """Root of every error kafka-audit raises on purpose.

    Subclasses say what went wrong and how to recover; the CLI prints their message without a
    traceback and exits with status 2.
    """


class ConfigError(KafkaAuditError, ValueError):
    """A setting has a value outside its allowed set; the message names the key and the allowed values."""


def _dotted(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(x) for x in loc)


def setting_and_env_name(env_prefix: str) -> Callable[[tuple[int | str, ...]], str]:
    """Return a ``key`` for :func:`config_error` naming a setting and its environment variable.

    For the pydantic-settings models whose fields are read from ``<env_prefix><FIELD>``: an error at
    ``loc`` ``("dwell_ms",)`` is named ``dwell_ms (KAFKA_AUDIT_CONTROL_DWELL_MS)`` with ``env_prefix``
    ``"KAFKA_AUDIT_CONTROL_"``; a model-level error (empty ``loc``) gets no name.

    Args:
        env_prefix: The model's ``env_prefix``, e.g. ``"KAFKA_AUDIT_ALERTS_"``.
    """

    def name(loc: tuple[int | str, ...]) -> str:
        return f"{loc[0]} ({env_prefix}{str(loc[0]).upper()})" if loc else ""

    return name


def config_error(
    exc: ValidationError, what: str, key: Callable[[tuple[int | str, ...]], str] = _dotted
) -> ConfigError:
    """Turn a pydantic ``ValidationError`` into one :class:`ConfigError` naming each bad key.

    Args:
        exc: The validation error (pydantic or pydantic-settings).
        what: What was being read, e.g. ``"invalid alert settings"``; the message starts with it.
        key: How to name a setting from the error's ``loc`` (e.g. as its environment variable);
            default the dotted path (``alerts.gamma_target``). An empty name leaves the key out.

    Returns:
        ``ConfigError("<what>: <key>: <message>; <key>: <message>...")``, each message being pydantic's
        (which states the allowed values or range) without its ``Value error,`` prefix; raise it
        ``from None`` so the input values (possibly secrets) are not chained into a traceback.
    """
    problems = []
    for e in exc.errors(include_input=False):
        name, message = key(tuple(e["loc"])), e["msg"].removeprefix("Value error, ")
        problems.append(f"{name}: {message}" if name else message)
    return ConfigError(f"{what}: {'; '.join(problems)}")
