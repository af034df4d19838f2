"""Reading the control topic: the newest control record per producer group, malformed ones reported.

The control topic is compacted and keyed by group, so the newest valid record per key is the group's
desired configuration; versions only grow. :class:`ControlTopicReader` reads it from the beginning
(``read_to_end``, used by ``kafka-audit control status`` and ``control set``) and then keep up to
the topic's current end (``poll``, used by the running controller before it numbers a new version, so
a record forced by an operator is never overtaken by an older version number). A record that does not
decode is reported in :attr:`ControlTopicReader.malformed` and changes nothing (the autotuned producer
dead-letters it; this reader only reads).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from audit_record.control_record import ControlRecord, decode_control
from audit_record.record import MalformedRecordError
from kafka_plumbing.security import client_config
from kafka_plumbing.topics import TopicError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MalformedControl:
    """A record of the control topic that did not decode.

    Attributes:
        key: Its key as text (the group it names, if any).
        partition, offset: Where it is.
        reason: ``MalformedRecordError.reason`` (``empty``, ``bad_magic``, ``undecodable``,
            ``bad_control``...).
        detail: What is wrong, in words.
    """

    key: str
    partition: int
    offset: int
    reason: str
    detail: str


class ControlTopicReader:
    """Follows the control topic: :attr:`latest` record per group, :attr:`malformed` records seen.

    Args:
        config: librdkafka config with ``bootstrap.servers`` (security from ``KAFKA_AUDIT_KAFKA_*`` unless
            given); copied.
        topic: The control topic.
    """

    def __init__(self, config: Mapping[str, Any], topic: str) -> None:
        self.config = client_config(config)
        self.topic = topic
        self.latest: dict[str, ControlRecord] = {}
        self.malformed: list[MalformedControl] = []
        self._consumer: Consumer | None = None

    def _open(self, timeout_s: float) -> Consumer | None:
        if self._consumer is not None:
            return self._consumer
        consumer = Consumer(
            {
                **self.config,
                "group.id": f"kafka-audit.control-reader.{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
            }
        )
        md = consumer.list_topics(self.topic, timeout=timeout_s).topics.get(self.topic)
        if md is None or md.error is not None or not md.partitions:
            consumer.close()
            return None
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in md.partitions])
        self._consumer = consumer
        self._partitions = set(md.partitions)
        return consumer

    def _take(self, message: Any) -> None:
        key = message.key().decode(errors="replace") if message.key() else ""
        try:
            record = decode_control(message.value())
        except MalformedRecordError as exc:
            self.malformed.append(
                MalformedControl(key, message.partition(), message.offset(), exc.reason, exc.detail)
            )
            log.warning(
                "malformed control record at %s[%d]@%d (key %r): %s",
                self.topic,
                message.partition(),
                message.offset(),
                key,
                exc,
            )
            return
        held = self.latest.get(record.group)
        if held is None or record.version >= held.version:
            self.latest[record.group] = record

    def read_to_end(self, timeout_s: float = 30.0) -> dict[str, ControlRecord]:
        """Read every record up to the end of each partition; return :attr:`latest`.

        A missing topic reads as empty.

        Raises:
            TopicError: the end is not reached within ``timeout_s``.
        """
        consumer = self._open(timeout_s)
        if consumer is None:
            return self.latest
        pending = set(self._partitions)
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TopicError(f"control topic {self.topic!r} not read to its end in {timeout_s:.0f} s")
            for m in consumer.consume(500, 0.5):
                err = m.error()
                if err is None:
                    self._take(m)
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(m.partition())
        return self.latest

    def poll(self, timeout_s: float = 5.0) -> dict[str, ControlRecord]:
        """Read up to the current end of every partition (its high watermark now); return :attr:`latest`.

        Asks the broker for the high watermarks (one request), so a record acknowledged before the call
        (e.g. an operator's forced record) is taken into account. A missing topic reads as empty.

        Raises:
            TopicError: the end is not reached within ``timeout_s``.
            KafkaException: the broker does not answer.
        """
        consumer = self._open(timeout_s)
        if consumer is None:
            return self.latest
        ends: dict[int, int] = {}
        for p in self._partitions:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=timeout_s, cached=False
            )
            if high > low:
                ends[p] = high
        deadline = time.monotonic() + timeout_s
        while ends:
            positions = consumer.position([TopicPartition(self.topic, p) for p in ends])
            for tp in positions:
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
            if not ends:
                break
            if time.monotonic() > deadline:
                raise TopicError(f"control topic {self.topic!r} not read to its end in {timeout_s:.0f} s")
            for m in consumer.consume(500, 0.2):
                if m.error() is None:
                    self._take(m)
        return self.latest

    def versions(self) -> dict[str, int]:
        """Return the newest version per group seen so far."""
        return {group: r.version for group, r in self.latest.items()}

    def close(self) -> None:
        """Close the consumer (nothing is committed)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def read_control_topic(
    config: Mapping[str, Any], topic: str, timeout_s: float = 30.0
) -> tuple[dict[str, ControlRecord], list[MalformedControl]]:
    """Return the newest record per group of ``topic`` and the malformed records (missing topic: empty).

    Raises:
        TopicError: the end is not reached within ``timeout_s``.
        KafkaException: the broker cannot be reached or refuses the request.
    """
    reader = ControlTopicReader(config, topic)
    try:
        reader.read_to_end(timeout_s)
        return dict(reader.latest), list(reader.malformed)
    finally:
        reader.close()


__all__ = ["ControlTopicReader", "MalformedControl", "read_control_topic"]
