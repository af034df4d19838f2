"""Offline replay: retrain on a scenario's stored training windows with and without extra base data.

Usage: ``OMP_WAIT_POLICY=PASSIVE replay.py NAME [EXTRA_CSV ...]`` (``NAME``: an archived scenario,
``training-windows-NAME.csv`` and ``runs/NAME/``). One retraining from the shipped model on all the
stored windows (the job retrains in steps from its champion; this is one step) with the job's base data
(the paper's and the batch/packet-loss grid), one more with ``EXTRA_CSV`` added, each scored on every
held-out run's windows from their own measured features, as ``report.py`` scores
``champion_recomputed``, and (``<run> on train network``) from the features the last training run
measured in the same window (``report.py``'s ``champion_train_network``: the held-out configuration on
the training stream's measurement of the network). Prints JSON: per model, the paper held-back
MAE(P_l) and per held-out run the MAE(P_l) against the verifier's R_l.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.model import default_predictor
from predictor.retrain import DEFAULT_SETTINGS, retrain

HERE = Path(__file__).resolve().parent
SETTINGS = DEFAULT_SETTINGS.model_copy(update={"min_windows": 16})
"""The job's retraining settings with ``commands.sh``'s ``--retrain-min-windows 16``."""
BASE = [
    Path("predictor/base_data/wu2020/experiments.csv"),
    Path("lab/experiments/batch-pktloss-grid/testbed-batch-pktloss.csv"),
]


def _features(windows: pd.DataFrame, stages: dict[str, Any], size: float, poll: float) -> pd.DataFrame:
    c = stages["stages"][0]["config"]
    return pd.DataFrame(
        {
            "acks": 0.0 if str(c["acks"]) == "0" else 1.0,
            "packet_loss_pct": windows["packet_loss_pct_est"].astype("float64").fillna(0.0),
            "delay_ms": windows["delay_ms_est"].astype("float64").fillna(0.0),
            "message_size_bytes": size,
            "batch_num_messages": float(c["batch.num.messages"]),
            "message_timeout_ms": float(c["message.timeout.ms"]),
            "poll_interval_ms": poll,
            "tcp_timeout_pct": windows["tcp_timeout_pct_est"].astype("float64").fillna(0.0),
        }
    )


def main(name: str, extra: list[Path]) -> dict[str, Any]:
    """Return the replay's numbers (module docstring) for archived scenario ``name``."""
    local = pd.read_csv(HERE / f"training-windows-{name}.csv")
    size, poll = float(local["message_size_bytes"].median()), float(local["poll_interval_ms"].median())
    runs = sorted((HERE / "runs" / name).glob("holdout-*"))
    last_train = pd.read_csv(sorted((HERE / "runs" / name).glob("train-*"))[-1] / "windows.csv")
    out: dict[str, Any] = {"scenario": name, "training_windows": len(local), "models": {}}
    for label, paths in (("job's base data", BASE), (f"+ {', '.join(p.name for p in extra)}", BASE + extra)):
        if label.startswith("+") and not extra:
            continue
        result = retrain(default_predictor(), local, paths, SETTINGS)
        model = result.model
        scores: dict[str, Any] = {
            "paper_heldout_mae_p_loss": model.card["metrics"]["paper_heldout"].get("mae_p_loss")
        }
        for run in runs:
            windows = pd.read_csv(run / "windows.csv")
            stages = json.loads((run / "stages.json").read_text())
            truth = windows["truth_loss_rate"].to_numpy(dtype="float64")
            pred = model.predict(_features(windows, stages, size, poll))["p_loss"].to_numpy()
            scores[run.name] = round(float(np.abs(pred - truth).mean()), 4)
            n = min(len(windows), len(last_train))
            on_train = model.predict(_features(last_train.iloc[:n], stages, size, poll))["p_loss"].to_numpy()
            scores[f"{run.name} on train network"] = round(float(np.abs(on_train - truth[:n]).mean()), 4)
        out["models"][label] = scores
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], [Path(p) for p in sys.argv[2:]]), indent=1))
