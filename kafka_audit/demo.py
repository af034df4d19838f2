"""``kafka-audit demo``: the whole audit loop on a fresh local cluster, checked against the verifier."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from rich.console import Console

from audit_consumer.consumer import AuditConsumer
from audit_consumer.ground_truth import verify_topic
from audit_consumer.settings import AuditConsumerSettings
from audit_producer.load import run_load
from audit_producer.settings import ProducerAuditSettings
from audit_producer.workloads import PROFILES
from audit_record import PRODUCER_TIER, cluster_tier
from audit_record.reader import read_audit_log
from kafka_audit.verification_report import compare_with_cluster, verification_table
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.topics import ensure_topic

CLUSTER = "local"


def wait_until_final(config: dict, topics: list[str], deadline_s: float) -> bool:
    """Poll the audit log until every producer window of ``topics`` has final cluster snapshots."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        log = read_audit_log(config, "__kafka_audit")
        windows = {(r.topic, r.window_start_ms) for r in log.tier(PRODUCER_TIER) if r.topic in topics}
        final = {(r.topic, r.window_start_ms) for r in log.tier(cluster_tier(CLUSTER)) if r.final}
        if windows and windows <= final:
            return True
        time.sleep(1.0)
    return False


def run_demo(console: Console, duration_s: float, rate: float, window_ms: int, data_dir: Path) -> bool:
    """Run the demo; return True when every window of every topic matches the verifier exactly."""
    shutil.rmtree(data_dir, ignore_errors=True)
    cluster = KafkaCluster.create(data_dir, brokers=1)
    with console.status("starting a local Kafka (KRaft) ..."):
        cluster.start()
        cluster.wait_transactions_ready()  # the audit consumer's transactions start without retry warnings
    console.print(f"[green]Kafka running[/] at {cluster.bootstrap_servers} (data in {data_dir})")
    config = {"bootstrap.servers": cluster.bootstrap_servers}
    topics = [f"demo.{p}" for p in PROFILES]
    stop = threading.Event()
    try:
        for t in topics:
            ensure_topic(config, t, partitions=3)
        settings = AuditConsumerSettings(
            cluster=CLUSTER,
            topics=topics,
            bootstrap_servers=cluster.bootstrap_servers,
            window_ms=window_ms,
            grace_ms=5_000,
            instance_id="demo",
            default_timeliness_ms=1_000,
        )
        consumer = AuditConsumer(settings)
        consumer_thread = threading.Thread(
            target=consumer.run, args=(stop,), name="audit-consumer", daemon=True
        )
        consumer_thread.start()
        console.print(
            f"audit consumer running (tier cluster:{CLUSTER}, {window_ms // 1000} s windows); "
            f"producing {rate:.0f} msg/s per profile for {duration_s:.0f} s ..."
        )
        audit = ProducerAuditSettings(
            window_ms=window_ms, grace_ms=2_000, snapshot_interval_ms=2_000, delivery_reports="all"
        )
        loads = []
        for i, (profile, topic) in enumerate(zip(PROFILES, topics, strict=True)):
            # message.timeout.ms: a window is final only once its producers cannot deliver any more
            # (docs/DESIGN.md, invariant 8); librdkafka's default of 300 s would make the demo wait that long
            cfg = {
                **config,
                "client.id": f"demo-{profile}",
                "acks": "1",
                "linger.ms": 5,
                "message.timeout.ms": 5_000,
            }
            th = threading.Thread(
                target=lambda c=cfg, t=topic, p=profile, s=i: loads.append(
                    run_load(c, t, p, rate=rate, duration_s=duration_s, audit=audit, seed=s)
                )
            )
            th.start()
            loads.append(th)
        for th in [x for x in loads if isinstance(x, threading.Thread)]:
            th.join()
        results = [x for x in loads if not isinstance(x, threading.Thread)]
        for r in results:
            console.print(f"  producer {r.producer_id}: {r.produced:,} messages ({r.rate:,.0f} msg/s)")
        with console.status("waiting for the last windows to close (grace period) ..."):
            if not wait_until_final(config, topics, deadline_s=window_ms / 1000 + 60):
                console.print("[red]audit consumer did not finalise every window in time[/]")
        stop.set()
        consumer_thread.join(30)
        all_exact = True
        for topic in topics:
            v = verify_topic(config, topic, window_ms)
            mismatches = compare_with_cluster(v, CLUSTER)
            console.print(verification_table(v, mismatches))
            all_exact &= not mismatches
        st = consumer.stats
        console.print(
            f"audit consumer: {st.messages:,} messages, {st.transactions} transactions, "
            f"{st.snapshots} snapshots, {st.dead_letters} dead letters"
        )
        if all_exact:
            console.print(
                "[bold green]every window: audit consumer counts == verifier ground truth (exact)[/]"
            )
        else:
            console.print("[bold red]some windows differ from the ground truth[/]")
        return all_exact
    finally:
        stop.set()
        cluster.stop()
