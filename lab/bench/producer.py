"""Benchmark (not a test): what the audit costs a producer, per message, against bare confluent-kafka.

Workloads:
  * 100-byte: the same 100-byte value in every message.
  * JSON web-log: per message, ``json.dumps(record).encode()`` of one of 1,024 web-server access records
    with 8 fields (ip, ts, method, path, status, bytes, ref, ua: the ``weblog`` workload profile's lines,
    ~250 bytes), then produce: a realistic producer, whose own work per message dilutes the audit's.
Producers, each ``produce(topic, value)`` in a loop with ``poll(0)`` every 1,000 messages, ``flush()``:
  * bare ``confluent_kafka.Producer`` (the baseline)
  * floor: bare, inline, with what any per-message stamp needs (clock reading, stamp bytes, one-header
    list, timestamp and headers passed positionally); no wrapper, no counting
  * ``AuditedProducer``, ``delivery_reports="errors"`` (librdkafka reports failures only)
  * ``AuditedProducer``, ``delivery_reports="all"`` (a Python delivery callback per message)
  * plugin-audited: a bare ``confluent_kafka.Producer`` with only ``plugin.library.paths`` (and the audit
    topic) set: the librdkafka plugin (``rdkafka_plugin/``, issue 41) stamps and counts in C
  * ``AuditedProducer``, ``counting="plugin"``: the plugin stamps and counts, the Python producer reads its
    counts and sends the snapshots (issue 41 item 3)
each but the bare one with the stamp format v1 and v2 side by side (``audit_record.stamp``; the floor's
v1 stamp is a ``struct`` pack, its v2 stamp the producer's packer). "stamp B/msg" is the stamp header's
key + value, bytes per message, mean over the run's sequence numbers (Kafka's record framing adds 2
bytes, the key and value lengths, to either format).

Against a local one-broker cluster that the script starts (3-partition topic, ``linger.ms`` 5). Every
producer first runs ``WARM_UP`` messages of each workload, unmeasured (the broker's JIT compiles its
record validation for stamped records as well as bare ones before any clock starts), and every producer
connects and fetches the topic's metadata before its clock starts. Runs last about a second (2,000,000
100-byte and 500,000 JSON messages by default): runs of 0.2 s, the earlier default, spread 0.68-0.89
for one producer's ratio in three back-to-back runs of the script. The runs interleave, ABAB:
every run of the others is between two bare runs (B X B Y B Z B per workload and round; the order of
X, Y, Z rotates per round), and its ratio and added microseconds per message are taken against the mean
cost per message of those two neighbours, so load from other processes, which drifts over seconds,
shifts both sides of a ratio alike. Each cell is the median over ``--repeats`` rounds (at least 3).
"CPU us/msg" is the process's CPU time (every thread: Python and librdkafka; the broker runs in its own
JVM) per message, median; in parentheses the calling thread's share (Python, ``produce()`` with the
plugin's ``on_send``, the delivery reports, where librdkafka frees the messages). CPU time varies less
with load from other processes than msgs/s; the load average at the start and the end is printed.

``--no-broker``: the per-call CPU time of the calling thread (``time.thread_time``) with no broker: each
producer's bootstrap is unreachable and its queue large enough to hold every message, purged after the
run (the audit topic check is skipped). No network, no delivery reports: the quick way to iterate on the
hot path. The CPU ratio is a throughput proxy; end-to-end ratios run higher (librdkafka's threads and
the broker take their share of the bare run's time).

Usage: python bench/producer.py [--messages N] [--json-messages N] [--repeats R] [--no-broker]
       [--producers "SUBSTRING|..."]  (only the producers whose name contains one of them, and the bare one)
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as `python bench/producer.py`, this file's folder would shadow the project's packages.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import contextlib
import json
import os
import re
import statistics
import struct
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from confluent_kafka import Producer
from rich.console import Console
from rich.table import Table

import audit_producer.audit_topic_writer as audit_topic_writer_module
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_producer.stamp_packer import stamp_packer
from audit_producer.workloads import message_pool
from audit_record.stamp import encode_prefix, header_key, new_producer_id
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.rdkafka_plugin import rdkafka_plugin
from kafka_plumbing.topics import ensure_topic

VALUE = b"x" * 100
POOL = 1024
WARM_UP = 100_000
"""Messages of each workload every producer sends, unmeasured, before the rounds."""
PRODUCERS = (
    "bare confluent_kafka.Producer",
    "floor: + stamp v1 and timestamp, inline",
    "floor: + stamp v2 and timestamp, inline",
    "AuditedProducer, errors, stamp v1",
    "AuditedProducer, errors, stamp v2",
    "AuditedProducer, all, stamp v1",
    "AuditedProducer, all, stamp v2",
    "plugin-audited confluent_kafka.Producer",
    "AuditedProducer, counting=plugin",
)
BARE, FLOOR_V1, FLOOR, ERRORS_V1, ERRORS, ALL_V1, ALL, PLUGIN, AUDITED_PLUGIN = PRODUCERS
VERSION = {FLOOR_V1: 1, FLOOR: 2, ERRORS_V1: 1, ERRORS: 2, ALL_V1: 1, ALL: 2, PLUGIN: 2, AUDITED_PLUGIN: 2}
"""The stamp format each producer but the bare one writes."""
TARGETS = {
    ("100-byte", ERRORS): 0.55,  # issue 17's acceptance
    ("JSON web-log", ERRORS): 0.80,
    ("100-byte", PLUGIN): 0.75,  # issue 41's
    ("JSON web-log", PLUGIN): 0.90,
}
selected: tuple[str, ...] = PRODUCERS
"""The producers measured (``--producers``), the bare one first."""
UNREACHABLE = "127.0.0.1:9"
OFFLINE = {
    "bootstrap.servers": UNREACHABLE,
    "log_level": 0,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 2_000_000,
    "message.timeout.ms": 0,  # infinite: nothing times out during the run
}
_LINE = re.compile(r'^(\S+) \S+ \S+ \[([^]]+)] "(\S+) (\S+) [^"]*" (\d+) (\d+) "([^"]*)" "([^"]*)"$')


def weblog_records(n: int = POOL) -> list[dict[str, Any]]:
    """Return ``n`` web-server access records (8 fields each) parsed from the weblog profile's lines."""
    out = []
    for line in message_pool("weblog", n, seed=17):
        m = _LINE.match(line.decode())
        assert m is not None, line
        ip, ts, method, path, status, size, referrer, agent = m.groups()
        when = datetime.strptime(ts, "%d/%b/%Y:%H:%M:%S %z")
        out.append(
            {
                "ip": ip,
                "ts": int(when.timestamp() * 1000),
                "method": method,
                "path": path,
                "status": int(status),
                "bytes": int(size),
                "ref": referrer,
                "ua": agent,
            }
        )
    return out


RECORDS = weblog_records()


# ---------------------------------------------------------------------------------------------- loops
# One loop per workload and style, written out (no per-message indirection the bare loop would not
# have). The floor loops inline the stamp: a wrapper can only add to them.
def loop_small(producer: Any, topic: str, n: int) -> None:
    for i in range(n):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)


def loop_json(producer: Any, topic: str, n: int) -> None:
    records, dumps = RECORDS, json.dumps
    for i in range(n):
        value = dumps(records[i & (POOL - 1)]).encode()
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)


def _stamper(version: int) -> tuple[str, Callable[..., bytes], bytes]:
    """The floor's stamp: key, ``pack(prefix, sequence)`` and prefix (v1: a struct pack; v2: the packer)."""
    pid = new_producer_id("bench-floor", 1 if version == 1 else 2)
    prefix = encode_prefix(pid)
    if version == 1:
        return header_key(pid), struct.Struct(f">{len(prefix)}sQ").pack, prefix
    return header_key(pid), stamp_packer(prefix, 2), prefix


def stamp_bytes(producer_id: str, n: int) -> float:
    """Mean stamp header key + value bytes over sequences 1..n of ``producer_id`` (v2: varint lengths)."""
    key = len(header_key(producer_id).encode())
    fixed = len(encode_prefix(producer_id))
    if header_key(producer_id) != header_key("~" + "0" * 16):
        return key + fixed + 8
    total, lo, k = 0, 1, 1
    while lo <= n:
        hi = min(n, (1 << 7 * k) - 1)
        total += (hi - lo + 1) * k
        lo, k = hi + 1, k + 1
    return key + fixed + total / n


def loop_small_floor(producer: Any, topic: str, n: int, version: int = 2) -> None:
    key, pack, prefix = _stamper(version)
    clock = time.time_ns
    for i in range(n):
        while True:
            try:
                producer.produce(
                    topic,
                    VALUE,
                    None,
                    -1,
                    None,
                    None,
                    clock() // 1_000_000,
                    [(key, pack(prefix, i))],
                )
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)


def loop_json_floor(producer: Any, topic: str, n: int, version: int = 2) -> None:
    key, pack, prefix = _stamper(version)
    clock, records, dumps = time.time_ns, RECORDS, json.dumps
    for i in range(n):
        value = dumps(records[i & (POOL - 1)]).encode()
        while True:
            try:
                producer.produce(
                    topic,
                    value,
                    None,
                    -1,
                    None,
                    None,
                    clock() // 1_000_000,
                    [(key, pack(prefix, i))],
                )
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)


WORKLOADS: dict[str, tuple[Callable[[Any, str, int], None], Callable[..., None]]] = {
    "100-byte": (loop_small, loop_small_floor),
    "JSON web-log": (loop_json, loop_json_floor),
}


def make_producer(name: str, config: dict[str, Any], audit_topic: str) -> Any:
    if name in (BARE, FLOOR, FLOOR_V1):
        return Producer(config)
    if name == PLUGIN:  # plugin.library.paths before the plugin's own kafka.audit.* settings
        return Producer(
            {"plugin.library.paths": str(rdkafka_plugin()), **config, "kafka.audit.topic": audit_topic}
        )
    mode = "errors" if name in (ERRORS, ERRORS_V1) else "all"
    counting = "plugin" if name == AUDITED_PLUGIN else "python"
    audit = ProducerAuditSettings(
        delivery_reports=mode, audit_topic=audit_topic, stamp_version=VERSION[name], counting=counting
    )
    p = AuditedProducer(config, audit)
    p.check()  # the audit topic check (a no-op without a broker), outside the measurement
    return p


def run_loop(name: str, workload: str, producer: Any, topic: str, n: int) -> None:
    """Produce ``n`` messages of ``workload`` with the loop of producer ``name`` (the floor's inline)."""
    plain, floor = WORKLOADS[workload]
    if name in (FLOOR, FLOOR_V1):
        floor(producer, topic, n, VERSION[name])
    else:
        plain(producer, topic, n)


def close(producer: Any, timeout_s: float) -> None:
    if isinstance(producer, AuditedProducer):
        producer.close(timeout_s=timeout_s)
    else:
        producer.flush(timeout_s)
        producer.close()


# ---------------------------------------------------------------------------------------------- runs
def cpu_s() -> float:
    """CPU time of this process so far (user + system, every thread; CLOCK_PROCESS_CPUTIME_ID), s."""
    return time.process_time()


def run_broker(
    name: str, workload: str, conf: dict[str, Any], topic: str, n: int, audit_topic: str
) -> tuple[float, float, float]:
    """Messages/s, process CPU us per message and the calling thread's share of it, over ``n`` messages.

    Loop + flush. The calling thread runs Python, ``produce()`` with the plugin's ``on_send`` and the
    delivery reports (where librdkafka frees the messages); the rest is librdkafka's threads (the broker
    thread: batches, ``on_acknowledgement``) and the plugin's own.
    """
    producer = make_producer(name, {**conf, "linger.ms": 5}, audit_topic)
    producer.list_topics(topic, timeout=30)  # connected, metadata known: not part of the measurement
    c0, a0, t0 = cpu_s(), time.thread_time(), time.perf_counter()
    run_loop(name, workload, producer, topic, n)
    left = producer.flush(60)
    elapsed, cpu, app = time.perf_counter() - t0, cpu_s() - c0, time.thread_time() - a0
    close(producer, 30)
    if left:
        raise RuntimeError(f"{name}: {left} messages not delivered")
    return n / elapsed, cpu / n * 1e6, app / n * 1e6


@contextlib.contextmanager
def local_broker(console: Console | None = None) -> Iterator[tuple[dict[str, str], str, str]]:
    """A one-broker local cluster for the runs: yields its client config, the 3-partition topic and the
    audit topic's name (created by the first audited producer's check()); stopped on exit. With a
    ``console``, a status line while Kafka starts."""
    with tempfile.TemporaryDirectory() as tmp:
        cluster = KafkaCluster.create(Path(tmp), brokers=1)
        with console.status("starting Kafka ...") if console else contextlib.nullcontext():
            cluster.start()
        try:
            conf = {"bootstrap.servers": cluster.bootstrap_servers}
            tag = uuid.uuid4().hex[:8]
            audit_topic, topic = f"bench.audit.{tag}", f"bench.producer.{tag}"
            ensure_topic(conf, topic, 3)
            yield conf, topic, audit_topic
        finally:
            cluster.stop()


def run_offline(name: str, workload: str, n: int) -> tuple[float, float, float]:
    """CPU time of the calling thread per produce() call, ns, with no broker (messages purged after)."""
    producer = make_producer(name, dict(OFFLINE), "bench.audit.offline")
    t0 = time.thread_time_ns()
    run_loop(name, workload, producer, "bench.offline", n)
    cpu = time.thread_time_ns() - t0
    producer.purge()
    producer.poll(0)
    close(producer, 0)
    return cpu / n, cpu / n / 1000, cpu / n / 1000


def load_now() -> str:
    """The 1, 5 and 15-minute load averages, as ``uptime`` prints them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Silence librdkafka's connection-refused logs (the audit producers' config has no log_level)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


Run = tuple[float, float, float, float, float]
"""Value, CPU us/msg, the calling thread's CPU us/msg, the values of the bare runs just before and after."""


def rounds(
    repeats: int,
    counts: dict[str, int],
    run: Callable[[str, str, int], tuple[float, float, float]],
    console: Console,
) -> dict[tuple[str, str], list[Run]]:
    """Run every (workload, producer) ``repeats`` times, each between two bare runs (B X B Y B Z B).

    The order of the others rotates per round. Returns, per (workload, producer), one entry per run: its
    value, its CPU us/msg (all threads, then the calling thread's) and the values of the bare runs right
    before and right after it (for the bare producer: every bare run, with itself as both neighbours).
    """
    results: dict[tuple[str, str], list[Run]] = {}
    others = selected[1:]
    for r in range(repeats):
        console.print(f"round {r + 1}/{repeats}")
        order = others[r % len(others) :] + others[: r % len(others)]
        for workload, n in counts.items():
            before = run(workload, BARE, n)
            results.setdefault((workload, BARE), []).append((*before, before[0], before[0]))
            for name in order:
                value, cpu, app = run(workload, name, n)
                after = run(workload, BARE, n)
                results.setdefault((workload, BARE), []).append((*after, after[0], after[0]))
                results.setdefault((workload, name), []).append((value, cpu, app, before[0], after[0]))
                before = after
    return results


# ---------------------------------------------------------------------------------------------- table
def producer_stamp_bytes(name: str, n: int) -> float:
    """Mean stamp key + value bytes of a run of ``n`` messages of producer ``name`` (not the bare one)."""
    client = (
        "bench-floor" if name in (FLOOR, FLOOR_V1) else "rdkafka"
    )  # AuditedProducer: librdkafka's default
    return stamp_bytes(new_producer_id(client, 1 if VERSION[name] == 1 else 2), n)


def table(results: dict[tuple[str, str], list[Run]], counts: dict[str, int], offline: bool) -> Table:
    repeats = len(results[(next(iter(counts)), selected[-1])])
    where = "per-call CPU time of the calling thread, no broker" if offline else "local broker, end to end"
    sizes = ", ".join(f"{n:,} x {w}" for w, n in counts.items())
    t = Table(
        title=f"audited producer vs bare confluent-kafka: {sizes}, median of {repeats} rounds, each run "
        f"between two bare runs ({where})"
    )
    first = "CPU ns/msg" if offline else "msgs/s"
    cols = ["workload", "producer", "stamp B/msg", first, "runs", "ratio vs bare", "added us/msg", "target"]
    if not offline:
        cols.insert(5, "CPU us/msg (app thread)")
    for col in cols:
        t.add_column(col, justify="left" if col in ("workload", "producer") else "right")
    for workload in counts:
        for name in selected:
            runs = results[(workload, name)]
            values = [v for v, _, _, _, _ in runs]
            # The bare reference of a run: the mean cost per message of the bare runs around it.
            if offline:  # ns per call: the ratio is the throughput proxy bare / this
                refs = [(a + b) / 2 for _, _, _, a, b in runs]
                ratio = statistics.median(ref / v for v, ref in zip(values, refs, strict=True))
                added_us = statistics.median((v - ref) / 1000 for v, ref in zip(values, refs, strict=True))
                each = " ".join(f"{v:.0f}" for v in values)
            else:  # msgs/s
                refs = [2 / (1 / a + 1 / b) for _, _, _, a, b in runs]
                ratio = statistics.median(v / ref for v, ref in zip(values, refs, strict=True))
                added_us = statistics.median(
                    (1 / v - 1 / ref) * 1e6 for v, ref in zip(values, refs, strict=True)
                )
                each = " ".join(f"{v / 1000:.0f}k" for v in values)
            if name == BARE:
                each = f"{len(values)} runs, {min(values) / (1 if offline else 1000):,.0f}-" + (
                    f"{max(values):,.0f}" if offline else f"{max(values) / 1000:,.0f}k"
                )
            target = TARGETS.get((workload, name))
            mark = ""
            if target is not None:
                ok = round(ratio, 2) >= target
                mark = f"[green]>= {target:.2f} ok[/]" if ok else f"[red]< {target:.2f}[/]"
                if offline:
                    mark += " (end to end)"
            row = [
                workload,
                name,
                "-" if name == BARE else f"{producer_stamp_bytes(name, counts[workload]):.1f}",
                f"{statistics.median(values):,.0f}",
                each,
                f"{ratio:.2f}",
                "" if name == BARE else f"{added_us:+.2f}",
                mark,
            ]
            if not offline:
                cpu = statistics.median(c for _, c, _, _, _ in runs)
                app = statistics.median(c for _, _, c, _, _ in runs)
                row.insert(5, f"{cpu:.2f} ({app:.2f})")
            t.add_row(*row)
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=2_000_000, help="messages per run, 100-byte workload")
    ap.add_argument("--json-messages", type=int, default=500_000, help="messages per run, JSON workload")
    ap.add_argument("--repeats", type=int, default=5, help="rounds (median over them); at least 3")
    ap.add_argument("--no-broker", action="store_true", help="per-call CPU time, no broker (quick)")
    ap.add_argument(
        "--producers", default="", help="name substrings separated by |: only those producers (and bare)"
    )
    args = ap.parse_args()
    global selected
    if args.producers:
        wanted = [w.strip() for w in args.producers.split("|") if w.strip()]
        selected = (BARE, *(p for p in PRODUCERS[1:] if any(w in p for w in wanted)))
        if len(selected) == 1:
            ap.error(f"--producers {args.producers!r} names none of: {', '.join(PRODUCERS[1:])}")
    if args.repeats < 3:
        ap.error("--repeats must be at least 3 (the median of fewer runs is too noisy to compare)")
    counts = {"100-byte": args.messages, "JSON web-log": args.json_messages}
    console = Console(width=160)
    load_start = load_now()
    json_bytes = statistics.mean(len(json.dumps(r).encode()) for r in RECORDS)
    console.print(f"JSON web-log records: {len(RECORDS):,}, {json_bytes:.0f} bytes on average")
    if args.no_broker:
        audit_topic_writer_module.ensure_topic = lambda *a, **k: None  # no broker: no audit topic check
        with quiet_stderr():
            results = rounds(args.repeats, counts, lambda w, name, n: run_offline(name, w, n), console)
    else:
        with local_broker(console) as (conf, topic, audit_topic):
            with console.status("warming up ..."):  # every producer: the broker's JIT meets stamps too
                for workload in counts:
                    for name in selected:
                        run_broker(name, workload, conf, topic, WARM_UP, audit_topic)
            results = rounds(
                args.repeats,
                counts,
                lambda w, name, n: run_broker(name, w, conf, topic, n, audit_topic),
                console,
            )
    console.print(table(results, counts, args.no_broker))
    console.print(f"load average at the start {load_start}, at the end {load_now()}")


if __name__ == "__main__":
    main()
