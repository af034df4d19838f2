"""Issue 38 acceptance: a Kafka Connect source connector audited by configuration alone, exact.

A standalone Connect worker (:class:`kafka_plumbing.connect_worker.ConnectWorker`, the Connect runtime
fetched for MirrorMaker 2) runs MirrorSourceConnector, a source connector that ships in those jars, copying
a topic of N unstamped records into ``A.<topic>``. The worker's properties add only
``producer.interceptor.classes`` (and the audit topic and window) and the interceptors' jar on its
classpath. The copy's producer tier, counted by the interceptor inside the worker's task producer, must
equal what the connector wrote: N records (a count the interceptor did not make: the source topic, read
back), window by window, every copy stamped (none unaudited), and the audit consumer's cluster tier must
equal the verifier.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from audit_consumer.ground_truth import tally, verify_topic
from audit_record import PRODUCER_TIER
from audit_record.reader import read_audit_log
from kafka_audit.verification_report import compare_with_cluster
from kafka_plumbing.connect_worker import ConnectWorker
from kafka_plumbing.interceptor_jar import PRODUCER_INTERCEPTOR, interceptor_jar
from kafka_plumbing.topics import read_to_end

from .helpers import CLUSTER, consumer_settings, running_consumer, wait_for, wait_for_final_windows

pytestmark = [pytest.mark.integration, pytest.mark.slow]
WINDOW_MS = 5_000
RECORDS = 6_000
MIRROR_SOURCE = "org.apache.kafka.connect.mirror.MirrorSourceConnector"


def _produce_unstamped(kconfig: dict[str, str], topic: str, n: int) -> None:
    """Write ``n`` plain records (no stamp) over ~6 s, so that they span two or three windows."""
    p = Producer({**kconfig, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, f"record {i}".encode(), partition=i % 3)
        if i % 500 == 499:
            p.flush(10)
            wait_s = 6.0 / (n / 500)
            p.poll(wait_s)
    assert p.flush(30) == 0


def test_connect_source_connector_audited_by_worker_configuration(
    kconfig, bootstrap, topic, audit_topics, tmp_path
):
    _produce_unstamped(kconfig, topic, RECORDS)
    copy = f"A.{topic}"
    worker = ConnectWorker(
        data_dir=tmp_path / "connect",
        bootstrap_servers=bootstrap,
        extra_classpath=[interceptor_jar()],
        worker={
            "producer.interceptor.classes": PRODUCER_INTERCEPTOR,
            "producer.kafka.audit.topic": audit_topics["audit_topic"],
            "producer.kafka.audit.window.ms": str(WINDOW_MS),
            "producer.kafka.audit.grace.ms": "1000",
            "producer.kafka.audit.snapshot.interval.ms": "1000",
        },
        connectors={
            "copy": {
                "connector.class": MIRROR_SOURCE,
                "tasks.max": "1",
                "source.cluster.alias": "A",
                "target.cluster.alias": "B",
                "source.cluster.bootstrap.servers": bootstrap,
                "target.cluster.bootstrap.servers": bootstrap,
                "topics": topic,
                "replication.factor": "1",
                "offset-syncs.topic.replication.factor": "1",
                "sync.topic.acls.enabled": "false",
                "sync.topic.configs.enabled": "false",
                "refresh.topics.interval.seconds": "1",
            }
        },
    )
    worker.start(timeout_s=90)
    try:
        wait_for(lambda: copy in AdminClient(kconfig).list_topics(timeout=5).topics, 60, f"the copy {copy}")
        with running_consumer(consumer_settings(bootstrap, [copy], audit_topics)):
            wait_for(
                lambda: sum(1 for _ in read_to_end(kconfig, copy, group_id="count", timeout_s=30)) >= RECORDS,
                90,
                "the connector's copy",
            )
            audit = audit_topics["audit_topic"]
            wait_for_final_windows(kconfig, copy, audit, 90)
    finally:
        worker.stop()

    # What the connector wrote, counted without the interceptor: the source topic's records per window
    # (MirrorSourceConnector keeps each record's CreateTime).
    source = tally(read_to_end(kconfig, topic, group_id="source-truth", timeout_s=60), topic, WINDOW_MS)
    written = {start: row.received for (start, pid), row in source.rows.items()}
    assert sum(written.values()) == RECORDS and all(pid is None for _, pid in source.rows)

    v = verify_topic(kconfig, copy, WINDOW_MS, audit_topic=audit_topics["audit_topic"])
    assert all(pid is not None for _, pid in v.rows), "unaudited copies"
    assert len({pid for _, pid in v.rows}) == 1, "one producer: the connector task's"
    for (start, _pid), row in v.rows.items():
        assert row.final, f"window {start} has no final producer snapshot"
        assert row.sent == row.unique == row.received == written[start], (start, row, written[start])
    assert sum(r.sent for r in v.rows.values()) == RECORDS
    assert compare_with_cluster(v, CLUSTER) == []

    log = read_audit_log(kconfig, audit_topics["audit_topic"])
    snaps = [r for r in log.tier(PRODUCER_TIER) if r.topic == copy]
    assert {r.window_start_ms: r.sent for r in snaps} == written
    for r in snaps:
        assert r.final and r.accounted and r.acknowledged == r.sent and r.failed == 0, r
        assert r.producer_identity is not None and r.producer_identity.library == "kafka-audit-java"
