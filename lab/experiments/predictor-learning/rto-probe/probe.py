"""Issue 13: the TCP retransmission-timeout rate per window of a testbed run, beside L and R_l.

``sample.sh OUT`` read the cumulative TCP counters of every network namespace each second during a
testbed run (``kafka-audit testbed run shift --variant default --poll-interval-ms 2 --stage-seconds 30``,
code before the producers measured the rate); this prints, per final window of that run, its stage,
R_l, the job's L and the rate (``100 * delta TCPTimeouts / delta OutSegs`` of the producer namespace
over the window), and the Spearman rank correlation of R_l with L and with the rate over the impaired
windows.

Usage: ``.venv/bin/python lab/experiments/predictor-learning/rto-probe/probe.py RUN_DIR``
(``windows.csv``,
``stages.json``, ``netstat.txt.gz``, ``netstat-header.txt``; e.g. ``shift-default-p2/``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from offline import read_samples, window_rates
from rich.console import Console
from rich.table import Table


def main(run: Path) -> None:
    """Print the table (module docstring)."""
    windows = pd.read_csv(run / "windows.csv")
    stages = json.loads((run / "stages.json").read_text())["stages"]
    window_ms = int(np.diff(windows["window_start_ms"]).min())
    windows["window_end_ms"] = windows["window_start_ms"] + window_ms
    windows["rate"] = window_rates(windows, read_samples(run / "netstat.txt.gz", run / "netstat-header.txt"))
    ends = np.cumsum([s["sent"] for s in stages])
    windows["stage"] = [
        stages[min(i, len(stages) - 1)]["name"]
        for i in np.searchsorted(ends, windows["sent"].cumsum() - 1, side="right")
    ]
    table = Table(title=f"{run.name}: per final window")
    for col in ("stage", "R_l", "L %", "TCP timeouts per 100 segments"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for _, w in windows.iterrows():
        table.add_row(
            w["stage"], f"{w['audit_loss_rate']:.3f}", f"{w['packet_loss_pct_est']:.1f}", f"{w['rate']:.2f}"
        )
    impaired = windows[windows["packet_loss_pct_est"] > 2.0]
    rho = impaired[["audit_loss_rate", "packet_loss_pct_est", "rate"]].rank().corr()["audit_loss_rate"]
    console = Console(width=110)
    console.print(table)
    console.print(
        f"Spearman rho with R_l over {len(impaired)} impaired windows (L > 2%): "
        f"L {rho['packet_loss_pct_est']:.2f}, TCP timeout rate {rho['rate']:.2f}"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
