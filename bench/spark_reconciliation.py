"""Benchmark (not a test): the Spark reconciliation job at scale, on local[2].

Synthetic audit records for T topics x P producers x 1-minute windows (default 1,000 x 50): per
window and topic, every producer sends one producer-tier snapshot and the cluster tier one snapshot per
producer. Event time is simulated and runs SPEEDUP times faster than the wall clock, so several windows
pass in a short run; heartbeats carry the simulated clock. Prints records/s through the job,
micro-batch duration (median, p95) against the trigger interval, and for every window the delay from the
input's event time passing the window's watermark threshold (end + grace + watermark delay) to its
final result being written to the results topic.

Usage: python bench/spark_reconciliation.py [--topics 1000] [--producers 50] [--windows 3] [--speedup 6]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import statistics
import tempfile
import time
import uuid
from typing import Any

from confluent_kafka import Producer
from rich.console import Console
from rich.table import Table

from audit_record import AuditRecord, encode
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.topics import ensure_topic
from spark_streaming.decode import HEARTBEAT_KEY
from spark_streaming.job import ReconciliationJob
from spark_streaming.settings import SparkJobSettings

WINDOW_MS = 60_000


def window_records(start: int, topics: int, producers: int, emitted_at: int) -> list[tuple[bytes, bytes]]:
    out = []
    for t in range(topics):
        topic = f"topic-{t:04d}"
        for p in range(producers):
            pid = f"p{p}@bench.1.{p:08x}"
            for rec in (
                AuditRecord(
                    tier="producer",
                    source=f"p{p}",
                    producer_id=pid,
                    topic=topic,
                    window_start_ms=start,
                    window_end_ms=start + WINDOW_MS,
                    sent=1000,
                    acknowledged=1000,
                    final=True,
                    emitted_at_ms=emitted_at,
                ),
                AuditRecord(
                    tier="cluster:bench",
                    source="g",
                    producer_id=pid,
                    topic=topic,
                    partition=p % 3,
                    window_start_ms=start,
                    window_end_ms=start + WINDOW_MS,
                    received=1001,
                    unique=999,
                    duplicated=2,
                    final=True,
                    emitted_at_ms=emitted_at,
                ),
            ):
                out.append((rec.key().encode(), encode(rec)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--producers", type=int, default=50)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--speedup", type=float, default=6.0, help="simulated event time / wall time")
    ap.add_argument("--trigger-ms", type=int, default=10_000)
    args = ap.parse_args()
    console = Console(width=120)
    grace_ms = 30_000
    with tempfile.TemporaryDirectory() as tmp:
        cluster = KafkaCluster.create(Path(tmp) / "kafka", brokers=1, heap_mb=1024)
        with console.status("starting Kafka ..."):
            cluster.start()
        conf = {"bootstrap.servers": cluster.bootstrap_servers}
        tag = uuid.uuid4().hex[:8]
        audit_topic = f"bench.audit.{tag}"
        ensure_topic(conf, audit_topic, 3)
        final_seen: dict[int, float] = {}
        batch_rows: list[int] = []

        def on_results(batch_id: int, rows: list[dict[str, Any]]) -> None:
            now = time.monotonic()
            batch_rows.append(len(rows))
            for r in rows:
                if r["state"] == "final":
                    final_seen.setdefault(r["window_start_ms"], now)

        s = SparkJobSettings(
            bootstrap_servers=cluster.bootstrap_servers,
            audit_topic=audit_topic,
            results_topic=f"bench.results.{tag}",
            commits_topic=f"bench.commits.{tag}",
            dlq_topic=f"bench.dlq.{tag}",
            checkpoint_dir=Path(tmp) / "cp",
            parquet_dir=Path(tmp) / "pq",
            clusters=["bench"],
            trigger_ms=args.trigger_ms,
            grace_ms=grace_ms,
            watermark_delay_ms=5_000,
            heartbeat_ms=0,
            shuffle_partitions=4,
        )
        job = ReconciliationJob(s, listeners=[on_results])
        with console.status("starting Spark ..."):
            job.start()
        producer = Producer({**conf, "linger.ms": 50, "batch.size": 1_000_000, "compression.type": "lz4"})
        sim0 = (time.time_ns() // 1_000_000) // WINDOW_MS * WINDOW_MS - 10 * WINDOW_MS
        wall0 = time.monotonic()
        total = 0
        watermark_passed: dict[int, float] = {}

        def sim_now() -> int:
            return sim0 + int((time.monotonic() - wall0) * 1000 * args.speedup)

        thresholds = {
            sim0 + w * WINDOW_MS: sim0 + (w + 1) * WINDOW_MS + grace_ms + s.watermark_delay_ms
            for w in range(args.windows)
        }

        def crossed(ts: int) -> None:  # the input's event time passed a window's watermark threshold
            for start, threshold in thresholds.items():
                if ts >= threshold:
                    watermark_passed.setdefault(start, time.monotonic())

        console.print(
            f"{args.topics} topics x {args.producers} producers x {args.windows} one-minute windows, "
            f"event time x{args.speedup:g}, trigger {args.trigger_ms} ms"
        )
        # Each window's snapshots are emitted during the window after it (as producers and consumers do),
        # spread over that simulated minute; heartbeats carry the simulated clock.
        sim_end = sim0 + (args.windows + 1) * WINDOW_MS + grace_ms + 20_000
        pending = {w: window_records(sim0 + w * WINDOW_MS, args.topics, args.producers, 0) for w in range(1)}
        t_feed0 = time.monotonic()
        for w in range(args.windows):
            records = (
                pending.pop(w)
                if w in pending
                else window_records(sim0 + w * WINDOW_MS, args.topics, args.producers, 0)
            )
            n = len(records)
            emit_start = sim0 + (w + 1) * WINDOW_MS
            for i, (key, value) in enumerate(records):
                due = emit_start + int(i / n * WINDOW_MS)
                while sim_now() < due:
                    time.sleep(0.005)
                producer.produce(audit_topic, value, key, timestamp=due)
                crossed(due)
                total += 1
                if i % 5000 == 0:
                    producer.poll(0)
                    beat = sim_now()
            producer.produce(audit_topic, b"", HEARTBEAT_KEY, timestamp=beat)
            crossed(beat)
        feed_s = time.monotonic() - t_feed0
        while sim_now() < sim_end:
            beat = sim_now()
            producer.produce(audit_topic, b"", HEARTBEAT_KEY, timestamp=beat)
            crossed(beat)
            producer.poll(0)
            time.sleep(0.5)
        producer.flush(60)
        deadline = time.monotonic() + 300
        while len(final_seen) < args.windows and time.monotonic() < deadline:
            beat = sim_now()
            producer.produce(audit_topic, b"", HEARTBEAT_KEY, timestamp=beat)
            crossed(beat)
            producer.poll(0)
            time.sleep(0.5)
        done_s = time.monotonic() - t_feed0
        progress = list(job.query.recentProgress)
        job.stop()
        job.spark.stop()
        cluster.stop()
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress if p.get("numInputRows", 0) > 0]
    rates = [p["processedRowsPerSecond"] for p in progress if p.get("numInputRows", 0) > 0]
    table = Table(title="Spark reconciliation job, local[2]")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    trig = args.trigger_ms / 1000
    med = statistics.median(durations) if durations else float("nan")
    p95 = sorted(durations)[int(0.95 * (len(durations) - 1))] if durations else float("nan")
    table.add_row("audit records fed", f"{total:,} in {feed_s:.0f} s ({total / feed_s:,.0f}/s)", "")
    table.add_row(
        "job throughput (processedRowsPerSecond, median)",
        f"{statistics.median(rates):,.0f} rows/s" if rates else "-",
        "",
    )
    table.add_row("micro-batch duration median / p95", f"{med:.2f} s / {p95:.2f} s", f"median < {trig:.0f} s")
    delays = [final_seen[w] - watermark_passed[w] for w in final_seen if w in watermark_passed]
    for w in sorted(final_seen):
        if w in watermark_passed:
            d = final_seen[w] - watermark_passed[w]
            table.add_row(
                f"window +{(w - sim0) // 1000} s: input past watermark -> final",
                f"{d:.1f} s",
                f"< {2 * trig:.0f} s",
            )
    table.add_row("windows final", f"{len(final_seen)}/{args.windows} (run {done_s:.0f} s)", "")
    console.print(table)
    ok = med < trig and delays and max(delays) < 2 * trig and len(final_seen) == args.windows
    console.print("[green]targets met[/]" if ok else "[red]targets not met[/]")


if __name__ == "__main__":
    main()
