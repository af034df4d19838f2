"""Issue 38 acceptance: the audit topic unreachable for 30 s from a Java application audited by configuration.

Three brokers. The data topic's replicas are on brokers 1 and 2 only; the audit topic's leader is broker
3. A plain Java producer (``java/PlainProducer.java``: no kafka-audit code, ``interceptor.classes`` in its
properties) runs in its own process group; an iptables rule of that group resets its connections to broker
3 for 30 s (:class:`tests.integration.test_attribution.BrokerCut`), so the interceptor's snapshots cannot
reach the audit topic while the application's records still reach theirs. The interceptor's own producer
has a short delivery timeout (``kafka.audit.producer.delivery.timeout.ms``), so its snapshots fail during
the cut and are sent again from the cumulative counts afterwards. Checked:

* every record the application sent is acknowledged (the interceptor never got in its way);
* the interceptor reports what it could not emit (its JMX counter ``SnapshotFailures`` > 0, read by the
  application before ``close()``) and no internal error;
* afterwards every window reconciles: final, the interceptor's ``sent`` per window equals the application's
  own count, and the verifier equals the producer and cluster tiers.

Needs root (process groups, iptables); runs in the host-network xdist group.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from audit_consumer.ground_truth import verify_topic
from audit_record import PRODUCER_TIER
from audit_record.reader import read_audit_log
from kafka_audit.verification_report import compare_with_cluster
from kafka_plumbing.interceptor_jar import PRODUCER_INTERCEPTOR
from kafka_plumbing.local_cluster import KafkaCluster

from .helpers import CLUSTER, consumer_settings, running_consumer, wait_for, wait_for_final_windows
from .jvm_clients import compile_plain_producer, last_json_line, plain_producer
from .test_attribution import BrokerCut

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.xdist_group("host-network"),  # tests.conftest.HOST_NETWORK_GROUP: iptables rules
    pytest.mark.skipif(os.geteuid() != 0, reason="iptables and process groups: needs root"),
]
WINDOW_MS = 5_000
RECORDS = 18_000
RATE = 400.0  # records/s: 45 s of load
CUT_S = 30.0
APP_GID = 40_038  # the application's process group: what the iptables rule matches


def _create(bootstrap: str, name: str, assignment: list[list[int]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, len(assignment), replica_assignment=assignment)])[name].result(30)

    def led() -> bool:
        md = admin.list_topics(name, timeout=10).topics[name]
        return len(md.partitions) == len(assignment) and all(
            p.leader == assignment[p.id][0] for p in md.partitions.values()
        )

    wait_for(led, 30, f"the preferred leaders of {name}")


def test_audit_topic_unreachable_for_30s_records_arrive_and_windows_reconcile(tmp_path, audit_topics):
    cluster = KafkaCluster.create(tmp_path / "kafka", brokers=3, heap_mb=384)
    cut: BrokerCut | None = None
    app: subprocess.Popen[str] | None = None
    classes = compile_plain_producer(tmp_path / "classes")
    try:
        cluster.start()
        bootstrap = cluster.bootstrap_servers
        kconfig = {"bootstrap.servers": bootstrap}
        topic = f"pytest.jvm.unreachable.{os.urandom(4).hex()}"
        _create(bootstrap, topic, [[1, 2], [2, 1], [1, 2]])
        _create(bootstrap, audit_topics["audit_topic"], [[3, 1, 2]])
        [audit_port] = [n.broker_port for n in cluster.nodes if n.node_id == 3]
        props = {
            "bootstrap.servers": bootstrap,
            "client.id": "java-app",
            "acks": "all",
            "linger.ms": "5",
            "interceptor.classes": PRODUCER_INTERCEPTOR,
            "kafka.audit.topic": audit_topics["audit_topic"],
            "kafka.audit.window.ms": str(WINDOW_MS),
            "kafka.audit.grace.ms": "1000",
            "kafka.audit.snapshot.interval.ms": "1000",
            # The interceptor's own producer gives up on a snapshot after 8 s (then sends it again).
            "kafka.audit.producer.request.timeout.ms": "3000",
            "kafka.audit.producer.delivery.timeout.ms": "8000",
        }
        with running_consumer(consumer_settings(bootstrap, [topic], audit_topics)):
            app = subprocess.Popen(
                plain_producer(classes, topic, RECORDS, RATE, WINDOW_MS, props),
                group=APP_GID,
                stdout=subprocess.PIPE,
                stderr=open(tmp_path / "app.stderr", "w"),  # noqa: SIM115 - the child holds it
                text=True,
            )

            def snapshots() -> int:
                assert app is not None and app.poll() is None, (tmp_path / "app.stderr").read_text()[-3000:]
                log = read_audit_log(kconfig, audit_topics["audit_topic"])
                return sum(1 for r in log.tier(PRODUCER_TIER) if r.topic == topic)

            wait_for(snapshots, 30, "the interceptor's first snapshots")
            cut = BrokerCut(audit_port, APP_GID)
            cut.apply()
            time.sleep(CUT_S)  # the cut's length is the test's input, not a wait for a condition
            cut.remove()
            stdout, _ = app.communicate(timeout=120)
            assert app.returncode == 0, (tmp_path / "app.stderr").read_text()[-3000:]
            result = last_json_line(stdout)
            wait_for_final_windows(kconfig, topic, audit_topics["audit_topic"], 90)
        v = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topics["audit_topic"])
    finally:
        if cut is not None:
            cut.remove()
        if app is not None and app.poll() is None:
            app.kill()
            app.wait(10)
        cluster.stop()

    print(f"\napplication: {result}")
    assert result["sent"] == result["acknowledged"] == RECORDS and result["failed"] == 0
    counters = result["interceptor"]
    assert counters["SnapshotFailures"] > 0, counters  # what it could not emit, reported
    assert counters["InternalErrors"] == 0 and counters["WindowsDropped"] == 0, counters
    assert all(pid is not None for _, pid in v.rows)
    own = {int(k): n for k, n in result["windows"].items()}  # the application's count per window
    assert {start: row.sent for (start, _pid), row in v.rows.items()} == own
    for row in v.rows.values():
        assert row.final and row.sent == row.unique == row.received, row
    assert compare_with_cluster(v, CLUSTER) == []
    assert v.audit_log is not None
    for r in v.audit_log.tier(PRODUCER_TIER):
        if r.topic == topic:
            assert r.accounted and r.acknowledged == r.sent and r.failed == 0, r
