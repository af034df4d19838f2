"""Reading the reliability settings out of a librdkafka config, with librdkafka's aliases and defaults.

Defaults and aliases are librdkafka's ``CONFIGURATION.md`` (v2.x): ``acks`` = ``request.required.acks``
(default ``all``), ``linger.ms`` = ``queue.buffering.max.ms`` (5), ``message.timeout.ms`` =
``delivery.timeout.ms`` (300000), ``message.send.max.retries`` = ``retries`` (2147483647),
``batch.num.messages`` (10000), ``retry.backoff.ms`` (100), ``enable.idempotence`` (false).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from audit_record import ProducerConfig, canonical_acks
from kafka_plumbing.errors import ConfigError

_ALIASES = {
    "request.required.acks": "acks",
    "queue.buffering.max.ms": "linger.ms",
    "delivery.timeout.ms": "message.timeout.ms",
    "retries": "message.send.max.retries",
}
_DEFAULTS: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": False,
    "batch.num.messages": 10000,
    "linger.ms": 5,
    "message.timeout.ms": 300000,
    "message.send.max.retries": 2147483647,
    "retry.backoff.ms": 100,
}


def canonical(config: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of ``config`` with librdkafka aliases replaced by their canonical names."""
    return {_ALIASES.get(k, k): v for k, v in config.items()}


def _bool(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).lower() in ("true", "1")


def reliability_config(config: Mapping[str, Any], poll_interval_ms: float | None = None) -> ProducerConfig:
    """Extract the settings of paper Sec. III-C from a librdkafka config.

    Raises:
        ConfigError: if ``acks`` is not one of ``0``, ``1``, ``all``, ``-1``
            (:func:`audit_record.canonical_acks`), or a number is not a number.
    """
    c = {**_DEFAULTS, **canonical(config)}
    acks = canonical_acks(c["acks"])
    idempotent = _bool(c["enable.idempotence"])
    try:
        return ProducerConfig(
            acks="all" if idempotent else acks,
            enable_idempotence=idempotent,
            batch_num_messages=int(c["batch.num.messages"]),
            linger_ms=float(c["linger.ms"]),
            message_timeout_ms=int(c["message.timeout.ms"]),
            message_send_max_retries=int(c["message.send.max.retries"]),
            retry_backoff_ms=int(c["retry.backoff.ms"]),
            poll_interval_ms=poll_interval_ms,
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"producer config has a non-numeric reliability setting: {exc}") from exc


CONTROLLED_PROPERTIES: tuple[str, ...] = (
    "acks",
    "enable.idempotence",
    "batch.num.messages",
    "linger.ms",
    "message.timeout.ms",
)
"""The librdkafka properties a control record sets (``audit_record.control_record``), canonical names."""


def controlled_properties(config: ProducerConfig) -> dict[str, Any]:
    """Return the :data:`CONTROLLED_PROPERTIES` a producer runs with, by librdkafka name.

    ``acks`` is canonical (``0``, ``1``, ``all``); ``linger.ms`` in ms (float); ``message.timeout.ms`` in
    ms (0 = infinite).
    """
    return {
        "acks": config.acks,
        "enable.idempotence": config.enable_idempotence,
        "batch.num.messages": config.batch_num_messages,
        "linger.ms": config.linger_ms,
        "message.timeout.ms": config.message_timeout_ms,
    }
