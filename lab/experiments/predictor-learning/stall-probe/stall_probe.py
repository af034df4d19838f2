"""Issue 13 probe: a stall measure of the producer TCP connections beside R_l per testbed window.

Does it explain R_l within a stage? It is a probe, not product code.

Two commands:

* ``sample`` runs inside the producer's network namespace (``ip netns exec NS``; ``run.sh`` starts it
  for every producer namespace the testbed creates) and prints one CSV line every 100 ms: time (ms since
  the Unix epoch), the namespace's TCPTimeouts (RTO firings), TCPLossProbes, RetransSegs and OutSegs,
  and over its ESTABLISHED IPv4 sockets (``/proc/net/tcp``) the largest ``retrnsmt`` (unrecovered RTO
  timeouts of one socket: its backoff), the number of sockets in RTO recovery with bytes unacknowledged,
  the socket count and the send-queue bytes.
* ``analyze RUN SAMPLES LOG`` reduces the samples to each final 10-s window of a testbed run
  (``windows.csv``; stages from the run's log): L (retransmitted / sent segments, percent), RTO timeouts,
  the fraction of samples with a socket in RTO recovery (``rto_frac``), with backoff >= 2
  (``backoff2``), the mean send queue (``txq``, bytes); then per stage the spread of R_l, the stage
  median's MAE (the stage oracle of ``local_learners.py``) and each measure's Spearman rank correlation
  with R_l, and leave-one-out MAE of linear fits of R_l on L alone and on L with the stall measures.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import re
import sys
import time
from pathlib import Path

import numpy as np

SAMPLE_S = 0.1
WINDOW_MS = 10_000
MEASURES = ("L", "timeouts", "rto_frac", "backoff2", "txq")


def _counters(path: str, prefix: str) -> dict[str, int]:
    lines = [ln.split() for ln in Path(path).read_text().splitlines() if ln.startswith(prefix)]
    return dict(zip(lines[0][1:], map(int, lines[1][1:]), strict=True))


def sample() -> None:
    """Print one sample line every 100 ms until killed (run inside the producer namespace)."""
    while True:
        t = time.time_ns() // 1_000_000
        ext = _counters("/proc/net/netstat", "TcpExt:")
        snmp = _counters("/proc/net/snmp", "Tcp:")
        backoff = in_rto = sockets = txq = 0
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            f = line.split()
            if f[3] != "01":  # ESTABLISHED
                continue
            sockets += 1
            tx = int(f[4].split(":")[0], 16)
            txq += tx
            r = int(f[6], 16)
            backoff = max(backoff, r)
            in_rto += r >= 1 and tx > 0
        print(
            f"{t},{ext.get('TCPTimeouts', 0)},{ext.get('TCPLossProbes', 0)},{snmp['RetransSegs']},"
            f"{snmp['OutSegs']},{backoff},{in_rto},{sockets},{txq}",
            flush=True,
        )
        time.sleep(SAMPLE_S)


def _stages(log: Path) -> list[tuple[float, str]]:
    """(start ms, name) of each stage, from the testbed log's ``[HH:MM:SS] stage i/n 'name'`` lines."""
    day = dt.datetime.fromtimestamp(log.stat().st_mtime, dt.UTC).date()
    out = []
    for line in log.read_text().splitlines():
        m = re.match(r"\[(\d\d):(\d\d):(\d\d)\] stage \d/\d '([^']+)'", line)
        if m:
            t = dt.datetime(day.year, day.month, day.day, int(m[1]), int(m[2]), int(m[3]), tzinfo=dt.UTC)
            out.append((t.timestamp() * 1000, m[4]))
    return out


def analyze(run: Path, samples: Path, log: Path) -> None:
    """Print the per-stage table and the leave-one-out fits (see the module docstring)."""
    if samples.suffix == ".gz":
        with gzip.open(samples, "rt") as f:
            lines = f.read().splitlines()
    else:
        lines = samples.read_text().splitlines()
    rows_s = [[int(x) for x in ln.split(",")] for ln in lines if ln.count(",") == 8]
    s = np.array(sorted(rows_s), dtype=float)
    stages = _stages(log)
    rows: list[dict[str, float | str]] = []
    with (run / "windows.csv").open() as f:
        for w in csv.DictReader(f):
            start = int(w["window_start_ms"])
            x = s[(s[:, 0] >= start) & (s[:, 0] < start + WINDOW_MS)]
            if len(x) < 5 or int(w["sent"]) == 0:
                continue
            d = x[-1] - x[0]
            # a window that starts before the first stage line belongs to the first stage
            stage = ([stages[0][1]] + [name for t, name in stages if t <= start + WINDOW_MS / 2])[-1]
            rows.append(
                {
                    "stage": stage,
                    "y": float(w["truth_loss_rate"]),
                    "L": 100 * d[3] / d[4] if d[4] > 0 else 0.0,
                    "timeouts": d[1],
                    "rto_frac": float((x[:, 6] > 0).mean()),
                    "backoff2": float((x[:, 5] >= 2).mean()),
                    "txq": float(x[:, 8].mean()),
                }
            )
    print(f"{len(rows)} final windows with samples")
    for stage in dict.fromkeys(r["stage"] for r in rows):
        rs = [r for r in rows if r["stage"] == stage]
        y = np.array([r["y"] for r in rs], dtype=float)
        cors = {}
        for n in MEASURES:
            v = np.array([r[n] for r in rs], dtype=float)
            if v.std() > 0 and y.std() > 0:
                ranks = np.argsort(np.argsort(y)), np.argsort(np.argsort(v))
                cors[n] = round(float(np.corrcoef(*ranks)[0, 1]), 2)
        print(
            f"{stage:12s} n={len(rs):2d} R_l mean {y.mean():.3f} min {y.min():.2f} max {y.max():.2f}; "
            f"stage-median MAE {np.mean(np.abs(y - np.median(y))):.3f}; Spearman with R_l {cors}"
        )
    y = np.array([r["y"] for r in rows], dtype=float)
    for cols in (["L"], ["L", "rto_frac"], ["L", "timeouts"], ["L", "txq"], list(MEASURES)):
        columns = [np.array([r[c] for r in rows], dtype=float) for c in cols]
        x = np.column_stack([np.ones(len(rows)), *columns])
        err = []
        for i in range(len(rows)):
            keep = np.arange(len(rows)) != i
            b, *_ = np.linalg.lstsq(x[keep], y[keep], rcond=None)
            err.append(abs(float(np.clip(x[i] @ b, 0, 1)) - y[i]))
        print(f"leave-one-out linear fit on {cols}: MAE {np.mean(err):.3f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["sample"]:
        sample()
    elif sys.argv[1:2] == ["analyze"] and len(sys.argv) == 5:
        analyze(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        sys.exit("usage: stall_probe.py sample | analyze RUN_DIR SAMPLES_CSV TESTBED_LOG")
