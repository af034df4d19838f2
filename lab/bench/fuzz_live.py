"""Live fuzz run (issue 18 item 4; not a test): structurally mutated audit records and stamps through the
live audit consumer and Spark job, beside valid audited traffic, on a local broker started here.

Every mutant must be dead-lettered with the reason the reference decoder gives and counted, nothing may
crash, and the valid traffic must still be counted exactly (verifier = audit consumer = Spark results).
The mutation engine and the run are :mod:`testbed.fuzz`. Prints a table; ``--out FILE`` also writes it
as Markdown. Usage: python bench/fuzz_live.py [--records N] [--stamps N] [--seed S] [--out FILE]
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as `python bench/fuzz_live.py`, this file's folder (bench/audit_consumer.py) would shadow a package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import os
import tempfile
import time

from rich.console import Console
from rich.table import Table
from testbed.fuzz import LiveFuzzResult, run_live

from kafka_plumbing.local_cluster import KafkaCluster


def tables(r: LiveFuzzResult, records: int, stamps: int) -> list[Table]:
    """Return the result tables: mutants by family, dead letters by (component, reason), the checks."""
    families = Table(title="mutants sent, by mutation (the first one applied)")
    for col in ("kind", "mutation", "sent", "of which with an old CreateTime"):
        families.add_column(col, justify="left" if col in ("kind", "mutation") else "right")
    for name, n in sorted(r.records.items(), key=lambda x: -x[1]):
        families.add_row("audit record", name, f"{n:,}", f"{r.records_old[name]:,}")
    for name, n in sorted(r.stamps.items(), key=lambda x: -x[1]):
        families.add_row("stamp", name, f"{n:,}", "")
    letters = Table(title="dead letters by component and reason")
    for col in ("component", "reason", "expected", "in the DLQ topic", "counted (metrics/stats)", "ok"):
        letters.add_column(col, justify="left" if col in ("component", "reason") else "right")
    for key in sorted(set(r.expected) | set(r.dead_letters) | set(r.counted)):
        e, d, c = r.expected[key], r.dead_letters[key], r.counted[key]
        letters.add_row(*key, f"{e:,}", f"{d:,}", f"{c:,}", "yes" if e == d == c else "NO")
    total = ("total", "", *(f"{sum(x.values()):,}" for x in (r.expected, r.dead_letters, r.counted)))
    letters.add_row(*total, "yes" if r.expected == r.dead_letters == r.counted else "NO")
    checks = Table(title="checks")
    checks.add_column("check")
    checks.add_column("result", justify="right")
    sent = f"{records:,} + {stamps:,} = {records + stamps:,}"
    checks.add_row("mutants sent (audit records + stamps)", sent)
    checks.add_row("every dead letter holds a mutant's original bytes, each once", str(r.bytes_kept))
    checks.add_row("crashes", "; ".join(r.crashed) or "none")
    checks.add_row("valid audited messages beside them", f"{r.good_messages:,}")
    spark, truth = r.windows
    checks.add_row("final windows: Spark / verifier / exact", f"{spark} / {truth} / {r.windows_exact}")
    seconds = " / ".join(f"{v:.0f}" for v in r.seconds.values())
    checks.add_row("seconds: start / send / drain / check", seconds)
    checks.add_row("RESULT", "PASS" if r.ok else "FAIL")
    return [families, letters, checks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000, help="mutated audit records")
    parser.add_argument("--stamps", type=int, default=50_000, help="data messages with a mutated stamp")
    parser.add_argument("--good", type=int, default=24_000, help="valid audited messages beside them")
    parser.add_argument("--good-rate", type=float, default=200.0, help="their rate, msg/s")
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--out", type=Path, help="also write the tables here (Markdown)")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    console = Console(width=120, record=True)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kafka-audit-fuzz-") as tmp:
        cluster = KafkaCluster.create(Path(tmp) / "kafka", brokers=1)
        cluster.start()
        try:
            result = run_live(
                cluster.bootstrap_servers,
                Path(tmp) / "spark",
                args.records,
                args.stamps,
                seed=args.seed,
                good_messages=args.good,
                good_rate=args.good_rate,
                log=lambda line: console.log(line),
            )
        finally:
            cluster.stop()
    console.print(
        f"kafka-audit live fuzz run: {args.records:,} mutated audit records + "
        f"{args.stamps:,} mutated stamps, seed {args.seed}, {time.monotonic() - t0:.0f} s in all"
    )
    for table in tables(result, args.records, args.stamps):
        console.print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        text = console.export_text(clear=False)
        body = text[text.index("kafka-audit live fuzz run") :]  # the tables, without the progress log
        args.out.write_text(
            "# Live fuzz run (issue 18 item 4)\n\n"
            f"`python bench/fuzz_live.py --records {args.records} --stamps {args.stamps} --good {args.good}"
            f" --good-rate {args.good_rate:g} --seed {args.seed} --out {args.out}` on one local broker and"
            " Spark `local[2]`, 2 cores shared with other work.\n\n"
            f"```\n{body}```\n"
        )
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
