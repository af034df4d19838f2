"""The configuration of a producer group as the controller sees it.

Read from a window result, compared, changed by a suggestion, written as librdkafka properties.
Properties use librdkafka's names (``acks``, ``enable.idempotence``, ``batch.num.messages``,
``linger.ms``, ``message.timeout.ms``) plus the two hints for the application a suggestion may change:
``poll_interval_ms`` (the polling interval delta, ms) and ``producers`` (the producer count N_p).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from audit_record import window_result
from audit_record.record import canonical_acks

DEFAULT_LINGER_MS = 5.0
"""librdkafka's default ``linger.ms`` (ms), assumed when a window does not report the producers' own."""

PRODUCER_PROPERTIES: tuple[str, ...] = (
    "acks",
    "enable.idempotence",
    "batch.num.messages",
    "linger.ms",
    "message.timeout.ms",
)
"""librdkafka properties a control record sets; a producer runs a configuration when these match."""
HINTS: tuple[str, ...] = ("poll_interval_ms", "producers")
"""Hints for the application (not librdkafka properties): polling interval (ms), producer count."""

_FIELD = {
    **window_result.CURRENT_PROPERTIES,
    "enable.idempotence": "enable_idempotence",  # in effect, not suggested: the window result's fields
    "linger.ms": "linger_ms",
}


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """One producer configuration of a group (immutable).

    Attributes:
        acks: librdkafka ``acks`` in canonical form (``0``, ``1``, ``all``).
        batch_num_messages: librdkafka ``batch.num.messages`` B, messages.
        message_timeout_ms: librdkafka ``message.timeout.ms`` T_o, ms.
        linger_ms: librdkafka ``linger.ms``, ms.
        enable_idempotence: librdkafka ``enable.idempotence`` (only with ``acks=all``).
        poll_interval_ms: Hint: the application's polling interval delta, ms (None: unknown).
        producers: Hint: producers of the group N_p (None: unknown).
    """

    acks: str
    batch_num_messages: int
    message_timeout_ms: int
    linger_ms: float = DEFAULT_LINGER_MS
    enable_idempotence: bool = False
    poll_interval_ms: float | None = None
    producers: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> GroupConfig | None:
        """Return the configuration in effect in a window result (its largest producer's).

        None when the row lacks ``acks``, ``batch_num_messages`` or ``message_timeout_ms`` (no producer
        snapshot), or holds an ``acks`` librdkafka does not know.
        """
        acks, batch, timeout = row.get("acks"), row.get("batch_num_messages"), row.get("message_timeout_ms")
        if acks is None or batch is None or timeout is None:
            return None
        try:
            canonical = canonical_acks(acks)
        except ValueError:
            return None
        linger = row.get("linger_ms")
        poll = row.get("poll_interval_ms")
        producers = row.get("producers")
        return cls(
            acks=canonical,
            batch_num_messages=int(batch),
            message_timeout_ms=int(timeout),
            linger_ms=DEFAULT_LINGER_MS if linger is None or linger != linger else float(linger),
            enable_idempotence=bool(row.get("enable_idempotence") or False),
            poll_interval_ms=None if poll is None or poll != poll else float(poll),
            producers=None if producers is None else int(producers),
        )

    def with_changes(self, changes: Mapping[str, Any]) -> GroupConfig:
        """Return this configuration with ``changes`` ``{property: new value}`` applied.

        Keys are those of :func:`audit_record.window_result.suggested_changes` (``acks``,
        ``batch.num.messages``, ``message.timeout.ms``, ``poll_interval_ms``, ``producers``) or
        ``linger.ms`` / ``enable.idempotence``. ``enable.idempotence`` is turned off when ``acks`` becomes
        other than ``all`` (librdkafka refuses idempotence without ``acks=all``).

        Raises:
            KeyError: a property outside :data:`PRODUCER_PROPERTIES` and :data:`HINTS`.
            ConfigError: an ``acks`` value librdkafka does not know.
        """
        update: dict[str, Any] = {}
        for prop, value in changes.items():
            if prop not in _FIELD:
                raise KeyError(f"not a controllable property: {prop!r} (allowed: {', '.join(_FIELD)})")
            name = _FIELD[prop]
            if name == "acks":
                value = canonical_acks(value)
            elif name in ("batch_num_messages", "message_timeout_ms", "producers"):
                value = int(value)
            elif name in ("linger_ms", "poll_interval_ms"):
                value = float(value)
            elif name == "enable_idempotence":
                value = bool(value)
            update[name] = value
        out = dataclasses.replace(self, **update)
        if out.acks != "all" and out.enable_idempotence:
            out = dataclasses.replace(out, enable_idempotence=False)
        return out

    def properties(self) -> dict[str, Any]:
        """Return ``{librdkafka property or hint: value}`` (hints None when unknown)."""
        return {prop: getattr(self, name) for prop, name in _FIELD.items()}

    def producer_properties(self) -> dict[str, Any]:
        """Return the librdkafka properties only (:data:`PRODUCER_PROPERTIES`)."""
        return {prop: getattr(self, _FIELD[prop]) for prop in PRODUCER_PROPERTIES}

    def runs_as(self, other: GroupConfig) -> bool:
        """Return True if both set the same librdkafka properties (hints ignored)."""
        return self.producer_properties() == other.producer_properties()

    def changed(self, new: GroupConfig) -> dict[str, Any]:
        """Return ``{property: new value}`` of what ``new`` changes (hints only when ``new`` knows them)."""
        old_props, new_props = self.properties(), new.properties()
        return {p: v for p, v in new_props.items() if v != old_props[p] and not (p in HINTS and v is None)}

    def to_json(self) -> dict[str, Any]:
        """Return the fields as a JSON-ready dict (field names, as in ``control_record.avsc``)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GroupConfig:
        """Inverse of :meth:`to_json`.

        Raises:
            TypeError, ValueError: fields missing, unknown or of the wrong type.
        """
        return cls(**{**data, "acks": canonical_acks(data["acks"])})


__all__ = ["DEFAULT_LINGER_MS", "HINTS", "PRODUCER_PROPERTIES", "GroupConfig"]
