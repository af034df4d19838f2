"""Issue 13: does the TCP retransmission-timeout rate as a model input meet the bar on held-out runs.

Round 8 ran round 7's commands (``train.sh`` / ``holdout.sh``, every run at 2 ms polling) with the code
before the rate existed, while ``sample.sh`` read the TCP counters of every network namespace each
second. This script gives each stored window the rate its producer namespace measured over the window
(``100 * delta TCPTimeouts / delta OutSegs``, what ``TcpRetransmitMeter`` measures per statistics
interval), then retrains the shipped model offline exactly as the job's background retraining does
(:func:`predictor.retrain.retrain`, its defaults, base data the paper's ``experiments.csv`` and
``lab/experiments/batch-pktloss-grid/testbed-batch-pktloss.csv``) on every training window, twice: with
the measured rate, and with
the rate at 0 (what the model knew before). Both, the shipped model and the round's champion as the
job served it are scored on the held-out ``shift`` runs' windows.

Usage: ``.venv/bin/python lab/experiments/predictor-learning/rto-probe/offline.py
lab/experiments/predictor-learning/round-08``
(a round's ``training-windows.csv``, ``holdout-windows.csv``, ``netstat.txt[.gz]``,
``netstat-header.txt``); prints a table (``offline.txt``), writes ``windows-with-rate.csv`` beside this
script. About 15 s on 2 cores.
"""

from __future__ import annotations

import gzip
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from predictor import SHARED_DATA
from predictor.evaluate import metrics
from predictor.model import Predictor
from predictor.retrain import as_training_rows, retrain
from predictor.settings import RetrainSettings

HERE = Path(__file__).parent
BASE = [SHARED_DATA, HERE.parent.parent.parent / "batch-pktloss-grid" / "testbed-batch-pktloss.csv"]
COUNTERS = ("OutSegs", "RetransSegs", "TCPTimeouts")


def read_samples(path: Path, header: Path) -> pd.DataFrame:
    """Return one row per (time ms, namespace) with the cumulative counters of :data:`COUNTERS`.

    ``path`` lines: ``<ms> <namespace> Tcp: <values> TcpExt: <values>``; ``header`` holds the ``Tcp:``
    and ``TcpExt:`` name lines of ``/proc/net/snmp`` and ``/proc/net/netstat`` of the sampling host.
    """
    names = {ln.split()[0]: ln.split()[1:] for ln in header.read_text().splitlines()}
    rows = []
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    for line in text.splitlines():
        p = line.split()
        if "Tcp:" not in p or "TcpExt:" not in p:
            continue
        i, j = p.index("Tcp:"), p.index("TcpExt:")
        values = dict(zip(names["Tcp:"], p[i + 1 : j], strict=False))
        values.update(zip(names["TcpExt:"], p[j + 1 :], strict=False))
        rows.append({"at_ms": int(p[0]), "ns": p[1], **{c: int(values[c]) for c in COUNTERS}})
    return pd.DataFrame(rows)


def window_rates(windows: pd.DataFrame, samples: pd.DataFrame) -> pd.Series:
    """Return the retransmission-timeout rate (percent) of each window's busiest producer namespace."""
    producers = samples[samples["ns"].str.endswith("-p")]
    out = []
    for start, end in zip(windows["window_start_ms"], windows["window_end_ms"], strict=True):
        best = (0, np.nan)
        for _, g in producers.groupby("ns"):
            a, b = g[g["at_ms"] <= start].tail(1), g[g["at_ms"] <= end].tail(1)
            if a.empty or b.empty:
                continue
            d = b[list(COUNTERS)].to_numpy()[0] - a[list(COUNTERS)].to_numpy()[0]
            if d[0] > best[0]:
                best = (d[0], 100.0 * d[2] / d[0])
        out.append(best[1])
    return pd.Series(out, index=windows.index, dtype="float64")


def score(model: Predictor, held: pd.DataFrame) -> tuple[float, float]:
    """Return (MAE of P_l, share of R_l inside the 90% interval) of ``model`` on ``held`` (fractions)."""
    m = metrics(model.predict(held), held)
    return m["mae_p_loss"], m["coverage_90_p_loss"]


def main(root: Path) -> None:
    """Print the table (module docstring)."""
    warnings.filterwarnings("ignore")
    counters = root / "netstat.txt"
    counters = counters if counters.exists() else root / "netstat.txt.gz"
    samples = read_samples(counters, root / "netstat-header.txt")
    train = pd.read_csv(root / "training-windows.csv")
    held = pd.read_csv(root / "holdout-windows.csv")
    train["tcp_timeout_pct"] = window_rates(train, samples)
    held["tcp_timeout_pct"] = window_rates(held, samples)
    both = pd.concat([train.assign(split="training"), held.assign(split="held-out")], ignore_index=True)
    both.to_csv(HERE / "windows-with-rate.csv", index=False)
    unknown = int(both["tcp_timeout_pct"].isna().sum())
    train, held = train.fillna({"tcp_timeout_pct": 0.0}), held.fillna({"tcp_timeout_pct": 0.0})
    held_rows = as_training_rows(held)
    with_rate = retrain(Predictor.load(None), train, BASE, RetrainSettings(min_windows=30))
    without = retrain(
        Predictor.load(None), train.assign(tcp_timeout_pct=0.0), BASE, RetrainSettings(min_windows=30)
    )
    models = {
        "shipped": Predictor.load(None),
        "retrained offline, with the rate": with_rate.model,
        "retrained offline, rate at 0": without.model,
    }
    table = Table(title=f"{len(train)} training windows, {len(held)} held-out ({unknown} without a rate)")
    for col in ("model", "held-out MAE P_l", "coverage 90%", "paper MAE P_l", "local test MAE"):
        table.add_column(col, justify="left" if col == "model" else "right")
    served = pd.DataFrame({c: held[f"pred_{c}"] for c in ("p_loss", "p_loss_lo", "p_loss_hi", "p_dup")})
    m = metrics(served.assign(p_dup_lo=0.0, p_dup_hi=1.0, throughput_msgs_per_s=np.nan), held_rows)
    versions = ", ".join(sorted(held["model_version"].astype(str).unique()))
    table.add_row(
        f"the round's champion as served ({versions})",
        f"{m['mae_p_loss']:.3f}",
        f"{m['coverage_90_p_loss']:.0%}",
        "-",
        "-",
    )
    for name, model in models.items():
        mae, cover = score(model, held_rows)
        card = model.card.get("metrics", {})
        paper = card.get("paper_heldout", card.get("heldout", {})).get("mae_p_loss")
        local = card.get("local_test", {}).get("mae_p_loss")
        table.add_row(
            name,
            f"{mae:.3f}",
            f"{cover:.0%}",
            "-" if paper is None else f"{paper:.4f}",
            "-" if local is None else f"{local:.3f}",
        )
    Console(width=120).print(table)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
