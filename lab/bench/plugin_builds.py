"""Benchmark (not a test): two or more builds of the librdkafka plugin against a bare producer, one process.

To tell whether a change to ``rdkafka_plugin/`` helps, in the same rounds against the same broker: each
round runs a bare ``confluent_kafka.Producer`` and then each named build (``name=path/to/.so``, set through
``KAFKA_AUDIT_RDKAFKA_PLUGIN``), with ``lab/bench/producer.py``'s loop, settings and measurement
(:func:`producer.run_broker`: messages/s, process CPU us/msg, the calling thread's CPU us/msg). Prints every
run and the medians. A build's ratio is its median over bare's median; the broker warms up over the first
rounds, so compare builds with each other (their CPU per message is the steadier figure), and use
``producer.py`` for the ratio against bare.

Build one with ``make -C rdkafka_plugin OUT=/tmp/plugin-a PYTHON=../.venv/bin/python``.

Usage: python lab/bench/plugin_builds.py MESSAGES ROUNDS NAME=PATH [NAME=PATH ...]
       (WORKLOAD=JSON for the JSON web-log records instead of 100-byte ones)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # producer.py, this folder's benchmark

import os
import statistics

import producer as bench


def main() -> None:
    if len(sys.argv) < 4 or not all("=" in a for a in sys.argv[3:]):
        sys.exit(__doc__)
    n, rounds = int(sys.argv[1]), int(sys.argv[2])
    builds = dict(a.split("=", 1) for a in sys.argv[3:])
    workload = "JSON web-log" if os.environ.get("WORKLOAD") == "JSON" else "100-byte"
    runs: dict[str, list[tuple[float, float, float]]] = {"bare": [], **{b: [] for b in builds}}
    with bench.local_broker() as (conf, topic, audit_topic):
        bench.run_broker(bench.BARE, workload, conf, topic, bench.WARM_UP, audit_topic)
        for r in range(rounds):
            for name in runs:
                if name != "bare":
                    os.environ["KAFKA_AUDIT_RDKAFKA_PLUGIN"] = builds[name]
                kind = bench.BARE if name == "bare" else bench.PLUGIN
                out = bench.run_broker(kind, workload, conf, topic, n, audit_topic)
                runs[name].append(out)
                rate, cpu, app = out
                print(f"round {r + 1} {name}: {rate:,.0f} msgs/s, CPU {cpu:.3f} us/msg (app {app:.3f})")
    base = statistics.median(rate for rate, _, _ in runs["bare"])
    print(f"{workload}, {n:,} messages a run, medians of {rounds} rounds:")
    for name, rs in runs.items():
        rate = statistics.median(x[0] for x in rs)
        cpu, app = statistics.median(x[1] for x in rs), statistics.median(x[2] for x in rs)
        share = rate / base
        print(f"  {name:10s} {rate:12,.0f} msgs/s  {share:.3f} of bare  CPU {cpu:.3f} us/msg (app {app:.3f})")


if __name__ == "__main__":
    main()
