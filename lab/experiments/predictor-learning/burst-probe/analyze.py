"""Issue 13: do librdkafka's retry and request-timeout counters tell bursty from random loss per window.

Reads ``runs/<run>/windows.csv`` and ``stages.json`` (``kafka-audit testbed run shift --stage-seconds 30
--poll-interval-ms 2``; ``windows.csv`` carries the job's L, D and the producers' cumulative
``tx_retries`` / ``request_timeouts`` per final window) and prints, per window, the stage, R_l
(fraction), L (percent), D (ms) and the window's own retries and request timeouts (the cumulative
counter minus the previous window's of the same stage: each stage has its own producer, and a 30-s stage
is exactly three windows). Then the Spearman rank correlation of R_l with L and with each counter over
the impaired windows.

Usage: ``.venv/bin/python lab/experiments/predictor-learning/burst-probe/analyze.py``
(no arguments).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

HERE = Path(__file__).parent


def load(run: Path) -> pd.DataFrame:
    """Return the run's windows with ``stage`` and the per-window ``retries`` and ``timeouts``."""
    stages = json.loads((run / "stages.json").read_text())["stages"]
    w = pd.read_csv(run / "windows.csv").sort_values("window_start_ms").reset_index(drop=True)
    middle = np.cumsum(w["sent"]) - w["sent"] / 2
    w["stage"] = [stages[i]["name"] for i in np.searchsorted(np.cumsum([s["sent"] for s in stages]), middle)]
    w["run"] = run.name
    for col, name in (("tx_retries", "retries"), ("request_timeouts", "timeouts")):
        w[name] = w.groupby("stage", sort=False)[col].diff().fillna(w[col])
    return w


def main() -> None:
    """Print the per-window table and the rank correlations."""
    frame = pd.concat([load(r) for r in sorted((HERE / "runs").iterdir()) if r.is_dir()], ignore_index=True)
    table = Table(title="Per final window: R_l, the job's L and D, the producer's retries, request timeouts")
    for col in ("run", "stage", "R_l", "L %", "D ms", "retries", "request timeouts"):
        table.add_column(col, justify="left" if col in ("run", "stage") else "right")
    for _, r in frame.iterrows():
        table.add_row(
            r["run"],
            r["stage"],
            f"{r['truth_loss_rate']:.3f}",
            f"{r['packet_loss_pct_est']:.1f}",
            f"{r['delay_ms_est']:.1f}",
            f"{r['retries']:.0f}",
            f"{r['timeouts']:.0f}",
        )
    console = Console(width=120)
    console.print(table)
    impaired = frame[frame["stage"] != "calm, far"]
    ranks = impaired[["truth_loss_rate", "packet_loss_pct_est", "retries", "timeouts"]].rank()
    rho = ranks.corr()["truth_loss_rate"]
    console.print(
        f"Spearman rho with R_l over {len(impaired)} impaired windows: L {rho['packet_loss_pct_est']:.2f}, "
        f"retries {rho['retries']:.2f}, request timeouts {rho['timeouts']:.2f}"
    )


if __name__ == "__main__":
    main()
