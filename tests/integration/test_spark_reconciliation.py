"""Issue 3 acceptance on the real broker and real Spark (local[2])."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer

from audit_consumer.ground_truth import verify_topic
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_producer.load import run_load
from audit_record import PRODUCER_TIER, stamp, window_result
from audit_record.dead_letter import COMPONENT_HEADER
from audit_record.reader import read_audit_log
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.topics import ensure_topic, read_to_end
from spark_streaming.job import ReconciliationJob
from spark_streaming.results import final_results, read_results
from spark_streaming.settings import SparkJobSettings

from .helpers import CLUSTER, consumer_settings, running_consumer, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
WINDOW_MS = 5_000


def job_settings(
    bootstrap: str, audit_topics: dict[str, str], tmp: Path, name: str, **kw
) -> SparkJobSettings:
    base = dict(
        bootstrap_servers=bootstrap,
        audit_topic=audit_topics["audit_topic"],
        dlq_topic=audit_topics["dlq_topic"],
        results_topic=f"{audit_topics['audit_topic']}.results.{name}",
        commits_topic=f"{audit_topics['audit_topic']}.commits.{name}",
        checkpoint_dir=tmp / name / "checkpoint",
        parquet_dir=tmp / name / "parquet",
        clusters=[CLUSTER],
        trigger_ms=1_000,
        watermark_delay_ms=2_000,
        grace_ms=8_000,
        heartbeat_ms=500,
        query_name=f"q-{name}-{audit_topics['audit_topic'][-8:]}",
    )
    base.update(kw)
    return SparkJobSettings(**base)


def producers_final(kconfig, topic, audit_topic) -> bool:
    snaps = [r for r in read_audit_log(kconfig, audit_topic).tier(PRODUCER_TIER) if r.topic == topic]
    return bool(snaps) and all(r.final for r in snaps)


def verifier_rates(kconfig, topic, audit_topic) -> dict[int, tuple[float, float, int, int]]:
    wait_for(lambda: producers_final(kconfig, topic, audit_topic), 60, "final producer snapshots")
    v = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topic)
    out = {}
    for start in {s for s, pid in v.rows if pid is not None}:
        rows = [r for (s, pid), r in v.rows.items() if s == start and pid is not None]
        sent, unique, dup = (
            sum(r.sent for r in rows),
            sum(r.unique for r in rows),
            sum(r.duplicated for r in rows),
        )
        if sent:
            out[start] = (max(0, sent - unique) / sent, dup / sent, sent - unique, dup)
    return out


def _all_final(kconfig, results_topic: str, windows: set[int], job: ReconciliationJob | None = None) -> bool:
    if job is not None and job.exception() is not None:
        raise AssertionError(f"the Spark query failed: {job.exception()}")
    finals = final_results(read_results(kconfig, results_topic))
    return windows <= {w for (_, w, _) in finals}


def test_loss_and_duplicates_rates_equal_verifier_exactly(tmp_path, request, audit_topics):
    cluster = KafkaCluster.create(tmp_path / "kafka", brokers=1)
    cluster.start()
    try:
        bootstrap = cluster.bootstrap_servers
        kconfig = {"bootstrap.servers": bootstrap}
        topic = f"pytest_loss_{os.urandom(4).hex()}"
        ensure_topic(kconfig, topic, 3)
        job = ReconciliationJob(job_settings(bootstrap, audit_topics, tmp_path, "lossy", grace_ms=30_000))
        job.start()
        try:
            # Consumer grace long enough that the re-sends below still find their windows open (else they
            # are late, and the verifier, which knows no lateness, would count them as duplicates).
            lenient = consumer_settings(
                bootstrap, [topic], audit_topics, window_ms=WINDOW_MS, grace_ms=25_000
            )
            with running_consumer(lenient):
                audit = ProducerAuditSettings(
                    window_ms=WINDOW_MS,
                    grace_ms=1_000,
                    snapshot_interval_ms=1_000,
                    audit_topic=audit_topics["audit_topic"],
                )
                delivered: list[tuple[int, bytes]] = []
                producer = AuditedProducer(
                    {
                        **kconfig,
                        "client.id": "lossy",
                        "acks": "0",
                        "message.timeout.ms": 1_000,
                        "linger.ms": 5,
                    },
                    audit,
                )
                stop_at = time.monotonic() + 14

                stamped: dict[int, tuple[int, int]] = {}  # i -> (CreateTime, sequence) of "m i"

                def produce() -> None:
                    i = 0
                    while time.monotonic() < stop_at:
                        for _ in range(50):
                            ts = time.time_ns() // 1_000_000
                            try:
                                producer.produce(
                                    topic,
                                    f"m {i}".encode(),
                                    timestamp=ts,
                                    on_delivery=lambda e, m: (
                                        e is None and delivered.append((m.partition(), m.value()))
                                    ),
                                )
                            except BufferError:
                                producer.poll(0.05)
                                continue
                            stamped[i] = (ts, producer.last_sequence)
                            i += 1
                        producer.poll(0.05)

                th = threading.Thread(target=produce)
                th.start()
                time.sleep(4)  # fault injection timing: stop the broker mid-run for a few seconds
                node = cluster.nodes[0]
                cluster.stop_node(node)
                time.sleep(4)
                cluster.start_node(node)
                th.join()
                producer.flush(30)
                # Re-send 300 delivered messages with their original stamp, CreateTime and partition.
                raw = Producer(kconfig)
                for part, value in random.Random(1).sample(delivered, 300):
                    ts, seq = stamped[int(value.split()[1])]
                    raw.produce(
                        topic,
                        value,
                        partition=part,
                        timestamp=ts,
                        headers=[stamp.header(producer.producer_id, seq)],
                    )
                # Malformed audit records: the job dead-letters them and keeps going.
                for i in range(200):
                    raw.produce(audit_topics["audit_topic"], os.urandom(30 + i % 50), key=b"junk")
                assert raw.flush(30) == 0
                raw.close()  # before the broker stops: a live client would log "Connection refused"
                producer.close()
                truth = verifier_rates(kconfig, topic, audit_topics["audit_topic"])
                assert sum(t[2] for t in truth.values()) > 0, "the outage should have lost messages"
                # acks=0: a "delivered" message may still have been lost in the outage; its re-send is then
                # the first copy, not a duplicate.
                assert 0 < sum(t[3] for t in truth.values()) <= 300
                wait_for(
                    lambda: _all_final(kconfig, job.s.results_topic, set(truth), job), 180, "final results"
                )
        finally:
            job.stop()
        finals = final_results(read_results(kconfig, job.s.results_topic))
        for start, (r_l, r_d, _, _) in truth.items():
            [row] = finals[(topic, start, f"cluster:{CLUSTER}")]
            assert (row["loss_rate"], row["duplicate_rate"]) == (r_l, r_d), start
        letters = list(read_to_end(kconfig, audit_topics["dlq_topic"], group_id="t"))
        spark_letters = sum(dict(m.headers())[COMPONENT_HEADER] == b"spark" for m in letters)
        assert spark_letters == 200
        assert job.metrics.dead_letters.labels("spark", "bad_magic")._value.get() > 0
    finally:
        cluster.stop()


def _spark_job_proc(bootstrap: str, s: SparkJobSettings, log) -> subprocess.Popen:
    env = {
        **os.environ,
        "KAFKA_AUDIT_SPARK_AUDIT_TOPIC": s.audit_topic,
        "KAFKA_AUDIT_SPARK_DLQ_TOPIC": s.dlq_topic,
        "KAFKA_AUDIT_SPARK_COMMITS_TOPIC": s.commits_topic,
        "KAFKA_AUDIT_SPARK_HEARTBEAT_MS": "500",
    }
    cmd = [
        sys.executable,
        "-m",
        "kafka_audit",
        "spark-job",
        "-b",
        bootstrap,
        "--checkpoint-dir",
        str(s.checkpoint_dir),
        "--parquet-dir",
        str(s.parquet_dir),
        "--cluster",
        CLUSTER,
        "--trigger-ms",
        "1000",
        "--grace-ms",
        "8000",
        "--watermark-delay-ms",
        "2000",
        "--results-topic",
        s.results_topic,
        "--query-name",
        s.query_name,
    ]
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def _parquet_finals(root: Path) -> dict[tuple[str, int, str], list[dict]]:
    rows = [
        window_result.from_spark(r)  # a map reads back as (key, value) pairs: a dict again
        for f in sorted(root.rglob("*.parquet"))
        for r in pq.read_table(f, partitioning=None).to_pylist()
    ]
    return final_results(rows)


def test_driver_sigkill_and_restart_from_checkpoint_is_exactly_once(
    kconfig, bootstrap, topic, audit_topics, tmp_path
):
    crashy = job_settings(bootstrap, audit_topics, tmp_path, "crashy")
    log = open(tmp_path / "spark-job.log", "wb")  # noqa: SIM115 - closed in the finally below
    audit = ProducerAuditSettings(
        window_ms=WINDOW_MS,
        grace_ms=1_000,
        snapshot_interval_ms=1_000,
        audit_topic=audit_topics["audit_topic"],
        delivery_reports="errors",
    )
    proc = _spark_job_proc(bootstrap, crashy, log)
    try:
        with running_consumer(consumer_settings(bootstrap, [topic], audit_topics, window_ms=WINDOW_MS)):
            result = run_load(
                {**kconfig, "client.id": "steady"}, topic, "weblog", rate=1_000, duration_s=30, audit=audit
            )
            assert result.produced > 20_000
            # Kill the driver once it has written some final windows, then again after a restart.
            for _ in range(2):
                wait_for(
                    lambda: final_results(read_results(kconfig, crashy.results_topic)), 180, "first finals"
                )
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
                proc = _spark_job_proc(bootstrap, crashy, log)
            truth = verifier_rates(kconfig, topic, audit_topics["audit_topic"])
            wait_for(
                lambda: _all_final(kconfig, crashy.results_topic, set(truth)), 240, "all final after restarts"
            )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.close()
    # An undisturbed run over the same audit topic, from scratch.
    calm = job_settings(bootstrap, audit_topics, tmp_path, "calm")
    job = ReconciliationJob(calm)
    job.start()
    try:
        wait_for(lambda: _all_final(kconfig, calm.results_topic, set(truth)), 240, "undisturbed finals")
    finally:
        job.stop()
    crashed = final_results(read_results(kconfig, crashy.results_topic))
    undisturbed = final_results(read_results(kconfig, calm.results_topic))
    keys = {(topic, w, f"cluster:{CLUSTER}") for w in truth}
    assert keys <= set(crashed)
    for key in keys:
        assert len(crashed[key]) == 1, f"{key} final {len(crashed[key])} times in the results topic"
        assert crashed[key] == undisturbed[key]
    in_parquet = _parquet_finals(crashy.parquet_dir)
    for key in keys:
        assert len(in_parquet[key]) == 1, f"{key} final {len(in_parquet[key])} times in Parquet"
        assert in_parquet[key][0] == undisturbed[key][0]
