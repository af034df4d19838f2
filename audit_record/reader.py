"""Reading the audit topic: decode, validate, dead-letter the malformed, keep the newest snapshot per key.

Snapshots of one key always land in one partition (the key is the Kafka key), so within a partition
the last one read is the newest (DESIGN.md, invariant 2). The reader uses ``read_committed`` so it
sees the audit consumer's snapshots only once their transaction commits.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from audit_record.codec import decode
from audit_record.dead_letter import DeadLetter
from audit_record.record import AuditRecord, MalformedRecordError
from kafka_audit.errors import KafkaAuditError

COMPONENT = "audit-reader"


class AuditLogError(KafkaAuditError):
    """The audit topic could not be read to its end."""


@dataclass
class SnapshotTable:
    """The newest snapshot per key, plus what was rejected.

    Attributes:
        records: ``{record.key(): newest AuditRecord}``.
        malformed: Count of rejected messages per reason.
        read: Messages read in total.
    """

    records: dict[str, AuditRecord] = field(default_factory=dict)
    malformed: Counter[str] = field(default_factory=Counter)
    read: int = 0

    def add(self, record: AuditRecord) -> None:
        """Keep ``record`` if it is the newest of its key (callers add in offset order)."""
        self.records[record.key()] = record

    def tier(self, tier: str) -> Iterator[AuditRecord]:
        """Return the records of one tier (``producer`` or ``cluster:<name>``)."""
        return (r for r in self.records.values() if r.tier == tier)


def read_audit_log(
    config: Mapping[str, object],
    audit_topic: str,
    dlq_topic: str | None = None,
    timeout_s: float = 60.0,
) -> SnapshotTable:
    """Read ``audit_topic`` from the beginning to its end and return the newest snapshot per key.

    Args:
        config: librdkafka connection config (``bootstrap.servers``, security).
        audit_topic: The audit topic.
        dlq_topic: Where malformed messages go (original bytes, reason in headers); None only counts them.
        timeout_s: Deadline for reaching the end of every partition, s.

    Raises:
        AuditLogError: if the end is not reached within ``timeout_s``.
    """
    consumer = Consumer(
        {
            **config,
            "group.id": "kafka-audit.reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    dlq = Producer({**config, "acks": "all", "enable.idempotence": True}) if dlq_topic else None
    table = SnapshotTable()
    try:
        md = consumer.list_topics(audit_topic, timeout=10).topics.get(audit_topic)
        if md is None or md.error is not None or not md.partitions:
            return table
        consumer.assign([TopicPartition(audit_topic, p, OFFSET_BEGINNING) for p in md.partitions])
        pending = set(md.partitions)
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise AuditLogError(f"audit topic {audit_topic!r} not read to its end in {timeout_s:.0f} s")
            for m in consumer.consume(2000, 0.5):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        pending.discard(m.partition())
                    continue
                table.read += 1
                try:
                    table.add(decode(m.value()))
                except MalformedRecordError as exc:
                    table.malformed[exc.reason] += 1
                    if dlq is not None:
                        dl = DeadLetter(
                            COMPONENT,
                            exc.reason,
                            exc.detail,
                            m.topic(),
                            m.partition(),
                            m.offset(),
                            m.key(),
                            m.value(),
                        )
                        dlq.produce(dlq_topic, dl.value, dl.key, headers=dl.headers())
                        dlq.poll(0)
    finally:
        consumer.close()
        if dlq is not None:
            dlq.flush(30)
    return table
