"""Issue 13: which of round 5's training windows help a retrained model on held-out runs.

Retrains the shipped model offline, exactly as the live job's background retraining does
(:func:`predictor.retrain.retrain` with its defaults; base data the paper's ``experiments.csv`` and
``lab/experiments/batch-pktloss-grid/testbed-batch-pktloss.csv``, as ``train.sh`` passes them), on subsets of
round 5's stored training
windows (``round-05/training-windows.csv``), and scores each challenger on round 5's two held-out
sets of the ``shift`` scenario, which no subset contains:

- ``holdout-p2``: polling interval 2 ms (500 messages/s; ``round-05/holdout-p2/``),
- ``holdout-p1``: polling interval 1 ms (1,000 messages/s; ``round-05/holdout-windows.csv``).

Subsets: every window; the windows at 2 ms; those at 1 ms; every window but the idempotent social
``tuned`` run's. Prints MAE(P_l) (fraction) and 90%-interval coverage per held-out set, and MAE(P_l) on
the paper's held-back split. Deterministic (the retrain seed is fixed); about 10 s on 2 cores.

Usage: ``.venv/bin/python lab/experiments/predictor-learning/training_subsets.py``
(no arguments; prints a table).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from predictor import SHARED_DATA
from predictor.evaluate import metrics
from predictor.model import Predictor
from predictor.retrain import as_training_rows, retrain
from predictor.settings import RetrainSettings

HERE = Path(__file__).parent
ROUND = HERE / "round-05"
BASE = [SHARED_DATA, HERE.parent.parent / "batch-pktloss-grid" / "testbed-batch-pktloss.csv"]


def score(model: Predictor, held: pd.DataFrame) -> tuple[float, float]:
    """Return (MAE of P_l, share of R_l inside the 90% interval) of ``model`` on ``held`` (fractions)."""
    m = metrics(model.predict(held), held)
    return m["mae_p_loss"], m["coverage_90_p_loss"]


def main() -> None:
    """Print the table (module docstring)."""
    warnings.filterwarnings("ignore")
    train = pd.read_csv(ROUND / "training-windows.csv")
    held = {
        "holdout-p2": as_training_rows(pd.read_csv(ROUND / "holdout-p2" / "holdout-windows.csv")),
        "holdout-p1": as_training_rows(pd.read_csv(ROUND / "holdout-windows.csv")),
    }
    idempotent = (train["topic"] == "testbed.social") & (train["batch_num_messages"] == 8)
    subsets = {
        "every window": train,
        "2 ms windows": train[train["poll_interval_ms"] == 2.0],
        "1 ms windows": train[train["poll_interval_ms"] == 1.0],
        "all but the idempotent run": train[~idempotent],
    }
    table = Table(title="Round 5: the shipped model retrained on subsets of its training windows")
    for col in ("training windows", "n", *(f"{h} MAE / cover" for h in held), "paper MAE"):
        table.add_column(col, justify="right")
    shipped = Predictor.load()
    table.add_row(
        "none (shipped model)",
        "0",
        *(f"{m:.3f} / {c:.0%}" for m, c in (score(shipped, h) for h in held.values())),
        "-",
    )
    for name, local in subsets.items():
        result = retrain(shipped, local.reset_index(drop=True), BASE, RetrainSettings(min_windows=10))
        paper = result.model.card["metrics"]["paper_heldout"]["mae_p_loss"]
        cells = (f"{m:.3f} / {c:.0%}" for m, c in (score(result.model, h) for h in held.values()))
        table.add_row(name, str(len(local)), *cells, f"{paper:.4f}")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
