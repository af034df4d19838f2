"""Benchmark (not a test): the audit consumer against the floors of reading a stamped backlog in Python.

Every consumer reads a pre-produced topic (``--messages`` audited 100-byte messages, one stamp
header each, ``--partitions`` partitions) from the start, with a new consumer group, on a local broker.
There are two such topics, one written with the stamp format v2 and one with v1 (``audit_record.stamp``):
the header-read floor and the audit consumer read both, side by side ("stamp v1" / "stamp v2" rows;
"stamp B/msg" is the stamp header's key + value read back from the topic, mean over its first batch);
the other rows read v2.

* bare confluent-kafka loops, ``consume(5000)``, librdkafka's default configuration (the baselines of
  issue 17): ``value()`` only; ``value()`` + ``headers()``;
* the same two loops with the audit consumer's fetch configuration (``fetch.queue.backoff.ms`` =
  :data:`audit_consumer.consumer.FETCH_QUEUE_BACKOFF_MS`, ``isolation.level=read_committed``): the
  *bare floor* and the *header-read floor*, the fastest any loop that reads the stamp can go here;
* Kafka's own ``kafka-consumer-perf-test`` (org.apache.kafka.tools.ConsumerPerformance, JVM);
* the audit consumer (stamps parsed, windows, dedup bitmaps, latency, transactions with state every
  second), one instance in this process;
* scale-out: one, then two audit consumers in one consumer group, each its own process (this script
  with ``--worker``), started together (``heartbeat.interval.ms`` 100, so the rebalance the second
  one's join causes takes a fraction of a second); aggregate rate = messages counted by the group /
  (last message counted - first message counted), across the instances (wall clock of this host).

Rates are messages/s from the first consumed batch to the last message (the group join and the first
fetch are excluded). Each round runs every measurement once, interleaved; the table shows the median of
the rounds and ratios of medians against the default bare loop and against the header-read floor
measured in the same run; "CPU us/msg" is the CPU time of the consuming Python thread per message
(``time.thread_time``; librdkafka's own threads excluded), which a busy host disturbs less than rates.
The host's load average (``os.getloadavg``) is printed before and after:
the machine may be shared, so compare ratios of one run, not rates of different runs.

Usage: python bench/audit_consumer.py [--messages N] [--repeats R] [--partitions P]
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as `python bench/audit_consumer.py`, this file's folder would shadow the audit_consumer package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import json
import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Message
from rich.console import Console
from rich.table import Table

from audit_consumer.consumer import FETCH_QUEUE_BACKOFF_MS, AuditConsumer
from audit_consumer.settings import AuditConsumerSettings
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_record.stamp import stamp_of
from kafka_plumbing.jvm import classpath, java_executable
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.topics import ensure_topic

VALUE = b"x" * 100
"""Payload of every message (100 bytes; the stamp header adds its producer id and 8-byte sequence)."""

BATCH = 5000
"""Messages per ``consume()`` call in every loop (the audit consumer's default ``batch_size``)."""

AUDIT_FETCH_CONFIG: dict[str, Any] = {
    "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
    "isolation.level": "read_committed",
}
"""The audit consumer's fetch-related consumer properties, given to the floor loops too."""


def load() -> str:
    """Return the host's 1/5/15-minute load averages as text (``os.getloadavg``)."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def pre_produce(conf: dict[str, Any], topic: str, n: int, audit_topic: str, version: int = 2) -> None:
    """Write ``n`` audited 100-byte messages to ``topic`` (AuditedProducer, errors-only reports).

    Args:
        conf: librdkafka configuration (the bootstrap servers).
        topic: The data topic.
        n: Messages.
        audit_topic: Where the producer's snapshots go.
        version: The stamp format written (1 or 2).
    """
    audit = ProducerAuditSettings(delivery_reports="errors", audit_topic=audit_topic, stamp_version=version)
    p = AuditedProducer({**conf, "linger.ms": 5}, audit)
    p.check()
    for i in range(n):
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.close()


def read_values(msgs: list[Message]) -> int:
    """The bare loop's body: touch every value; return the messages read."""
    got = 0
    for m in msgs:
        if m.error() is None:
            m.value()
            got += 1
    return got


def read_values_and_headers(msgs: list[Message]) -> int:
    """The header-read loop's body: every value and every message's header list."""
    got = 0
    for m in msgs:
        if m.error() is None:
            m.value()
            m.headers()
            got += 1
    return got


def stamp_bytes(conf: dict[str, Any], topic: str) -> float:
    """Return the mean stamp header key + value bytes of the first batch read back from ``topic``."""
    c = Consumer({**conf, "group.id": f"bench-size-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    sizes: list[int] = []
    while not sizes:
        for m in c.consume(BATCH, 1.0):
            found = stamp_of(m.headers()) if m.error() is None else None
            if found is not None:
                sizes.append(len(found[0].encode()) + len(found[1]))
    c.close()
    return statistics.mean(sizes)


Measured = tuple[float, float | None]
"""(rate, msg/s; CPU time of the consuming Python thread per message, us, None when not measured)."""


def bench_loop(conf: dict[str, Any], topic: str, n: int, body: Callable[[list[Message]], int]) -> Measured:
    """Measure ``body`` over ``consume(BATCH)`` batches until ``n`` messages."""
    c = Consumer(
        {
            **conf,
            "group.id": f"bench-loop-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    got = 0
    t0 = cpu0 = 0.0
    while got < n:
        msgs = c.consume(BATCH, 1.0)
        if msgs and not t0:
            t0, cpu0 = time.perf_counter(), time.thread_time()
        got += body(msgs)
    rate = got / (time.perf_counter() - t0)
    cpu = (time.thread_time() - cpu0) / got * 1e6
    c.close()
    return rate, cpu


def audit_settings(
    bootstrap: str, topic: str, group: str, instance: str, extra: dict[str, str] | None = None
) -> AuditConsumerSettings:
    """Settings of a benchmark audit consumer: its own output topics per group, 1-minute windows."""
    return AuditConsumerSettings(
        extra_config=extra or {},
        cluster="bench",
        topics=[topic],
        bootstrap_servers=bootstrap,
        group_id=group,
        instance_id=instance,
        audit_topic=f"{group}.audit",
        state_topic=f"{group}.state",
        dlq_topic=f"{group}.dlq",
        window_ms=60_000,
        grace_ms=60_000,
    )


def bench_audit_consumer(bootstrap: str, topic: str, n: int) -> Measured:
    """Measure one audit consumer (a thread of this process) over ``n`` messages.

    Its CPU time per message is the thread's whole run (start-up, group join and the last commit
    included) over ``n``.
    """
    tag = uuid.uuid4().hex[:8]
    consumer = AuditConsumer(audit_settings(bootstrap, topic, f"bench-audit-{tag}", tag))
    stop = threading.Event()
    cpu: list[float] = []

    def run() -> None:
        consumer.run(stop)
        cpu.append(time.thread_time())

    th = threading.Thread(target=run)
    th.start()
    while consumer.stats.messages == 0:
        time.sleep(0.002)
    t0, m0 = time.perf_counter(), consumer.stats.messages
    while consumer.stats.messages < n:
        time.sleep(0.002)
    rate = (consumer.stats.messages - m0) / (time.perf_counter() - t0)
    stop.set()
    th.join()
    return rate, cpu[0] / n * 1e6


GROUP_EXTRA_CONFIG = {"heartbeat.interval.ms": "100"}
"""Given to the instances of the scale-out rows: the first member learns of the second's join (a
rebalance) at its next heartbeat; librdkafka's default of 3 s would let it read much of the backlog alone."""


def worker(bootstrap: str, topic: str, group: str, instance: str, status: Path) -> None:
    """Run one audit consumer until SIGTERM, writing its progress to ``status`` (JSON) every 10 ms.

    It writes ``ready`` once constructed, then starts when the file ``<group>.go`` beside ``status``
    exists (all instances join the group together). ``first``: wall time (``time.time()``, s) it had
    counted its first batch, ``m0`` that batch's messages; ``last``: wall time its count last grew,
    ``messages`` the count then.
    """
    consumer = AuditConsumer(audit_settings(bootstrap, topic, group, instance, GROUP_EXTRA_CONFIG))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    tmp = status.with_suffix(".tmp")
    tmp.write_text(json.dumps({"ready": True, "messages": 0}))
    tmp.replace(status)
    go = status.parent / f"{group}.go"
    while not go.exists() and not stop.is_set():
        time.sleep(0.005)
    th = threading.Thread(target=consumer.run, args=(stop,))
    th.start()
    first = last = 0.0
    m0 = seen = 0
    while not stop.is_set():
        m = consumer.stats.messages
        if m != seen:
            last, seen = time.time(), m
            if not first:
                first, m0 = last, m
            tmp.write_text(json.dumps({"first": first, "m0": m0, "last": last, "messages": seen}))
            tmp.replace(status)
        stop.wait(0.01)
    th.join()


def bench_group(bootstrap: str, topic: str, n: int, instances: int, tmp: Path) -> Measured:
    """Return the aggregate rate, msg/s, of ``instances`` audit consumer processes in one group."""
    group = f"bench-group-{uuid.uuid4().hex[:8]}"
    status = [tmp / f"{group}.{i}.json" for i in range(instances)]
    log = (tmp / f"{group}.log").open("w")  # librdkafka's warnings of the workers
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", bootstrap, topic, group, f"i{i}", str(status[i])],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        for i in range(instances)
    ]
    deadline = time.monotonic() + 600
    try:
        while not all(s.exists() for s in status):  # every instance constructed: start them together
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"audit consumer workers did not start; see {log.name}")
            time.sleep(0.01)
        (tmp / f"{group}.go").touch()
        while True:
            reports = [json.loads(s.read_text()) for s in status if s.exists()]
            if sum(r["messages"] for r in reports) >= n:
                break
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"audit consumer group did not count {n:,} messages: {reports}")
            time.sleep(0.02)
    finally:
        for p in procs:  # only the processes started here, by PID
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
        log.close()
    counted = sum(r["messages"] - r["m0"] for r in reports)
    return counted / (max(r["last"] for r in reports) - min(r["first"] for r in reports)), None


def bench_perf_test(bootstrap: str, topic: str, n: int) -> Measured:
    """Return kafka-consumer-perf-test's ``nMsg.sec`` over ``n`` messages (JVM, default settings)."""
    out = (
        subprocess.run(
            [
                java_executable(),
                "-Xmx512m",
                "-cp",
                classpath("kafka"),
                "org.apache.kafka.tools.ConsumerPerformance",
                "--bootstrap-server",
                bootstrap,
                "--topic",
                topic,
                "--num-records",
                str(n),
                "--group",
                f"bench-perf-{uuid.uuid4().hex}",
                "--timeout",
                "60000",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()
    )
    header = [h.strip() for h in out[0].split(",")]
    row = [c.strip() for c in out[-1].split(",")]
    return float(row[header.index("nMsg.sec")]), None


BARE_DEFAULT = "bare loop, librdkafka defaults"
HEADERS_DEFAULT = "bare + headers(), defaults"
BARE_FLOOR = "bare floor (audit fetch config)"
HEADER_FLOOR = "header-read floor (stamp v2)"
HEADER_FLOOR_V1 = "header-read floor (stamp v1)"
PERF_TEST = "kafka-consumer-perf-test (JVM)"
AUDIT = "audit consumer, 1 instance (stamp v2)"
AUDIT_V1 = "audit consumer, 1 instance (stamp v1)"
GROUP_1 = "audit group, 1 process"
GROUP_2 = "audit group, 2 processes (sum)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=4, help="even, so two instances split them evenly")
    ap.add_argument("--worker", nargs=5, metavar=("BOOTSTRAP", "TOPIC", "GROUP", "INSTANCE", "STATUS"))
    args = ap.parse_args()
    if args.worker:
        bootstrap, topic, group, instance, status = args.worker
        worker(bootstrap, topic, group, instance, Path(status))
        return
    n = args.messages
    console = Console(width=140)
    load_before = load()
    results: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    sizes: dict[str, float] = {}  # stamp B/msg by "v1" / "v2"
    with tempfile.TemporaryDirectory() as tmp:
        cluster = KafkaCluster.create(Path(tmp), brokers=1)
        with console.status("starting Kafka ..."):
            cluster.start()
        try:
            bootstrap = cluster.bootstrap_servers
            conf = {"bootstrap.servers": bootstrap}
            data = f"bench.data.{uuid.uuid4().hex[:8]}"
            data_v1 = f"{data}.v1"
            for version, t in ((2, data), (1, data_v1)):
                ensure_topic(conf, t, args.partitions)
                with console.status(f"pre-producing {n:,} audited messages, stamp v{version} ..."):
                    pre_produce(conf, t, n, f"bench.audit.{uuid.uuid4().hex[:8]}", version)
                sizes[f"v{version}"] = stamp_bytes(conf, t)
            fast = {**conf, **AUDIT_FETCH_CONFIG}
            runs: list[tuple[str, Callable[[], Measured]]] = [
                (BARE_DEFAULT, lambda: bench_loop(conf, data, n, read_values)),
                (HEADERS_DEFAULT, lambda: bench_loop(conf, data, n, read_values_and_headers)),
                (BARE_FLOOR, lambda: bench_loop(fast, data, n, read_values)),
                (HEADER_FLOOR, lambda: bench_loop(fast, data, n, read_values_and_headers)),
                (HEADER_FLOOR_V1, lambda: bench_loop(fast, data_v1, n, read_values_and_headers)),
                (PERF_TEST, lambda: bench_perf_test(bootstrap, data, n)),
                (AUDIT, lambda: bench_audit_consumer(bootstrap, data, n)),
                (AUDIT_V1, lambda: bench_audit_consumer(bootstrap, data_v1, n)),
                (GROUP_1, lambda: bench_group(bootstrap, data, n, 1, Path(tmp))),
                (GROUP_2, lambda: bench_group(bootstrap, data, n, 2, Path(tmp))),
            ]
            for r in range(args.repeats):
                console.print(f"round {r + 1}/{args.repeats} (load {load()})")
                for name, fn in runs:
                    rate, cpu = fn()
                    results.setdefault(name, []).append(rate)
                    if cpu is not None:
                        cpus.setdefault(name, []).append(cpu)
        finally:
            cluster.stop()
    med = {name: statistics.median(rates) for name, rates in results.items()}
    table = Table(
        title=(
            f"audit consumer, {n:,} x 100-byte stamped messages, {args.partitions} partitions, median of "
            f"{args.repeats} (local broker; load average {load_before} before, {load()} after)"
        )
    )
    for col in (
        "reader",
        "stamp B/msg",
        "msgs/s (median)",
        "runs",
        "CPU us/msg",
        "vs bare default",
        "vs header floor",
        "target",
    ):
        table.add_column(col, justify="left" if col == "reader" else "right")
    targets = {AUDIT: (HEADER_FLOOR, 0.9), AUDIT_V1: (HEADER_FLOOR_V1, 0.9), GROUP_2: (GROUP_1, 1.0)}
    for name, rates in results.items():
        target = targets.get(name)
        mark = ""
        if target is not None:
            ratio = med[name] / med[target[0]]
            ok = ratio >= target[1] if target[1] < 1 else ratio > target[1]
            what = f">= {target[1]:.2f}x floor" if target[1] < 1 else "> 1 process"
            mark = f"[green]{ratio:.2f}: {what} ok[/]" if ok else f"[red]{ratio:.2f}: not {what}[/]"
        version = "v1" if name.endswith("(stamp v1)") else "v2"
        floor = HEADER_FLOOR_V1 if version == "v1" else HEADER_FLOOR
        table.add_row(
            name,
            f"{sizes[version]:.1f}",
            f"{med[name]:,.0f}",
            " ".join(f"{x / 1000:.0f}k" for x in rates),
            f"{statistics.median(cpus[name]):.2f}" if name in cpus else "",
            f"{med[name] / med[BARE_DEFAULT]:.2f}",
            f"{med[name] / med[floor]:.2f}",
            mark,
        )
    console.print(table)
    console.print(
        f"stamp v2 vs v1, same run: audit consumer {med[AUDIT] / med[AUDIT_V1]:.2f}x the msgs/s, header-read "
        f"floor {med[HEADER_FLOOR] / med[HEADER_FLOOR_V1]:.2f}x; stamp {sizes['v2']:.1f} vs "
        f"{sizes['v1']:.1f} B/msg ('vs header floor': against the floor of the same stamp format)"
    )
    us = {name: 1e6 / med[name] for name in med}
    console.print(
        f"wall time per message: header-read floor {us[HEADER_FLOOR]:.2f} us, "
        f"audit consumer {us[AUDIT]:.2f} us "
        f"(+{us[AUDIT] - us[HEADER_FLOOR]:.2f} us counting, dedup, transactions); headers() costs "
        f"{us[HEADER_FLOOR] - us[BARE_FLOOR]:.2f} us over the bare floor with the audit consumer's fetch "
        f"config, {us[HEADERS_DEFAULT] - us[BARE_DEFAULT]:.2f} us with librdkafka's defaults"
    )


if __name__ == "__main__":
    main()
