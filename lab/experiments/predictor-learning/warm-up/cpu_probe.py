"""Issue 13 probe: the host's CPU and each testbed role's CPU, every 100 ms, beside a testbed run.

Prints one CSV line per sample (header first): time (ms since the Unix epoch), the host's busy and total
jiffies (``/proc/stat``, cumulative) and the cumulative user + system jiffies of the processes of each
role, found by their command lines every 2 s: ``handler`` (the NFQUEUE packet handler), ``producer``
(the stage producers), ``spark`` (every command line with "spark" in it: the Spark JVM, its Python
workers and the testbed's own process, which runs the job's driver and the audit consumer thread; in
the ``--no-spark`` run only the latter), ``broker`` (the Kafka brokers), ``consumer``, ``other``. A
process that ends makes its role's sum step down; ``analyze.py`` counts only the rises. A probe, not
product code: it runs under the system ``python3`` as root.

Usage: ``python3 cpu_probe.py > cpu.csv`` (stop it with kill when the run is over).
"""

from __future__ import annotations

import os
import time

ROLES = (
    ("handler", "nfqueue_handler"),
    ("producer", "producer_process"),
    ("spark", "spark"),
    ("broker", "kafka.Kafka"),
    ("broker", "KafkaRaftServer"),
    ("consumer", "audit_consumer"),
)
NAMES = ("handler", "producer", "spark", "broker", "consumer", "other")


def role(pid: str) -> str | None:
    """Return the role of process ``pid`` by its command line (None if it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    return next((r for r, pattern in ROLES if pattern in cmd), "other")


def jiffies(pid: int) -> int | None:
    """Return the user + system jiffies of process ``pid`` so far (None if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError):
        return None


def main() -> None:
    """Sample until killed."""
    print("t_ms,busy,total," + ",".join(NAMES), flush=True)
    pids: dict[int, str | None] = {}
    scanned = 0.0
    while True:
        now = time.time()
        if now - scanned > 2:
            pids = {int(p): role(p) for p in os.listdir("/proc") if p.isdigit()}
            scanned = now
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        total, busy = sum(v), sum(v) - v[3] - v[4]
        used = dict.fromkeys(NAMES, 0)
        for pid, r in pids.items():
            j = jiffies(pid) if r is not None else None
            if r is not None and j is not None:
                used[r] += j
        print(f"{int(now * 1000)},{busy},{total}," + ",".join(str(used[n]) for n in NAMES), flush=True)
        time.sleep(max(0.0, 0.1 - (time.time() - now)))


if __name__ == "__main__":
    main()
