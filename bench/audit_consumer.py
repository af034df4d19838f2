"""Benchmark (not a test): audit overhead on the local broker, 100-byte messages.

Consumers, reading the same pre-produced, audited topic:
  * bare confluent-kafka consume loop (baseline): consume(5000), touch every value
  * Kafka's own kafka-consumer-perf-test (org.apache.kafka.tools.ConsumerPerformance, from the tools jar)
  * the audit consumer (stamps parsed, dedup sets, latency, transactions with state every second)
Producers, as fast as possible, produce() + poll(0), then flush():
  * bare confluent_kafka.Producer (baseline)
  * AuditedProducer, delivery_reports="errors" (only failed reports; acknowledged derived when settled)
  * AuditedProducer, delivery_reports="all" (a Python delivery callback per message)

Each measurement is repeated (interleaved) and the median is reported; ratios are against the baseline
measured in the same run. Usage: python bench/audit_consumer.py [--messages N] [--repeats R]
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as `python bench/audit_consumer.py`, this file's folder would shadow the audit_consumer package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import statistics
import subprocess
import tempfile
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer
from rich.console import Console
from rich.table import Table

from audit_consumer.consumer import AuditConsumer
from audit_consumer.settings import AuditConsumerSettings
from audit_producer import AuditedProducer, ProducerAuditSettings
from kafka_plumbing.jvm import classpath, java_executable
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.topics import ensure_topic

VALUE = b"x" * 100


def produce_all(producer, topic: str, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush()
    return n / (time.perf_counter() - t0)


def bench_bare_producer(conf: dict, topic: str, n: int) -> float:
    p = Producer({**conf, "linger.ms": 5})
    rate = produce_all(p, topic, n)
    p.close()
    return rate


def bench_audited_producer(conf: dict, topic: str, n: int, mode: str, audit_topic: str) -> float:
    p = AuditedProducer(
        {**conf, "linger.ms": 5}, ProducerAuditSettings(delivery_reports=mode, audit_topic=audit_topic)
    )
    p.check()  # the audit topic check, outside the measurement
    rate = produce_all(p, topic, n)
    p.close()
    return rate


def bench_bare_consumer(conf: dict, topic: str, n: int) -> float:
    c = Consumer(
        {
            **conf,
            "group.id": f"bench-bare-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    got = 0
    t0 = None
    total_bytes = 0
    while got < n:
        msgs = c.consume(5000, 1.0)
        if msgs and t0 is None:
            t0 = time.perf_counter()
            got -= 0  # count from the first batch on, like the audit consumer measurement
        for m in msgs:
            if m.error() is None:
                v = m.value()
                total_bytes += len(v) if v is not None else 0
                got += 1
    rate = got / (time.perf_counter() - t0)
    c.close()
    return rate


def bench_audit_consumer(conf: dict, topic: str, n: int) -> float:
    tag = uuid.uuid4().hex[:8]
    s = AuditConsumerSettings(
        cluster="bench",
        topics=[topic],
        bootstrap_servers=conf["bootstrap.servers"],
        group_id=f"bench-audit-{tag}",
        instance_id=tag,
        audit_topic=f"bench.audit.{tag}",
        state_topic=f"bench.state.{tag}",
        dlq_topic=f"bench.dlq.{tag}",
        window_ms=60_000,
        grace_ms=60_000,
    )
    consumer = AuditConsumer(s)
    stop = threading.Event()
    th = threading.Thread(target=consumer.run, args=(stop,))
    th.start()
    while consumer.stats.messages == 0:
        time.sleep(0.002)
    t0, m0 = time.perf_counter(), consumer.stats.messages
    while consumer.stats.messages < n:
        time.sleep(0.002)
    rate = (consumer.stats.messages - m0) / (time.perf_counter() - t0)
    stop.set()
    th.join()
    return rate


def bench_perf_test(bootstrap: str, topic: str, n: int) -> float:
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
    return float(row[header.index("nMsg.sec")])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    n = args.messages
    console = Console(width=120)
    with tempfile.TemporaryDirectory() as tmp:
        cluster = KafkaCluster.create(Path(tmp), brokers=1)
        with console.status("starting Kafka ..."):
            cluster.start()
        try:
            conf = {"bootstrap.servers": cluster.bootstrap_servers}
            audit_topic = f"bench.audit.{uuid.uuid4().hex[:8]}"
            data = f"bench.data.{uuid.uuid4().hex[:8]}"
            ensure_topic(conf, data, 3)
            with console.status(f"pre-producing {n:,} audited messages ..."):
                bench_audited_producer(conf, data, n, "errors", audit_topic)
            results: dict[str, list[float]] = {}
            for r in range(args.repeats):
                console.print(f"round {r + 1}/{args.repeats}")
                for name, fn in (
                    ("bare confluent-kafka consume loop", lambda: bench_bare_consumer(conf, data, n)),
                    (
                        "kafka-consumer-perf-test (JVM)",
                        lambda: bench_perf_test(cluster.bootstrap_servers, data, n),
                    ),
                    ("audit consumer", lambda: bench_audit_consumer(conf, data, n)),
                ):
                    results.setdefault(name, []).append(fn())
                for name, fn in (
                    ("bare confluent_kafka.Producer", lambda: bench_bare_producer(conf, f"{data}.p", n)),
                    (
                        "AuditedProducer (delivery_reports=errors)",
                        lambda: bench_audited_producer(conf, f"{data}.p", n, "errors", audit_topic),
                    ),
                    (
                        "AuditedProducer (delivery_reports=all)",
                        lambda: bench_audited_producer(conf, f"{data}.p", n, "all", audit_topic),
                    ),
                ):
                    results.setdefault(name, []).append(fn())
        finally:
            cluster.stop()
    table = Table(title=f"audit overhead, {n:,} x 100-byte messages, median of {args.repeats} (local broker)")
    for col in ("component", "msgs/s (median)", "runs", "ratio vs baseline", "target"):
        table.add_column(col, justify="right" if col != "component" else "left")
    base_c = statistics.median(results["bare confluent-kafka consume loop"])
    base_p = statistics.median(results["bare confluent_kafka.Producer"])
    targets = {"audit consumer": 0.70, "AuditedProducer (delivery_reports=errors)": 0.95}
    for name, rates in results.items():
        base = base_p if "Producer" in name else base_c
        med = statistics.median(rates)
        target = targets.get(name)
        ratio = med / base
        mark = (
            ""
            if target is None
            else (f"[green]>= {target:.0%} ok[/]" if ratio >= target else f"[red]< {target:.0%}[/]")
        )
        table.add_row(name, f"{med:,.0f}", " ".join(f"{x / 1000:.0f}k" for x in rates), f"{ratio:.2f}", mark)
    console.print(table)


if __name__ == "__main__":
    main()
