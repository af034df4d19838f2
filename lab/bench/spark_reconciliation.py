"""Benchmark (not a test): the Spark reconciliation job at scale, on local[2].

Synthetic audit records for T topics x P producers x 1-minute windows (default 1,000 x 50): per
window and topic, every producer sends one producer-tier snapshot and the cluster tier one snapshot per
producer. Event time is simulated and runs SPEEDUP times faster than the wall clock, so several windows
pass in a short run; heartbeats carry the simulated clock. Prints records/s through the job,
micro-batch duration (median, p95) against the trigger interval, and for every window the delay from the
input's event time passing the window's watermark threshold (end + grace + watermark delay) to its
final result being written to the results topic.

Issue 17 item 4 (the defaults): 3,000 topics x 50 producers, 1-minute windows in real time (speedup 1),
local[2]; targets: median micro-batch below the trigger interval, every window final within two
triggers after the input's event time passes its watermark threshold. One line per micro-batch is
printed as it completes (input rows, duration, watermark, windows final so far), then the table, with
the host's load average (``os.getloadavg``) before and after: the machine may be shared.

Usage: python bench/spark_reconciliation.py [--topics 3000] [--producers 50] [--windows 3] [--speedup 1]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import os
import statistics
import tempfile
import threading
import time
import uuid
from datetime import datetime
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
    """Return the (key, value) audit records of one window: per topic, each producer's snapshot and the
    cluster tier's snapshot of that producer's messages, topic by topic.

    The records of ``topic-0000`` are encoded once; every other topic's are copies with the topic name
    replaced in the bytes (same length, and the Avro single-object encoding has no checksum), so
    building a window costs milliseconds instead of minutes of encoding on a busy host.
    """
    template: list[tuple[bytes, bytes]] = []
    for p in range(producers):
        pid = f"p{p}@bench.1.{p:08x}"
        for rec in (
            AuditRecord(
                tier="producer",
                source=f"p{p}",
                producer_id=pid,
                topic="topic-0000",
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
                topic="topic-0000",
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
            template.append((rec.key().encode(), encode(rec)))
    out = []
    for t in range(topics):
        name = f"topic-{t:04d}".encode()
        out.extend((k.replace(b"topic-0000", name), v.replace(b"topic-0000", name)) for k, v in template)
    return out


def tree_cpu_s() -> float:
    """Return the CPU time (user + system, s) of this process and its live descendants but the broker.

    That is the Spark driver (this process and its JVM) and the Python workers, from ``/proc``
    (``utime`` + ``stime``, Linux): the job's CPU, which a busy host does not inflate the way it
    inflates wall time.
    """
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total = 0.0
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            if b"kafka.Kafka" in Path(f"/proc/{pid}/cmdline").read_bytes():  # the broker is not the job
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
        todo.extend(children.get(pid, []))
    return total


def load() -> str:
    """Return the host's 1/5/15-minute load averages as text (``os.getloadavg``)."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def print_progress(
    job: ReconciliationJob, stop: threading.Event, final_seen: dict[int, float], console: Console
) -> None:
    """Print one line per completed micro-batch (Spark's progress) until ``stop`` is set.

    Spark's progress is fetched only after the job wrote a new batch (``batches_written``): converting
    it through py4j every second took a tenth of the driver's samples.
    """
    last = -1
    seen = job.batches_written
    while not stop.wait(1.0):
        if job.batches_written == seen:
            continue
        try:
            p = job.query.lastProgress
        except Exception:  # the query is stopping
            return
        if not p or p["batchId"] == last:
            continue  # not reported yet: next second
        seen = job.batches_written
        last = p["batchId"]
        wm = (p.get("eventTime") or {}).get("watermark", "-")
        state = sum(op.get("numRowsTotal", 0) for op in p.get("stateOperators") or [])
        console.print(
            f"batch {last}: {p.get('numInputRows', 0):,} rows in "
            f"{p['durationMs'].get('triggerExecution', 0) / 1000:.1f} s, watermark {wm}, state rows "
            f"{state:,}, windows final {len(final_seen)} (load {load()})"
        )


def iso_ms(text: str) -> int:
    """Return an ISO-8601 UTC time as Spark's progress gives it (``2026-11-23T21:22:03.397Z``), epoch ms."""
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def watermark_to_final(
    progress: list[dict[str, Any]], final_seen: dict[int, float], grace_ms: int, mono_minus_wall: float
) -> dict[int, float]:
    """Per window start (ms): seconds from Spark's watermark passing its end + grace to its final row.

    Spark computes a micro-batch's watermark at the end of the batch before it (``eventTime.watermark``
    in the progress of the batch that uses it), so the watermark passed a window at the end of the batch
    before the first one whose watermark is at or past the window's end + grace. The input-based rows of
    the table also hold the wait for that earlier batch to start and its run.

    Args:
        progress: Spark's ``recentProgress`` (one dict per micro-batch, oldest first).
        final_seen: Window start (ms) -> ``time.monotonic()`` when its final result was seen.
        grace_ms: The job's grace, ms.
        mono_minus_wall: ``time.monotonic() - time.time()``, s (progress times are wall-clock).
    """
    # (watermark a batch used, ms; end of the batch before it, monotonic s)
    ends: list[tuple[int, float]] = []
    prev_end: float | None = None
    for p in progress:
        wm = (p.get("eventTime") or {}).get("watermark")
        start = iso_ms(p["timestamp"]) / 1000 + mono_minus_wall
        if wm is not None and prev_end is not None:
            ends.append((iso_ms(wm), prev_end))
        prev_end = start + p["durationMs"].get("triggerExecution", 0) / 1000
    out: dict[int, float] = {}
    for w, seen in final_seen.items():
        passed = next((at for wm, at in ends if wm >= w + WINDOW_MS + grace_ms), None)
        if passed is not None:
            out[w] = seen - passed
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=3000)
    ap.add_argument("--producers", type=int, default=50)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--speedup", type=float, default=1.0, help="simulated event time / wall time")
    ap.add_argument("--trigger-ms", type=int, default=10_000)
    args = ap.parse_args()
    console = Console(width=120)
    load_before = load()
    grace_ms = 30_000
    with tempfile.TemporaryDirectory() as tmp:
        cluster = KafkaCluster.create(Path(tmp) / "kafka", brokers=1, heap_mb=1024)
        with console.status("starting Kafka ..."):
            cluster.start()
        job: ReconciliationJob | None = None
        progress: list[dict[str, Any]] = []
        try:
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
            stop_progress = threading.Event()
            printer = threading.Thread(
                target=print_progress, args=(job, stop_progress, final_seen, console), daemon=True
            )
            printer.start()
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
            pending = {
                w: window_records(sim0 + w * WINDOW_MS, args.topics, args.producers, 0) for w in range(1)
            }
            t_feed0 = time.monotonic()
            cpu0 = tree_cpu_s()
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
            cpu_s = tree_cpu_s() - cpu0
            stop_progress.set()
            printer.join(30)
            progress = list(job.query.recentProgress)
            mono_minus_wall = time.monotonic() - time.time()
        finally:  # also on Ctrl-C: no Spark or Kafka process outlives the benchmark
            if job is not None:
                job.stop()
                if job.spark is not None:
                    job.spark.stop()
            cluster.stop()
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress if p.get("numInputRows", 0) > 0]
    rates = [p["processedRowsPerSecond"] for p in progress if p.get("numInputRows", 0) > 0]
    table = Table(
        title=(
            f"Spark reconciliation job, local[2]: {args.topics:,} topics x {args.producers} producers, "
            f"1-minute windows, event time x{args.speedup:g} (load average {load_before} before, "
            f"{load()} after)"
        )
    )
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
    for w, d in sorted(watermark_to_final(progress, final_seen, grace_ms, mono_minus_wall).items()):
        table.add_row(
            f"window +{(w - sim0) // 1000} s: Spark watermark past end + grace -> final",
            f"{d:.1f} s",
            f"< {2 * trig:.0f} s",
        )
    table.add_row("windows final", f"{len(final_seen)}/{args.windows} (run {done_s:.0f} s)", "")
    processed = sum(p.get("numInputRows", 0) for p in progress)
    if processed:
        per_row_us = cpu_s / processed * 1e6
        need = per_row_us * total / (args.windows * WINDOW_MS / 1000 / args.speedup) / 1e6
        table.add_row(
            "job CPU (driver, JVM, Python workers) per input row",
            f"{per_row_us:,.0f} us ({cpu_s:,.0f} CPU s / {processed:,} rows, feed included)",
            "",
        )
        table.add_row("cores that needs at the input rate", f"{need:.2f}", "< 2 (local[2])")
    console.print(table)
    ok = med < trig and delays and max(delays) < 2 * trig and len(final_seen) == args.windows
    console.print("[green]targets met[/]" if ok else "[red]targets not met[/]")


if __name__ == "__main__":
    main()
