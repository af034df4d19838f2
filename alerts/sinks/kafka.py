"""Alerts topic sink: one Avro AlertEvent (single-object encoding, ``alert.avsc``) per event.

Keyed by the alert fingerprint, so every event of one alert lands in one partition, in order. The
topic (created if missing, one partition, ``cleanup.policy=delete``, 30 days) is an event log:
readers deduplicate re-sent events by (fingerprint, starts_at_ms, status).

The producer is idempotent (``enable.idempotence``, ``acks=all``). A dispatch waits at most
``flush_timeout_ms`` for delivery reports; events still in flight then are not re-sent but reported
by a later dispatch if librdkafka finally fails them (after ``message.timeout.ms``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from alerts.codec import encode_alert
from alerts.event import AlertEvent
from alerts.exceptions import AlertSinkError
from kafka_plumbing.clients import close_producer
from kafka_plumbing.security import client_config
from kafka_plumbing.topics import TopicError, ensure_topic

log = logging.getLogger(__name__)

ALERTS_TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": str(30 * 24 * 3600 * 1000)}
STATUS_HEADER = "kafka-audit.alert-status"


class KafkaAlertSink:
    """Produces alert events to the alerts topic.

    Args:
        config: librdkafka config with at least ``bootstrap.servers`` (copied, never mutated).
        topic: Alerts topic.
        message_timeout_ms: librdkafka ``message.timeout.ms``, ms.
        flush_timeout_ms: Longest wait for delivery reports per dispatch, ms.
        create_topic: Create the topic on first use if missing.
    """

    name = "kafka"

    def __init__(
        self,
        config: Mapping[str, Any],
        topic: str,
        message_timeout_ms: int = 30_000,
        flush_timeout_ms: int = 2_000,
        create_topic: bool = True,
    ) -> None:
        self.config = client_config(config)  # SASL/TLS from KAFKA_AUDIT_KAFKA_* unless config names them
        self.topic = topic
        self.flush_timeout_ms = flush_timeout_ms
        self._need_topic = create_topic
        self._failed: list[AlertEvent] = []
        self._errors: list[str] = []
        self._closed = False
        self._producer = Producer(
            {
                **self.config,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 0,
                "message.timeout.ms": message_timeout_ms,
            }
        )

    def __repr__(self) -> str:
        servers = self.config.get("bootstrap.servers")
        return f"KafkaAlertSink(topic={self.topic!r}, bootstrap.servers={servers!r})"

    def _on_delivery(self, event: AlertEvent, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self._failed.append(event)
            self._errors.append(err.str())

    def send(self, events: Sequence[AlertEvent], now_ms: int) -> None:
        """Produce ``events`` and wait up to ``flush_timeout_ms`` for their delivery reports.

        Raises:
            AlertSinkError: the topic cannot be created, the local queue is full, or librdkafka reported
                delivery failures (now or for events of an earlier dispatch); ``failed`` names them.
        """
        if self._need_topic and events:
            try:
                ensure_topic(
                    self.config, self.topic, partitions=1, topic_config=ALERTS_TOPIC_CONFIG, timeout_s=5
                )
            except (TopicError, KafkaException) as exc:
                raise AlertSinkError(self.name, f"topic {self.topic!r}: {exc}", failed=events) from exc
            self._need_topic = False
        not_queued: list[AlertEvent] = []
        for i, event in enumerate(events):
            try:
                self._producer.produce(
                    self.topic,
                    encode_alert(event),
                    event.fingerprint.encode(),
                    headers=[(STATUS_HEADER, event.status.value.encode())],
                    on_delivery=lambda err, msg, e=event: self._on_delivery(e, err, msg),
                )
            except (BufferError, KafkaException) as exc:
                not_queued = list(events[i:])
                self._errors.append(f"{type(exc).__name__}: {exc}")
                break
        if events:
            self._producer.flush(self.flush_timeout_ms / 1000)
        else:
            self._producer.poll(0)  # serve late delivery reports of earlier dispatches
        failed, self._failed = [*self._failed, *not_queued], []
        errors, self._errors = self._errors, []
        if failed or errors:
            raise AlertSinkError(
                self.name,
                f"{len(failed)} event(s) not delivered to {self.topic!r}: {'; '.join(sorted(set(errors)))}",
                failed=failed,
            )

    def close(self) -> None:
        """Flush in-flight events (up to ``flush_timeout_ms``), then close the producer. Idempotent.

        What is still in flight after the flush is dropped (and logged): the producer is destroyed here,
        not when it is garbage collected, so it never outlives the brokers it talks to.
        """
        if self._closed:
            return
        self._closed = True
        remaining = close_producer(self._producer, self.flush_timeout_ms / 1000)
        if remaining:
            log.warning("alerts topic %s: %d event(s) still in flight at close", self.topic, remaining)
