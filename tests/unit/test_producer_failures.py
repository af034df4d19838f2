"""Failed deliveries reported by real librdkafka (no broker) are counted and their snapshot encodes.

Regression: a message that fails before librdkafka assigns it a partition (it timed out, or was purged,
while the topic's metadata never arrived) has ``Message.partition() is None`` in confluent-kafka, not
-1. The producer stored None as the partition of its per-partition breakdown, so the next snapshot's
encoding raised ``TypeError`` from ``poll()`` / ``close()``: a producer cut off from its cluster for
``message.timeout.ms`` crashed its application. Found by ``bench/producer.py --no-broker``.
"""

from __future__ import annotations

import time

from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_record import decode
from audit_record.record import PartitionDelivery
from tests.unit.test_producer_check import FakeProducer

UNREACHABLE = "127.0.0.1:1"  # nothing listens on port 1: every connection is refused at once


def audited(message_timeout_ms: int) -> tuple[AuditedProducer, FakeProducer]:
    p = AuditedProducer(
        {"bootstrap.servers": UNREACHABLE, "log_level": 0, "message.timeout.ms": message_timeout_ms},
        ProducerAuditSettings(audit_topic="t.audit"),
    )
    p._audit_topic.producer.close()
    sink = FakeProducer()
    p._audit_topic.producer = sink  # the snapshots are what is checked; the data producer stays librdkafka's
    p._audit_topic.checked = True  # no audit topic check: there is no cluster
    return p, sink


def partitions_of_last_snapshot(sink: FakeProducer, topic: str) -> tuple[int, list[PartitionDelivery]]:
    records = [r for r in (decode(v) for _, v in sink.produced) if r.topic == topic]
    assert records, "no snapshot of the topic was sent"
    return records[-1].failed, records[-1].partitions


def test_timed_out_before_a_partition_was_assigned_counts_under_partition_minus_1() -> None:
    p, sink = audited(message_timeout_ms=300)
    for _ in range(3):
        p.produce("t.data", b"x" * 10)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(p._producer) > 0:
        p.poll(0.1)
    assert len(p._producer) == 0, "librdkafka did not time the messages out"
    p.close(timeout_s=1)  # emits the final snapshot: raised TypeError before the fix
    failed, parts = partitions_of_last_snapshot(sink, "t.data")
    assert failed == 3
    assert [(q.partition, q.failed, q.failed_by_error) for q in parts] == [(-1, 3, {"_MSG_TIMED_OUT": 3})]


def test_purged_before_a_partition_was_assigned_counts_under_partition_minus_1() -> None:
    p, sink = audited(message_timeout_ms=0)  # 0: no timeout; only the purge fails them
    p.produce("t.data", b"x")
    p.produce("t.data", b"y")
    p._producer.purge()
    p.poll(0)
    p.close(timeout_s=1)
    failed, parts = partitions_of_last_snapshot(sink, "t.data")
    assert failed == 2
    assert [(q.partition, q.failed, q.failed_by_error) for q in parts] == [(-1, 2, {"_PURGE_QUEUE": 2})]
