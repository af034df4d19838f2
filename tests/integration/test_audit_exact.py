"""Acceptance (a) and (c): audit-consumer counts equal the verifier's, exactly; duplicates are duplicates."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Producer

from audit_consumer.ground_truth import verify_topic
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_producer.load import run_load
from audit_record import cluster_tier, stamp
from audit_record.reader import read_audit_log
from kafka_audit.verification_report import cluster_counts, compare_with_cluster

from .helpers import CLUSTER, consumer_settings, running_consumer, wait_for_final_windows

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_200k_messages_three_producers_counts_equal_verifier(kconfig, bootstrap, topic, audit_topics):
    audit = ProducerAuditSettings(
        window_ms=5_000,
        grace_ms=1_000,
        snapshot_interval_ms=1_000,
        audit_topic=audit_topics["audit_topic"],
        delivery_reports="errors",
    )
    per_producer = [66_667, 66_667, 66_666]
    with running_consumer(consumer_settings(bootstrap, [topic], audit_topics)) as consumer:
        results = []
        threads = [
            threading.Thread(
                target=lambda n=n, i=i: results.append(
                    run_load(
                        {**kconfig, "client.id": f"p{i}", "acks": "all", "linger.ms": 20},
                        topic,
                        ("social", "weblog", "game")[i],
                        rate=20_000,
                        count=n,
                        duration_s=None,
                        audit=audit,
                        seed=i,
                    )
                )
            )
            for i, n in enumerate(per_producer)
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert sorted(r.produced for r in results) == sorted(per_producer)
        wait_for_final_windows(kconfig, topic, audit_topics["audit_topic"], 120)
    v = verify_topic(kconfig, topic, 5_000, audit_topic=audit_topics["audit_topic"])
    assert sum(r.unique for r in v.rows.values()) == 200_000
    assert sum(r.sent for r in v.rows.values()) == 200_000
    assert len({pid for _, pid in v.rows}) == 3
    assert compare_with_cluster(v, CLUSTER) == []
    counted = cluster_counts(v.audit_log, CLUSTER, topic)
    assert sum(c["received"] for c in counted.values()) == 200_000
    assert sum(c["duplicated"] for c in counted.values()) == 0
    # Every window has 3 partitions' worth of snapshots (one per partition a producer wrote to) at most.
    assert all(c["partitions"] <= 3 for c in counted.values())
    assert consumer.stats.dead_letters == 0


def test_resent_sequence_numbers_are_duplicates_not_extra_messages(kconfig, bootstrap, topic, audit_topics):
    audit = ProducerAuditSettings(
        window_ms=5_000, grace_ms=1_000, snapshot_interval_ms=1_000, audit_topic=audit_topics["audit_topic"]
    )
    sent: list[tuple[int, int, bytes]] = []  # partition, CreateTime, value of each delivered message

    def remember(err, msg):
        assert err is None
        sent.append((msg.partition(), msg.timestamp()[1], msg.value()))

    n = 3_000
    with running_consumer(consumer_settings(bootstrap, [topic], audit_topics)):
        producer = AuditedProducer({**kconfig, "client.id": "dups"}, audit)
        for i in range(n):
            producer.produce(topic, f"message {i}".encode(), partition=i % 3, on_delivery=remember)
            if i % 500 == 0:
                producer.poll(0)
        producer.flush()
        assert len(sent) == n
        # Re-send 400 of them unchanged (same stamp, same CreateTime, same partition), as a retry would,
        # and 100 of those a third time.
        raw = Producer(kconfig)
        resent = sent[::7][:400]
        for part, ts, value in resent + resent[:100]:
            seq = int(value.split()[1]) + 1  # "message i" was the i+1-th produce() call
            headers = [stamp.header(producer.producer_id, seq)]
            raw.produce(topic, value, partition=part, timestamp=ts, headers=headers)
        assert raw.flush(30) == 0
        producer.close()
        wait_for_final_windows(kconfig, topic, audit_topics["audit_topic"], 90)
    v = verify_topic(kconfig, topic, 5_000, audit_topic=audit_topics["audit_topic"])
    assert compare_with_cluster(v, CLUSTER) == []
    log = read_audit_log(kconfig, audit_topics["audit_topic"])
    cluster = [r for r in log.tier(cluster_tier(CLUSTER)) if r.topic == topic]
    assert sum(r.unique for r in cluster) == n
    assert sum(r.duplicated for r in cluster) == 500
    assert sum(r.received for r in cluster) == n + 500
    assert sum(row.sent for row in v.rows.values()) == n
    assert sum(row.lost for row in v.rows.values()) == 0
