"""Benchmark (not a test): what the JVM interceptors cost Kafka's own perf tools (issue 38, item 7).

Producers, ``kafka-producer-perf-test`` (``org.apache.kafka.tools.ProducerPerformance``, its defaults:
acks=all, idempotent, linger.ms 5, batch.size 16 KiB; ``--throughput -1``) on 100-byte and 1-KiB records:

  * bare: no interceptor (the baseline)
  * floor: ``StampOnlyInterceptor`` (``lab/bench/java``, compiled here with javac): the v2 stamp header
    and the CreateTime on a copy of the record, what any stamping interceptor must do, nothing else
  * audited: ``io.kafkaaudit.interceptors.AuditProducerInterceptor`` (the jar ``make bootstrap`` builds)

Consumers, ``kafka-consumer-perf-test`` (``ConsumerPerformance``, a new group per run, from the earliest
offset) on 100-byte records that the audited producer wrote (so every record carries a stamp to count):

  * bare: no interceptor
  * floor: ``StampReadOnlyConsumerInterceptor`` (``lab/bench/java``, compiled here against the interceptors'
    jar): every record's stamp read in place as the audited consumer reads it, nothing else
  * audited: ``io.kafkaaudit.interceptors.AuditConsumerInterceptor``

Rate = the tool's own figure: the producer's ``records/sec`` over its send loop (JVM start excluded), the
consumer's ``fetch.nMsg.sec`` (rebalance time excluded). Against a local one-broker cluster the script
starts, on the same host: the broker shares the CPU. Every producer run writes into a 3-partition topic of its
own, deleted after it, so every run starts from an empty log. The runs interleave: every
floor, audited run is between two bare runs (B F B A B per workload and round, the order of F and A
alternating per round), and its ratio is taken against the mean rate of those two
neighbours, so load drifting over seconds shifts both sides of a ratio alike. Each cell is the median
over ``--repeats`` rounds (at least 3). The load average is printed before and after.

The broker keeps its logs in ``/dev/shm`` (a tmpfs; ``--log-dir`` to change): on disk, the kernel's writeback
of the 1-KiB runs' 800 MB each made neighbouring runs of one variant differ by up to 40% (69k and 117k
records/s), which no interleaving averages out in 3 rounds; in memory only the CPU is shared.

Run lengths: the consumer reads 2-3 million records/s here, so a 2,000,000-record run lasted under a
second, most of it class loading and JIT compilation of both the client and the interceptor; 10,000,000
records (3-5 s a run) measure the steady state the per-record cost is about. 1-KiB producer runs of
400,000 records (4 s) varied by +-10% from run to run; 800,000 (about 8 s) halve that.

``--jfr DIR``: also record one audited 100-byte producer run and one audited consumer run with Java Flight
Recorder (``-XX:StartFlightRecording``) into ``DIR/audited-producer.jfr`` and ``DIR/audited-consumer.jfr``
and print their CPU samples by thread and hottest methods (``jfr print --events jdk.ExecutionSample``), to
see where an audited run's time goes.

``--consumer-variant NAME=PROPERTY=VALUE,...`` (repeatable): consumers only, with a row per variant of
``AuditConsumerInterceptor`` (those client properties added; ``{group}`` in a value is the run's group), the
variants' order rotating by one each round; e.g. what the flushes cost, with a snapshot interval longer than
the run and no automatic commit (whose ``onCommit`` also flushes):
``--consumer-records 30000000 --repeats 4 --consumer-variant
quiet=kafka.audit.snapshot.interval.ms=600000,enable.auto.commit=false``.

The consumer's counting alone, without a broker or a fetch (ns a record, against building the records):
``lab/bench/java/ConsumerCountBench.java`` (how to run it is in its comment).

Usage: python lab/bench/jvm_interceptors.py [--records N] [--kb-records N] [--consumer-records N]
       [--repeats R] [--jfr DIR] [--consumer-variant NAME=PROPERTY=VALUE,... ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as `python lab/bench/jvm_interceptors.py`, this file's folder would shadow the project's packages.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import collections
import os
import re
import resource
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from confluent_kafka.admin import AdminClient
from rich.console import Console
from rich.table import Table

from kafka_plumbing.interceptor_jar import CONSUMER_INTERCEPTOR, PRODUCER_INTERCEPTOR, interceptor_jar
from kafka_plumbing.jvm import classpath, java_executable
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.topics import ensure_topic

JAVA_DIR = Path(__file__).parent / "java"
FLOOR = "StampOnlyInterceptor"
CONSUMER_FLOOR = "StampReadOnlyConsumerInterceptor"
AUDIT_TOPIC = "__kafka_audit_bench"
SHM = Path("/dev/shm")
"""A tmpfs: the broker's log writes cost no disk writeback, whose bursts made 1-KiB runs vary by +-20%."""
TARGETS = {("producer", 100): 0.8, ("producer", 1024): 0.95, ("consumer", 100): 0.9}
"""audited/bare targets of issue 38 (Acceptance, "Benchmark")."""
PRODUCED = re.compile(r"(\d+) records sent, ([\d.]+) records/sec")
JVM_FLAGS = ["-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true"]


def load() -> str:
    """The host's 1/5/15-minute load averages (``os.getloadavg``)."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def commit() -> str:
    """The repository's HEAD commit, short form."""
    root = Path(__file__).resolve().parents[2]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    return head.stdout.strip() or "?"


def compile_floor(out: Path) -> Path:
    """Compile the floors (``java/StampOnlyInterceptor.java``, ``java/StampReadOnlyConsumerInterceptor.java``)
    against kafka-clients and the interceptors' jar into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    javac = str(Path(java_executable()).with_name("javac"))
    srcs = [str(JAVA_DIR / f"{name}.java") for name in (FLOOR, CONSUMER_FLOOR)]
    cp = os.pathsep.join([classpath("kafka"), str(interceptor_jar())])
    subprocess.run([javac, "-d", str(out), "-cp", cp, *srcs], check=True)
    return out


def hottest(recording: Path, top: int = 12) -> list[tuple[str, int]]:
    """Summarise a JFR recording's CPU samples (``jfr print --events jdk.ExecutionSample``).

    Returns rows (what, samples): the total, the samples per thread, the samples with a kafka-audit frame
    anywhere on the stack (inclusive: what the interceptor costs, its callees included), then the
    ``top`` most frequent top frames (exclusive).
    """
    jfr = str(Path(java_executable()).with_name("jfr"))
    text = subprocess.run(
        [jfr, "print", "--events", "jdk.ExecutionSample", str(recording)], capture_output=True, text=True
    ).stdout
    threads: collections.Counter[str] = collections.Counter()
    frames: collections.Counter[str] = collections.Counter()
    audit = total = 0
    for event in text.split("jdk.ExecutionSample")[1:]:
        total += 1
        thread = re.search(r'sampledThread = "([^"]*)"', event)
        threads[re.sub(r"-\d+$", "-N", thread.group(1)) if thread else "?"] += 1
        stack = re.findall(r"^\s+([\w$.<>]+)\(", event.split("stackTrace = [", 1)[-1], re.M)
        if stack:
            frames[stack[0]] += 1
        if any(f.startswith("io.kafkaaudit.") for f in stack):
            audit += 1
    rows = [("all samples", total)]
    rows += [(f"thread {t}", n) for t, n in threads.most_common(6)]
    rows.append(("a kafka-audit frame on the stack (inclusive)", audit))
    rows += [(f"top frame {f}", n) for f, n in frames.most_common(top)]
    return rows


class Bench:
    """The cluster, the classpath and the runs' commands."""

    def __init__(self, cluster: KafkaCluster, classes: Path) -> None:
        self.bootstrap = cluster.bootstrap_servers
        self.cp = os.pathsep.join([classpath("kafka"), str(interceptor_jar()), str(classes)])
        self.groups = collections.Counter[str]()
        self.runs = 0
        self.cpu: dict[tuple[str, str, str], list[float]] = collections.defaultdict(list)
        """(tool, variant, topic) -> CPU seconds (user + system) of each run's JVM, start-up included."""

    def _java(
        self, main: str, args: list[str], jfr: Path | None = None, cpu: list[float] | None = None
    ) -> str:
        flags = [*JVM_FLAGS, *([f"-XX:StartFlightRecording=filename={jfr},settings=profile"] if jfr else [])]
        cmd = [java_executable(), *flags, "-cp", self.cp, main, *args]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if cpu is not None:
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if done.returncode != 0:
            raise RuntimeError(
                f"{main} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
        return done.stdout

    def produce(
        self, variant: str, topic: str, records: int, size: int, jfr: Path | None = None, fresh: bool = True
    ) -> float:
        """One ``kafka-producer-perf-test`` run; return its records/s.

        ``fresh``: into a new 3-partition topic ``<topic>-<n>``, deleted after the run, so that every run
        starts from an empty log (a topic filling up to its retention and deleting segments slowed later
        runs).
        """
        name = topic
        if fresh:
            self.runs += 1
            name = f"{topic}-{self.runs}"
            ensure_topic({"bootstrap.servers": self.bootstrap}, name, partitions=3)
        try:
            return self._produce(variant, name, topic, records, size, jfr)
        finally:
            if fresh:
                admin = AdminClient({"bootstrap.servers": self.bootstrap})
                for future in admin.delete_topics([name], operation_timeout=30).values():
                    future.result(timeout=60)

    def _produce(
        self, variant: str, name: str, topic: str, records: int, size: int, jfr: Path | None
    ) -> float:
        props = [f"bootstrap.servers={self.bootstrap}", f"client.id=bench-{variant}"]
        if variant == "floor":
            props.append(f"interceptor.classes={FLOOR}")
        elif variant == "audited":
            props += [f"interceptor.classes={PRODUCER_INTERCEPTOR}", f"kafka.audit.topic={AUDIT_TOPIC}"]
        args = ["--topic", name, "--num-records", str(records), "--record-size", str(size)]
        out = self._java(
            "org.apache.kafka.tools.ProducerPerformance",
            [*args, "--throughput", "-1", "--command-property", *props],
            jfr,
            None if jfr else self.cpu[("producer", variant, topic)],
        )
        found = PRODUCED.findall(out)
        if not found or int(found[-1][0]) != records:
            raise RuntimeError(f"no summary of {records} records in:\n{out[-2000:]}")
        return float(found[-1][1])

    def consume(
        self,
        variant: str,
        topic: str,
        records: int,
        work: Path,
        jfr: Path | None = None,
        extra: Sequence[str] = (),
    ) -> float:
        """One ``kafka-consumer-perf-test`` run (a new group); return its fetch.nMsg.sec.

        ``variant``: ``bare``, ``floor``, or any other name for ``AuditConsumerInterceptor`` with the client
        properties ``extra`` added (``{group}`` in one is replaced by the run's group).
        """
        self.groups[variant] += 1
        group = f"bench-{variant}-{self.groups[variant]}-{os.getpid()}"
        config = work / f"{group}.properties"
        lines = [f"client.id={group}", "auto.offset.reset=earliest"]
        if variant == "floor":
            lines.append(f"interceptor.classes=io.kafkaaudit.interceptors.{CONSUMER_FLOOR}")
        elif variant != "bare":
            lines += [f"interceptor.classes={CONSUMER_INTERCEPTOR}", f"kafka.audit.topic={AUDIT_TOPIC}"]
            lines += [p.replace("{group}", group) for p in extra]
        config.write_text("\n".join(lines) + "\n")
        out = self._java(
            "org.apache.kafka.tools.ConsumerPerformance",
            [
                "--bootstrap-server", self.bootstrap, "--topic", topic, "--num-records", str(records),
                "--group", group, "--command-config", str(config), "--timeout", "60000",
            ],
            jfr,
            None if jfr else self.cpu[("consumer", variant, topic)],
        )  # fmt: skip
        lines = [ln for ln in out.splitlines() if ln.count(",") >= 9 and not ln.startswith("start.time")]
        if not lines:
            raise RuntimeError(f"no consumer summary in:\n{out[-2000:]}")
        fields = [f.strip() for f in lines[-1].split(",")]
        if int(fields[4]) < records:
            raise RuntimeError(f"consumed {fields[4]} of {records} records:\n{out[-2000:]}")
        return float(fields[9])


def interleaved(run: dict[str, Callable[[], float]], order: list[str]) -> dict[str, tuple[float, float]]:
    """Run ``bare`` before, between and after the variants of ``order``; return variant -> (rate, ratio).

    Bare's entry is (its median rate, 1.0); a variant's ratio is its rate over the mean of its neighbours.
    """
    bare = [run["bare"]()]
    out: dict[str, tuple[float, float]] = {}
    for variant in order:
        rate = run[variant]()
        bare.append(run["bare"]())
        out[variant] = (rate, rate / ((bare[-2] + bare[-1]) / 2))
    out["bare"] = (statistics.median(bare), 1.0)
    return out


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``NAME=P=V,P=V`` -> (name, [``P=V``, ...]); ``NAME=`` -> (name, []).

    Raises:
        argparse.ArgumentTypeError: without ``=``, with an empty name, or with a name the table uses already.
    """
    name, sep, props = text.partition("=")
    if not sep or not name or name in ("bare", "floor", "audited"):
        raise argparse.ArgumentTypeError(f"{text!r}: NAME=[PROPERTY=VALUE,...], NAME not bare/floor/audited")
    return name, [p for p in props.split(",") if p]


def main() -> None:
    """Start a broker, run the rounds, print the table (see the module comment)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000, help="100-byte records per producer run")
    parser.add_argument("--kb-records", type=int, default=800_000, help="1-KiB records per producer run")
    parser.add_argument("--consumer-records", type=int, default=10_000_000, help="records per consumer run")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (at least 3)")
    parser.add_argument(
        "--consumer-variant",
        action="append",
        type=parse_variant,
        default=[],
        metavar="NAME=[PROPERTY=VALUE,...]",
        help="also run AuditConsumerInterceptor with these client properties added, as row NAME"
        " (repeatable; the producer runs are then skipped)",
    )
    parser.add_argument(
        "--jfr", type=Path, default=None, help="record one audited producer run with JFR here"
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=SHM if os.access(SHM, os.W_OK) else Path(tempfile.gettempdir()),
        help="where the broker keeps its logs (default: /dev/shm, a tmpfs, where writable)",
    )
    args = parser.parse_args()
    if args.repeats < 3:
        parser.error("--repeats: at least 3")
    console = Console(width=160)
    started = datetime.now(UTC)
    load_before = load()
    console.print(
        f"# lab/bench/jvm_interceptors.py, {started:%Y-%m-%d %H:%M} UTC, load average {load_before}"
    )
    console.print(f"broker log directory under {args.log_dir} ({'tmpfs' if args.log_dir == SHM else 'disk'})")
    with tempfile.TemporaryDirectory(prefix="kaudit-jvm-bench-", dir=args.log_dir) as tmp:
        work = Path(tmp)
        cluster = KafkaCluster.create(work / "kafka", brokers=1, metrics=False)
        cluster.start()
        try:
            kconfig = {"bootstrap.servers": cluster.bootstrap_servers}
            ensure_topic(kconfig, "bench-consume", partitions=3)
            ensure_topic(kconfig, AUDIT_TOPIC, partitions=1)
            bench = Bench(cluster, compile_floor(work / "classes"))
            # The consumer's topic: stamped records, written once by the audited producer.
            bench.produce("audited", "bench-consume", args.consumer_records, 100, fresh=False)
            bench.cpu.clear()
            rows: dict[tuple[str, int, str], list[tuple[float, float]]] = collections.defaultdict(list)
            extra: dict[str, list[str]] = {"floor": [], "audited": [], **dict(args.consumer_variant)}
            for r in range(args.repeats):
                console.print(f"round {r + 1}/{args.repeats} (load average {load()})")
                order = ["floor", "audited"] if r % 2 == 0 else ["audited", "floor"]
                sizes = [(100, args.records, "bench-100"), (1024, args.kb_records, "bench-1k")]
                for size, n, topic in [] if args.consumer_variant else sizes:
                    runs = {
                        v: (lambda v=v, n=n, topic=topic, size=size: bench.produce(v, topic, n, size))
                        for v in ("bare", "floor", "audited")
                    }
                    for v, cell in interleaved(runs, order).items():
                        rows[("producer", size, v)].append(cell)
                runs = {
                    v: (
                        lambda v=v: bench.consume(
                            v, "bench-consume", args.consumer_records, work, extra=extra.get(v, ())
                        )
                    )
                    for v in ("bare", *extra)
                }
                turn = list(extra)  # with variants, each in turn first
                order = turn[r % len(turn) :] + turn[: r % len(turn)] if args.consumer_variant else order
                for v, cell in interleaved(runs, order).items():
                    rows[("consumer", 100, v)].append(cell)
            if args.jfr is not None:
                args.jfr.mkdir(parents=True, exist_ok=True)
                jfr = args.jfr / "audited-producer.jfr"
                bench.produce("audited", "bench-100", args.records, 100, jfr=jfr)
                console.print(f"JFR recording of one audited 100-byte producer run: {jfr}")
                for what, n in hottest(jfr):
                    console.print(f"  {n:7,d}  {what}")
                jfr = args.jfr / "audited-consumer.jfr"
                bench.consume("audited", "bench-consume", args.consumer_records, work, jfr=jfr)
                console.print(f"JFR recording of one audited consumer run: {jfr}")
                for what, n in hottest(jfr):
                    console.print(f"  {n:7,d}  {what}")
        finally:
            cluster.stop()
    table = Table(
        title=f"JVM interceptors vs bare perf tools: producer {args.records:,} x 100 B and"
        f" {args.kb_records:,} x 1 KiB, consumer {args.consumer_records:,} x 100 B;"
        f" median of {args.repeats} rounds, each run between two bare runs"
        " (local broker on the same 2-core host)"
    )
    topics = {
        ("producer", 100): "bench-100",
        ("producer", 1024): "bench-1k",
        ("consumer", 100): "bench-consume",
    }
    columns = (
        "tool",
        "record",
        "interceptor",
        "records/s",
        "runs (k/s)",
        "CPU s/run",
        "ratio vs bare",
        "target",
    )
    for col in columns:
        table.add_column(col, justify="left" if col in ("tool", "interceptor") else "right")
    names = {
        ("producer", "floor"): f"floor: {FLOOR}",
        ("producer", "audited"): "AuditProducerInterceptor",
        ("consumer", "floor"): f"floor: {CONSUMER_FLOOR}",
        ("consumer", "audited"): "AuditConsumerInterceptor",
    }
    for v, props in args.consumer_variant:
        names[("consumer", v)] = f"AuditConsumerInterceptor, {', '.join(props) or 'as shipped'}"
    rank = {"bare": 0, "floor": 1, "audited": 2}
    rank.update({v: 3 + i for i, (v, _) in enumerate(args.consumer_variant)})
    for (tool, size, variant), cells in sorted(
        rows.items(), key=lambda kv: (kv[0][0] == "consumer", kv[0][1], rank[kv[0][2]])
    ):
        name = names.get((tool, variant), "none (bare)")
        rate = statistics.median(c[0] for c in cells)
        ratio = statistics.median(c[1] for c in cells)
        target = TARGETS.get((tool, size)) if variant == "audited" else None
        verdict = "" if target is None else f">= {target} {'ok' if ratio >= target else 'MISSED'}"
        table.add_row(
            f"kafka-{tool}-perf-test",
            "100 B" if size == 100 else "1 KiB",
            name,
            f"{rate:,.0f}",
            " ".join(f"{c[0] / 1000:.0f}" for c in cells),
            f"{statistics.median(bench.cpu[(tool, variant, topics[(tool, size)])]):.1f}",
            f"{ratio:.2f}",
            verdict,
        )
    console.print(table)
    console.print(f"load average after: {load()}; commit {commit()}; {datetime.now(UTC):%H:%M} UTC")


if __name__ == "__main__":
    main()
