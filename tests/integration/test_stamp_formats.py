"""Issue 36 acceptance: the v2 stamp's size on real records, and v1 and v2 producers in one window.

* A v2 stamp costs at most 16 bytes of header key + value (sequences below 2**42), measured on the
  records read back from a topic; a v1 stamp of the same producer costs 3-4 times that.
* Mixed topic: a v1 producer (``stamp_version=1``, as builds before issue 36 write) and a v2 producer
  write one topic in the same windows; the audit consumer's counts equal the verifier's, exactly, and
  every message of both is counted as sent and unique.
"""

from __future__ import annotations

import threading

import pytest

from audit_consumer.ground_truth import verify_topic
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_record import stamp
from kafka_audit.verification_report import cluster_counts, compare_with_cluster, producer_names
from kafka_plumbing.topics import read_to_end

from .helpers import CLUSTER, consumer_settings, running_consumer, wait_for_final_windows

pytestmark = pytest.mark.integration


def _stamps_read_back(kconfig: dict[str, str], topic: str) -> list[tuple[str, bytes]]:
    messages = read_to_end(kconfig, topic, group_id="pytest-stamp-size", read_committed=False, timeout_s=60)
    found = [stamp.stamp_of(m.headers()) for m in messages]
    assert all(s is not None for s in found)
    return [s for s in found if s is not None]


def test_a_v2_stamp_costs_at_most_16_bytes_on_records_read_back(kconfig, topic, audit_topics):
    audit = ProducerAuditSettings(audit_topic=audit_topics["audit_topic"], snapshot_interval_ms=1_000)
    n = 2_000
    v2 = AuditedProducer({**kconfig, "client.id": "size-v2"}, audit)
    high = AuditedProducer({**kconfig, "client.id": "size-v2-high"}, audit)
    high._seq = (1 << 42) - n // 2 - 1  # as if 2**42 messages had been sent: half below, half above
    high._stamps = high._stamp_block(high._seq + 1)  # the block of _seq + 1 (the producer keeps it so)
    v1 = AuditedProducer({**kconfig, "client.id": "size-v1"}, audit.model_copy(update={"stamp_version": 1}))
    for p in (v2, high, v1):
        for i in range(n):
            p.produce(topic, b"x" * 100, partition=i % 3)
        p.close()
    sizes: dict[str, list[tuple[int, int]]] = {v2.producer_id: [], high.producer_id: [], v1.producer_id: []}
    for key, value in _stamps_read_back(kconfig, topic):
        pid, seq = stamp.decode(key, value)
        sizes[pid.decode()].append((seq, len(key.encode()) + len(value)))
    assert all(len(s) == n for s in sizes.values())
    assert stamp.header_key(v2.producer_id) == stamp.STAMP_HEADER == "~a"
    # Sequences 1..2,000: 8 id bytes + a 1- or 2-byte varint + the 2-byte key.
    assert max(b for _, b in sizes[v2.producer_id]) <= 16
    assert {b for _, b in sizes[v2.producer_id]} == {11, 12}
    below = [b for s, b in sizes[high.producer_id] if s < 1 << 42]
    above = [b for s, b in sizes[high.producer_id] if s >= 1 << 42]
    assert len(below) == len(above) == n // 2
    assert set(below) == {16} and set(above) == {17}  # 6-byte varints up to 2**42 - 1, then 7
    assert min(b for _, b in sizes[v1.producer_id]) >= 17 + len("size-v1@") + 8  # key, id text, sequence


def test_v1_and_v2_producers_in_one_window_reconcile_exactly_against_the_verifier(
    kconfig, bootstrap, topic, audit_topics
):
    audit = ProducerAuditSettings(
        window_ms=5_000, grace_ms=1_000, snapshot_interval_ms=1_000, audit_topic=audit_topics["audit_topic"]
    )
    per_producer = 3_000
    producers = {
        1: AuditedProducer(
            {**kconfig, "client.id": "mixed-v1"}, audit.model_copy(update={"stamp_version": 1})
        ),
        2: AuditedProducer({**kconfig, "client.id": "mixed-v2"}, audit),
    }
    assert stamp.version_of(producers[1].producer_id) == 1 and stamp.version_of(producers[2].producer_id) == 2
    with running_consumer(consumer_settings(bootstrap, [topic], audit_topics)) as consumer:
        start = threading.Barrier(2)

        def write(p: AuditedProducer) -> None:
            start.wait()  # both in the same windows
            for i in range(per_producer):
                p.produce(topic, f"m{i}".encode())
                if i % 500 == 0:
                    p.poll(0)
            p.close()

        threads = [threading.Thread(target=write, args=(p,)) for p in producers.values()]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wait_for_final_windows(kconfig, topic, audit_topics["audit_topic"], 90)
        assert consumer.stats.dead_letters == 0
    v = verify_topic(kconfig, topic, 5_000, audit_topic=audit_topics["audit_topic"])
    assert v.malformed_stamps == 0
    assert compare_with_cluster(v, CLUSTER) == []
    windows = {start for start, _ in v.rows}
    shared = [
        w
        for w in windows
        if {pid for s, pid in v.rows if s == w} >= {p.producer_id for p in producers.values()}
    ]
    assert shared, "the two producers never shared a window"
    for p in producers.values():
        rows = [r for (_, pid), r in v.rows.items() if pid == p.producer_id]
        assert sum(r.sent for r in rows) == sum(r.unique for r in rows) == per_producer
        assert sum(r.lost for r in rows) == sum(r.duplicated for r in rows) == 0
    counted = cluster_counts(v.audit_log, CLUSTER, topic)
    assert sum(c["unique"] for c in counted.values()) == 2 * per_producer
    assert {pid for _, pid in counted} == {p.producer_id for p in producers.values()}
    # The v2 producer's snapshots say who it is; the v1 producer's id is its name.
    names = producer_names(v.audit_log)
    assert names[producers[2].producer_id].startswith("mixed-v2@")
    assert producers[1].producer_id.startswith("mixed-v1@")
