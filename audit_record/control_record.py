"""The control record: the desired configuration of a producer group on the control topic.

Written by the controller (``control_loop``) to the compacted control topic
(:data:`DEFAULT_CONTROL_TOPIC`, key = the group), read by autotuned
:class:`~audit_producer.AuditedProducer` instances of that group. Avro single-object encoding with
``control_record.avsc`` (:mod:`audit_record.codec`). The configurable properties are the ones the
predictor knows (librdkafka names, ``docs/DESIGN.md``): ``acks``, ``enable.idempotence``,
``batch.num.messages``, ``linger.ms``, ``message.timeout.ms``; the polling interval and the producer
count are hints for the application.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from audit_record.codec import decode_object, encode_object
from audit_record.record import MalformedRecordError, canonical_acks

DEFAULT_CONTROL_TOPIC = "__kafka_audit_control"

SCHEMA = "control_record"


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """Desired configuration of one producer group (paper Sec. V: the configuration chosen from gamma).

    Attributes:
        group: Producer group (the message key).
        version: Monotonic per group; producers ignore versions not newer than the one they run.
        acks: ``0``, ``1`` or ``all`` (librdkafka ``acks``).
        enable_idempotence: librdkafka ``enable.idempotence``.
        batch_num_messages: librdkafka ``batch.num.messages`` B, messages (1-1,000,000).
        linger_ms: librdkafka ``linger.ms``, ms (0-900,000).
        message_timeout_ms: librdkafka ``message.timeout.ms`` T_o, ms (0 = infinite).
        poll_interval_ms: Hint: the application's polling interval delta, ms; None = keep.
        producers: Hint: producers in the group; None = keep.
        reason: Machine label (``suggestion``, ``rollback``, ``forced``, ...).
        predicted_gamma_before, predicted_gamma_after: Predicted gamma (Eq. 2) of the old and the new
            configuration; None if unknown.
        measured_gamma_before: Measured gamma of the newest final windows before the change.
        packet_loss_pct: Measured L when decided, percent 0-100. delay_ms: measured D, ms.
        issued_at_ms: Decision time, ms since the epoch UTC.
        expires_at_ms: Ignored after this time (ms since the epoch UTC); None = never.
    """

    group: str
    version: int
    acks: str
    batch_num_messages: int
    linger_ms: float
    message_timeout_ms: int
    reason: str
    issued_at_ms: int
    enable_idempotence: bool = False
    poll_interval_ms: float | None = None
    producers: int | None = None
    predicted_gamma_before: float | None = None
    predicted_gamma_after: float | None = None
    measured_gamma_before: float | None = None
    packet_loss_pct: float | None = None
    delay_ms: float | None = None
    expires_at_ms: int | None = None

    def validate(self) -> ControlRecord:
        """Return self if every value is in librdkafka's range.

        Raises:
            MalformedRecordError: reason ``bad_control``, naming the field and the allowed values.
        """
        problems: list[str] = []
        if not self.group:
            problems.append("group: must not be empty")
        if self.version < 1:
            problems.append(f"version={self.version}: allowed values are >= 1")
        try:
            canonical_acks(self.acks)
        except ValueError:  # ConfigError is a ValueError
            problems.append(f"acks={self.acks!r}: allowed values are 0, 1, all")
        if not 1 <= self.batch_num_messages <= 1_000_000:
            problems.append(f"batch_num_messages={self.batch_num_messages}: allowed values are 1-1000000")
        if not 0 <= self.linger_ms <= 900_000:
            problems.append(f"linger_ms={self.linger_ms}: allowed values are 0-900000")
        if not 0 <= self.message_timeout_ms <= 2_147_483_647:
            problems.append(f"message_timeout_ms={self.message_timeout_ms}: allowed values are 0-2147483647")
        if self.poll_interval_ms is not None and self.poll_interval_ms < 0:
            problems.append(f"poll_interval_ms={self.poll_interval_ms}: allowed values are >= 0")
        if self.producers is not None and self.producers < 1:
            problems.append(f"producers={self.producers}: allowed values are >= 1")
        if problems:
            raise MalformedRecordError("bad_control", "; ".join(problems))
        return self

    def librdkafka_config(self) -> dict[str, Any]:
        """Return the librdkafka properties this record sets (canonical names)."""
        return {
            "acks": canonical_acks(self.acks),
            "enable.idempotence": self.enable_idempotence,
            "batch.num.messages": self.batch_num_messages,
            "linger.ms": self.linger_ms,
            "message.timeout.ms": self.message_timeout_ms,
        }

    def expired(self, now_ms: int) -> bool:
        """Return True if ``expires_at_ms`` has passed at ``now_ms`` (ms since the epoch UTC)."""
        return self.expires_at_ms is not None and now_ms >= self.expires_at_ms

    def key(self) -> bytes:
        """Return the Kafka message key: the group, UTF-8."""
        return self.group.encode()


def encode_control(record: ControlRecord) -> bytes:
    """Encode a control record as an Avro single object.

    Raises:
        MalformedRecordError: if :meth:`ControlRecord.validate` fails (nothing invalid is written).
    """
    return encode_object(SCHEMA, dataclasses.asdict(record.validate()))


def decode_control(value: bytes | None) -> ControlRecord:
    """Decode and validate a control record.

    Raises:
        MalformedRecordError: ``empty``, ``bad_magic``, ``wrong_schema``, ``undecodable`` or ``bad_control``.
    """
    if not value:
        raise MalformedRecordError("empty", "no value")
    data = decode_object(SCHEMA, value)
    try:
        record = ControlRecord(**data)
    except TypeError as exc:
        raise MalformedRecordError("undecodable", f"{type(exc).__name__}: {exc}") from exc
    return record.validate()


__all__ = ["DEFAULT_CONTROL_TOPIC", "ControlRecord", "decode_control", "encode_control"]
