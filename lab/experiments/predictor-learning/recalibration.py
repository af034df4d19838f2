"""Issue 13: a promoted model's interval calibrated on the calibration split alone versus calibration + test.

Each round's champion (rounds 7-10, the models committed beside their windows) is recalibrated on its
own calibration windows (the card's ``local_split.calibration_ms`` in the round's
``training-windows.csv``), then on those and its test windows together (to ``local_split.test_ms``;
none of them trained on, as :func:`predictor.conformal.recalibrate` does after a promotion), with
additive (CQR) and width-relative (CQR-r) scores (:func:`predictor.conformal.calibration_offsets`). Prints
the offset q and the held-out ``shift`` runs' coverage and mean width of the 90% P_l interval (24
windows each). Point predictions, and so MAE(P_l), do not change.

Usage: ``.venv/bin/python lab/experiments/predictor-learning/recalibration.py``
(no arguments; prints a table,
``recalibration.txt``). A few seconds.
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
ROUNDS = {
    "round 7": HERE / "round-07" / "champion-v0003",
    "round 8": HERE / "round-08" / "champion-v0003",
    "round 9": HERE / "round-09" / "champion-v0003",
    "round 10": HERE / "round-10" / "champion-v0006",
}


def main() -> None:
    """Print the table (module docstring)."""
    warnings.filterwarnings("ignore")
    table = Table(title="Champions' 90% P_l interval on the held-out runs, by calibration windows and scores")
    for col in ("round", "calibrated on", "scores", "q", "coverage", "mean width"):
        table.add_column(col, justify="left" if col in ("round", "calibrated on", "scores") else "right")
    for name, model_dir in ROUNDS.items():
        model = Predictor.load(model_dir)
        train = pd.read_csv(model_dir.parent / "training-windows.csv")
        held = as_training_rows(pd.read_csv(model_dir.parent / "holdout-windows.csv"))
        split = model.card["local_split"]
        start, cal_end = split["calibration_ms"]
        for label, end in (("calibration", cal_end), ("calibration + test", split["test_ms"][1])):
            windows = train[(train["window_end_ms"] > start) & (train["window_end_ms"] <= end)]
            for scores in ("additive", "scaled"):
                ensemble = model.ensemble
                ensemble.spec = dataclasses.replace(ensemble.spec, loss_interval_score=scores)
                ensemble.q_loss.fill_(calibration_offsets(ensemble, windows)[0])
                p = model.predict(held)
                y = held["p_loss"]
                inside = (y >= p["p_loss_lo"]) & (y <= p["p_loss_hi"])
                table.add_row(
                    f"{name} ({model_dir.name.removeprefix('champion-')})",
                    f"{label} ({len(windows)})",
                    "additive (CQR)" if scores == "additive" else "relative (CQR-r)",
                    f"{float(ensemble.q_loss):.3f}",
                    f"{inside.mean():.0%}",
                    f"{(p['p_loss_hi'] - p['p_loss_lo']).mean():.3f}",
                )
    Console(width=130).print(table)


if __name__ == "__main__":
    main()
