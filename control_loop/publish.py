"""Writing control records: a decision (``change``, ``rollback``) or an operator's forced configuration.

Only ``apply`` mode writes (:class:`~control_loop.loop.ControlLoop` creates no publisher in
``advise`` mode, so nothing reaches the control topic then). One
:class:`~audit_record.control_record.ControlRecord` per change, keyed by the group, to the compacted
control topic (created with one partition if missing, ``cleanup.policy=compact``); the producer is
idempotent with ``acks=all`` and each write waits for the broker's acknowledgement.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from audit_record.control_record import ControlRecord, encode_control
from audit_record.record import MalformedRecordError
from control_loop.config import GroupConfig
from control_loop.decide import ControlDecision
from kafka_plumbing.clients import close_producer
from kafka_plumbing.errors import ConfigError, KafkaAuditError
from kafka_plumbing.security import client_config
from kafka_plumbing.topics import CONTROL_TOPIC_CONFIG, TopicError, ensure_topic

log = logging.getLogger(__name__)

LIBRDKAFKA_DEFAULTS = GroupConfig(
    acks="all", batch_num_messages=10_000, message_timeout_ms=300_000, linger_ms=5.0
)
"""librdkafka's own defaults (``CONFIGURATION.md``): the base of a forced record for a group without one."""


class PublishError(KafkaAuditError):
    """A control record could not be written (topic not created, broker away, delivery failed)."""


def control_record(
    decision: ControlDecision, expiry_ms: int | None, reason: str | None = None
) -> ControlRecord:
    """Return the control record of a ``change`` or ``rollback`` decision.

    Hints (polling interval, producer count) are set only when the decision changes them (None: keep).

    Args:
        decision: The decision (its ``to_config`` is the configuration written).
        expiry_ms: Lifetime, ms (None: never expires).
        reason: Record reason (default: ``suggestion`` for a change, ``rollback`` for a rollback).

    Raises:
        ValueError: the decision writes nothing (``advice``, ``held``, ``kept``).
    """
    if not decision.writes:
        raise ValueError(f"a {decision.kind} decision writes no control record")
    to = decision.to_config
    changed = decision.changes()
    return ControlRecord(
        group=decision.group,
        version=decision.version,
        acks=str(to["acks"]),
        enable_idempotence=bool(to["enable.idempotence"]),
        batch_num_messages=int(to["batch.num.messages"]),
        linger_ms=float(to["linger.ms"]),
        message_timeout_ms=int(to["message.timeout.ms"]),
        poll_interval_ms=changed.get("poll_interval_ms"),
        producers=changed.get("producers"),
        reason=reason or ("rollback" if decision.kind == "rollback" else "suggestion"),
        predicted_gamma_before=decision.predicted_gamma_before,
        predicted_gamma_after=decision.predicted_gamma_after,
        measured_gamma_before=decision.measured_gamma_before,
        packet_loss_pct=decision.packet_loss_pct,
        delay_ms=decision.delay_ms,
        issued_at_ms=decision.decided_at_ms,
        expires_at_ms=None if expiry_ms is None else decision.decided_at_ms + expiry_ms,
    )


def forced_record(
    group: str,
    latest: ControlRecord | None,
    changes: Mapping[str, Any],
    now_ms: int,
    expiry_ms: int | None = None,
) -> ControlRecord:
    """Return an operator's record (reason ``forced``): the group's newest record with ``changes`` applied.

    Args:
        group: Producer group.
        latest: The group's newest record on the topic (None: start from librdkafka's defaults,
            :data:`LIBRDKAFKA_DEFAULTS`).
        changes: ``{property: value}`` with librdkafka names (``acks``, ``batch.num.messages``,
            ``linger.ms``, ``message.timeout.ms``, ``enable.idempotence``) or the hints
            ``poll_interval_ms`` (ms), ``producers``.
        now_ms: Issue time, ms since the epoch UTC.
        expiry_ms: Lifetime, ms (None: never expires).

    Raises:
        ConfigError: a property or value outside the allowed ones (names it).
    """
    base = LIBRDKAFKA_DEFAULTS
    if latest is not None:
        base = GroupConfig(
            acks=latest.acks,
            batch_num_messages=latest.batch_num_messages,
            message_timeout_ms=latest.message_timeout_ms,
            linger_ms=latest.linger_ms,
            enable_idempotence=latest.enable_idempotence,
        )
    try:
        config = base.with_changes(changes)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    if "enable.idempotence" in changes and bool(changes["enable.idempotence"]) != config.enable_idempotence:
        raise ConfigError(f"enable.idempotence=true needs acks=all (got acks={config.acks})")
    record = ControlRecord(
        group=group,
        version=(latest.version if latest is not None else 0) + 1,
        acks=config.acks,
        enable_idempotence=config.enable_idempotence,
        batch_num_messages=config.batch_num_messages,
        linger_ms=config.linger_ms,
        message_timeout_ms=config.message_timeout_ms,
        poll_interval_ms=config.poll_interval_ms,
        producers=config.producers,
        reason="forced",
        issued_at_ms=now_ms,
        expires_at_ms=None if expiry_ms is None else now_ms + expiry_ms,
    )
    try:
        return record.validate()
    except MalformedRecordError as exc:
        raise ConfigError(exc.detail) from None


class ControlPublisher:
    """Writes control records to the control topic and waits for each acknowledgement.

    Args:
        config: librdkafka config with ``bootstrap.servers`` (security from ``KAFKA_AUDIT_KAFKA_*`` unless
            given); copied.
        topic: The control topic (created compacted, one partition, on the first write if missing).
        timeout_ms: Longest wait for a write's acknowledgement (also its ``message.timeout.ms``), ms.
        producer_factory: Builds the producer from its config (tests pass a fake).
        create_topic: Create the topic before the first write.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        topic: str,
        timeout_ms: int = 10_000,
        producer_factory: Callable[[dict[str, Any]], Any] = Producer,
        create_topic: bool = True,
    ) -> None:
        self.config = client_config(config)
        self.topic = topic
        self.timeout_ms = timeout_ms
        self._need_topic = create_topic
        self._closed = False
        self._producer = producer_factory(
            {
                **self.config,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 0,
                "message.timeout.ms": timeout_ms,
            }
        )

    def publish(self, record: ControlRecord) -> None:
        """Write ``record`` (key = its group) and wait for the acknowledgement.

        Raises:
            PublishError: the topic cannot be created, the record is invalid, or it was not acknowledged
                within ``timeout_ms``.
        """
        if self._need_topic:
            try:
                ensure_topic(
                    self.config,
                    self.topic,
                    partitions=1,
                    topic_config=CONTROL_TOPIC_CONFIG,
                    timeout_s=self.timeout_ms / 1000,
                )
            except (TopicError, KafkaException, KafkaAuditError) as exc:
                raise PublishError(f"control topic {self.topic!r}: {exc}") from exc
            self._need_topic = False
        try:
            value = encode_control(record)
        except MalformedRecordError as exc:
            raise PublishError(f"control record of group {record.group!r} not written: {exc}") from exc
        errors: list[str] = []
        delivered: list[bool] = []

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err.str())
            else:
                delivered.append(True)

        try:
            self._producer.produce(self.topic, value, record.key(), on_delivery=on_delivery)
        except (BufferError, KafkaException) as exc:
            raise PublishError(f"control record of group {record.group!r} not queued: {exc}") from exc
        self._producer.flush(self.timeout_ms / 1000)
        if errors or not delivered:
            why = "; ".join(errors) or f"no acknowledgement within {self.timeout_ms} ms"
            raise PublishError(
                f"control record v{record.version} of group {record.group!r} not written: {why}"
            )
        log.info(
            "control record v%d for group %s written to %s (%s)",
            record.version,
            record.group,
            self.topic,
            record.reason,
        )

    def close(self) -> None:
        """Flush what is in flight (up to ``timeout_ms``), then close the producer. Idempotent.

        What is still in flight after the flush is dropped (and logged); the producer is destroyed here,
        not when it is garbage collected, so it never outlives the brokers it talks to.
        """
        if self._closed:
            return
        self._closed = True
        remaining = close_producer(self._producer, self.timeout_ms / 1000)
        if remaining:
            log.warning("control topic %s: %d record(s) still in flight at close", self.topic, remaining)


__all__ = ["LIBRDKAFKA_DEFAULTS", "ControlPublisher", "PublishError", "control_record", "forced_record"]
