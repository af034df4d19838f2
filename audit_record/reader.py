"""Reading the audit topic: decode, validate, dead-letter the malformed, keep the newest snapshot per key.

Snapshots of one key always land in one partition (the key is the Kafka key), so within a partition
the last one read is the newest (docs/DESIGN.md, invariant 2). The reader uses ``read_committed`` so it
sees the audit consumer's snapshots only once their transaction commits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from confluent_kafka import Producer

from audit_record.codec import decode
from audit_record.dead_letter import DeadLetter
from audit_record.record import AuditRecord, MalformedRecordError
from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.security import client_config
from kafka_plumbing.topics import TopicError, read_to_end

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
    dlq = (
        Producer({**client_config(config), "acks": "all", "enable.idempotence": True}) if dlq_topic else None
    )
    table = SnapshotTable()
    messages = read_to_end(
        config,
        audit_topic,
        group_id="kafka-audit.reader",
        timeout_s=timeout_s,
        missing_ok=True,
        batch_size=2000,
    )
    try:
        for m in messages:
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
    except TopicError as exc:
        raise AuditLogError(str(exc)) from exc
    finally:
        if dlq is not None:
            dlq.flush(30)
    return table
