"""Issue 13: additive (CQR) versus width-relative (CQR-r) conformal scores for a retrained model's interval.

Rounds 7 and 8 promoted v0003 (models in ``round-07/champion-v0003/`` and
``round-08/champion-v0003/``), each calibrated with additive scores on 13 local windows: with
fewer than 19 calibration windows split conformal takes the largest miss as the offset of every input,
and on the held-out ``shift`` runs their intervals covered 100% of the windows. This recalibrates each
champion's quantile heads on its own calibration windows (the card's ``local_split.calibration_ms``
bounds in the round's ``training-windows.csv``) with both scores (:func:`predictor.conformal.interval_offset`,
``scaled`` False / True) and prints the held-out coverage and mean interval width of each, beside the
heads without any offset.

Usage: ``.venv/bin/python lab/experiments/predictor-learning/interval_scores.py``
(no arguments; prints a table,
``interval-scores.txt``). A few seconds.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from predictor.conformal import calibration_offsets
from predictor.model import Predictor
from predictor.retrain import as_training_rows

HERE = Path(__file__).parent
ROUNDS = {"round 7": HERE / "round-07", "round 8": HERE / "round-08"}


def served(model: Predictor, held: pd.DataFrame) -> tuple[float, float]:
    """Return (share of R_l inside the 90% P_l interval, mean interval width) on ``held`` (fractions)."""
    p = model.predict(held)
    y = held["p_loss"]
    return float(((y >= p["p_loss_lo"]) & (y <= p["p_loss_hi"])).mean()), float(
        (p["p_loss_hi"] - p["p_loss_lo"]).mean()
    )


def main() -> None:
    """Print the table (module docstring)."""
    warnings.filterwarnings("ignore")
    table = Table(title="Champion v0003's 90% P_l interval on the held-out runs (24 windows each)")
    for col in ("round", "scores", "offset q", "coverage", "mean width"):
        table.add_column(col, justify="left" if col in ("round", "scores") else "right")
    for name, root in ROUNDS.items():
        model = Predictor.load(root / "champion-v0003")
        train = pd.read_csv(root / "training-windows.csv")
        held = as_training_rows(pd.read_csv(root / "holdout-windows.csv"))
        lo, hi = model.card["local_split"]["calibration_ms"]
        calibration = train[(train["window_end_ms"] > lo) & (train["window_end_ms"] <= hi)]
        for label, mode in (
            ("heads only (q = 0)", None),
            ("additive (CQR)", "additive"),
            ("relative (CQR-r)", "scaled"),
        ):
            ensemble = model.ensemble
            if mode is not None:
                ensemble.spec = dataclasses.replace(ensemble.spec, loss_interval_score=mode)
                ensemble.q_loss.fill_(calibration_offsets(ensemble, calibration)[0])
            else:
                ensemble.q_loss.fill_(0.0)
            cover, width = served(model, held)
            q = float(ensemble.q_loss)
            table.add_row(
                f"{name} ({len(calibration)} calibration windows)",
                label,
                f"{q:.3f}",
                f"{cover:.0%}",
                f"{width:.3f}",
            )
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
