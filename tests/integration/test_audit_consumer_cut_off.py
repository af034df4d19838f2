"""An audit consumer cut off from a partition's leader closes none of that partition's windows meanwhile.

The 5-minute soak failed once with a final window (the one its broker cut started in) whose cluster tier
counted 918 unique messages where the topic held 941; the likeliest cause is what this test reproduced
before the fix: the audit consumer let the wall clock close the windows of a partition it had read to
its end (a PARTITION_EOF), and librdkafka reports no event while a fetch from a leader that stopped
answering hangs. The consumer stayed "at its end" while messages were appended, closed their windows on
the wall clock, and counted the messages late once it read them.

Here a 3-broker cluster (replication factor 3). Only the audit consumer (its own process, its own group
id, which an iptables rule of this test's own chain matches: ``-m owner --gid-owner``) is cut off from the
broker that leads the audited partition: its packets to that broker's port are dropped (a cut, not a
reset: its fetch hangs as it did in the soak). Its group and transaction coordinators and the audit,
state and dead-letter topics are on another broker, so it commits as usual. An audited producer (this
process, not cut off) sends 50 msg/s, paused from 1.5 s before the cut to 2 s into it, so the consumer
is at its end when its fetches stop arriving; the cut lasts 3 windows + the grace after that. Then every
window's final cluster-tier snapshots must hold exactly the verifier's unique count, nothing late.
Before the fix the cut's windows counted 0 unique (all late) and the one it began in 18-101 short.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from audit_consumer.ground_truth import totals_by_window, verify_topic
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_record import cluster_tier
from audit_record.reader import read_audit_log
from kafka_audit.verification_report import cluster_counts
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.topics import ensure_topic
from tests.conftest import HOST_NETWORK_GROUP

from .helpers import CLUSTER, wait_for, wait_for_final_windows
from .test_attribution import BrokerCut

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.xdist_group(HOST_NETWORK_GROUP),  # iptables rules: with the other host-network modules
    pytest.mark.skipif(os.geteuid() != 0, reason="iptables rules and a child's group id: needs root"),
]
REPO = Path(__file__).resolve().parents[2]
WINDOW_MS, GRACE_MS = 4_000, 1_000
CUT_S = 3 * WINDOW_MS / 1000 + GRACE_MS / 1000 + 2  # the wall clock passes 3 windows' end + grace
RATE = 50  # messages/s
CONSUMER_GID = 40_041  # the audit consumer process's group: what the iptables rule matches
COORDINATOR_PARTITIONS = 10  # offsets.topic.num.partitions, transaction.state.log.num.partitions


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` of an ASCII string (Kafka maps a group / transactional id with it)."""
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(key: str) -> int:
    """The ``__consumer_offsets`` / ``__transaction_state`` partition of a group / transactional id.

    Kafka: ``Utils.abs(id.hashCode()) % partitions`` (``Utils.abs(Integer.MIN_VALUE)`` is 0).
    """
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % COORDINATOR_PARTITIONS


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader node id of ``topic``, once every partition has one."""

    def elected() -> dict[int, int] | None:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        found = {p.id: p.leader for p in t.partitions.values()} if t is not None and not t.error else {}
        return found if found and min(found.values()) >= 0 else None

    return wait_for(elected, 60, f"a leader for every partition of {topic}")


class ConsumerCut(BrokerCut):
    """:class:`~tests.integration.test_attribution.BrokerCut`'s chain, dropping every packet instead of
    resetting the connection: the consumer's fetches hang, as from a broker cut off the network."""

    TAG = "drop-"

    def rules(self) -> list[list[str]]:
        return [["-j", "DROP"]]


def test_windows_of_a_partition_whose_leader_is_cut_off_close_only_once_read(tmp_path):
    cluster = KafkaCluster.create(tmp_path / "kafka", brokers=3, heap_mb=384)
    consumer_proc: subprocess.Popen | None = None
    cut: ConsumerCut | None = None
    stop_producing = threading.Event()
    sending = threading.Event()
    producer_errors: list[BaseException] = []
    try:
        cluster.start()
        bootstrap = cluster.bootstrap_servers
        kconfig = {"bootstrap.servers": bootstrap}
        # The coordinators' topics exist once a transactional producer and the group used them.
        warm = Producer({**kconfig, "transactional.id": "warm-up"})
        warm.init_transactions(60)
        group = "g.cut-off"
        ensure_topic(kconfig, "warm-up", partitions=1)
        warm_consumer = Consumer({**kconfig, "group.id": group, "enable.auto.commit": False})
        warm_consumer.commit(offsets=[TopicPartition("warm-up", 0, 0)], asynchronous=False)
        warm_consumer.close()
        offsets = leaders(bootstrap, "__transaction_state")
        group_leader = leaders(bootstrap, "__consumer_offsets")[coordinator_partition(group)]
        # An instance id whose transaction coordinator is the group's coordinator: the kept broker.
        instance = next(
            f"cut-{i}"
            for i in range(1000)
            if offsets[coordinator_partition(f"kafka-audit.{CLUSTER}.cut-{i}")] == group_leader
        )
        kept = group_leader
        victim, third = sorted(n.node_id for n in cluster.nodes if n.node_id != kept)
        [victim_port] = [n.broker_port for n in cluster.nodes if n.node_id == victim]
        topic, audit, state, dlq = "cut.data", "cut.audit", "cut.state", "cut.dlq"
        admin = AdminClient(kconfig)
        futures = admin.create_topics(
            [NewTopic(topic, 1, replica_assignment=[[victim, kept, third]])]
            + [NewTopic(t, 1, replica_assignment=[[kept, third, victim]]) for t in (audit, state, dlq)]
        )
        for f in futures.values():
            f.result(30)
        assert leaders(bootstrap, topic) == {0: victim}
        assert leaders(bootstrap, audit) == {0: kept}

        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_AUDIT_")}
        env.update(
            PYTHONUNBUFFERED="1",
            KAFKA_AUDIT_CONSUMER_TOPICS=json.dumps([topic]),
            KAFKA_AUDIT_CONSUMER_CLUSTER=CLUSTER,
            KAFKA_AUDIT_CONSUMER_INSTANCE_ID=instance,
            KAFKA_AUDIT_CONSUMER_GROUP_ID=group,
            KAFKA_AUDIT_CONSUMER_AUDIT_TOPIC=audit,
            KAFKA_AUDIT_CONSUMER_STATE_TOPIC=state,
            KAFKA_AUDIT_CONSUMER_DLQ_TOPIC=dlq,
            KAFKA_AUDIT_CONSUMER_WINDOW_MS=str(WINDOW_MS),
            KAFKA_AUDIT_CONSUMER_GRACE_MS=str(GRACE_MS),
            KAFKA_AUDIT_CONSUMER_MAX_FINAL_WAIT_MS="0",  # the grace alone: no producer timeouts read
            KAFKA_AUDIT_CONSUMER_COMMIT_INTERVAL_MS="500",
            KAFKA_AUDIT_CONSUMER_BOOTSTRAP_SERVERS=bootstrap,
        )
        consumer_proc = subprocess.Popen(
            [sys.executable, "-m", "kafka_audit", "audit-consumer"],
            cwd=REPO,
            env=env,
            group=CONSUMER_GID,
            stdout=open(tmp_path / "audit-consumer.log", "wb"),  # noqa: SIM115 - the child holds it
            stderr=subprocess.STDOUT,
        )

        audit_settings = ProducerAuditSettings(
            window_ms=WINDOW_MS, grace_ms=GRACE_MS, snapshot_interval_ms=500, audit_topic=audit
        )

        def produce() -> None:
            try:
                p = AuditedProducer({**kconfig, "acks": "all", "linger.ms": 5}, audit_settings)
                n = 0
                while not stop_producing.is_set():
                    if sending.is_set():
                        p.produce(topic, f"m{n}".encode())
                        n += 1
                    p.poll(0)
                    time.sleep(1 / RATE)
                p.close()  # flushes, then the final snapshots of its windows
            except BaseException as exc:
                producer_errors.append(exc)

        sending.set()
        producer_thread = threading.Thread(target=produce, name="producer", daemon=True)
        producer_thread.start()

        def consumer_closed_a_window() -> bool:
            assert consumer_proc is not None and consumer_proc.poll() is None, (
                tmp_path / "audit-consumer.log"
            ).read_text()
            return any(r.final for r in read_audit_log(kconfig, audit).tier(cluster_tier(CLUSTER)))

        wait_for(consumer_closed_a_window, 120, "the audit consumer's first closed window")
        sending.clear()  # the consumer reads the partition to its end (an EOF) ...
        time.sleep(1.5)  # ... in its next fetches: the state the cut finds it in, as in the soak
        cut = ConsumerCut(victim_port, CONSUMER_GID)
        cut.apply()
        cut_ms = time.time_ns() // 1_000_000
        # Only the consumer's packets are dropped: a fetch it sent before the cut is still answered. Its
        # long poll (fetch.wait.max.ms, 500 ms) ends empty before the load resumes, so the consumer is
        # left at its end, its next fetches lost, as when the whole broker was cut off in the soak.
        time.sleep(2)
        sending.set()
        time.sleep(CUT_S)  # the cut's length is the test's input, not a wait for a condition
        cut.remove()
        lifted_ms = time.time_ns() // 1_000_000
        time.sleep(3)  # load after the cut too
        stop_producing.set()
        producer_thread.join(60)
        assert not producer_errors, producer_errors
        wait_for_final_windows(kconfig, topic, audit, 120)

        truth = totals_by_window(verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit))
        counted: dict[int, dict[str, int]] = {}
        for (start, _pid), c in cluster_counts(read_audit_log(kconfig, audit), CLUSTER, topic).items():
            w = counted.setdefault(start, {"unique": 0, "late": 0})
            w["unique"] += c["unique"]
            w["late"] += c["late"]
        got = {w: (counted.get(w, {}).get("unique"), counted.get(w, {}).get("late")) for w in truth}
        want = {w: (t["unique"], 0) for w, t in truth.items()}
        closed = {  # when the consumer closed each window, s after the cut began (lifted: after CUT_S + 2)
            r.window_start_ms: round((r.emitted_at_ms - cut_ms) / 1000, 1)
            for r in read_audit_log(kconfig, audit).tier(cluster_tier(CLUSTER))
            if r.final and r.topic == topic
        }
        assert got == want, (
            f"(unique, late) per window: {got}; verifier's unique: {want}; final snapshots at (s after "
            f"the cut began; lifted at {(lifted_ms - cut_ms) / 1000:.1f}): {closed}; consumer log tail:\n"
            + (tmp_path / "audit-consumer.log").read_text()[-3000:]
        )
    finally:
        stop_producing.set()
        if cut is not None:
            cut.remove()
        if consumer_proc is not None and consumer_proc.poll() is None:
            consumer_proc.terminate()
            try:
                consumer_proc.wait(60)
            except subprocess.TimeoutExpired:
                consumer_proc.kill()
                consumer_proc.wait(10)
        cluster.stop()
