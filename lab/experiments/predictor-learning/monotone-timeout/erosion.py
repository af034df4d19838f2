"""Issue 39 item 2, part 3: does a model's timeout response survive retraining on one configuration?

Synthetic deployment (lab/testbed/synthetic.py, whose truth never rises with message.timeout.ms: for
acks 1, R_l = base(L, B) x min(1, (5,000 / T_o)^0.3)): the same 30 stages (20 windows each) run with three
configurations, as issue 39's streams did: A = acks 1, B 2, T_o 700 ms (social), B = acks 1, B 9,
T_o 5,000 ms (game), C = acks 1, B 1, T_o 70,000 ms (web-log). A model (trained by run.py's recipe, the
shipped arch or timeout_monotone) is retrained as the live job does (predictor.retrain, paper base data)
on A's windows only, then scored on B's and C's windows (MAE(P_l)) next to the constant baseline (the
training windows' median R_l) and the model before retraining; the property check's largest rise of P_l
along message.timeout.ms before and after.

Usage: .venv/bin/python lab/experiments/predictor-learning/monotone-timeout/erosion.py [ARCH...] > erosion.txt
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / "lab"))

from testbed.synthetic import deployment_windows

from predictor.features import with_defaults
from predictor.nets import IMPROVED_SPEC
from predictor.properties import check_properties
from predictor.retrain import retrain
from predictor.settings import RetrainSettings
from predictor.training_run import train_model

PAPER = REPO / "predictor/base_data/wu2020/experiments.csv"
ARGS = 1  # erosion.py [ARCH...]
CONFIGS = {
    "A (T_o 700, B 2)": {"acks": 1.0, "batch_num_messages": 2.0, "message_timeout_ms": 700.0},
    "B (T_o 5000, B 9)": {"acks": 1.0, "batch_num_messages": 9.0, "message_timeout_ms": 5_000.0},
    "C (T_o 70000, B 1)": {"acks": 1.0, "batch_num_messages": 1.0, "message_timeout_ms": 70_000.0},
}


def stream(config: dict[str, float], seed: int = 39):
    """The same stages (network, M, polling) with ``config``; labels drawn from the synthetic truth."""
    from testbed import synthetic

    frame = deployment_windows(600, seed, stage_windows=20)
    for k, v in config.items():
        frame[k] = v
    frame["poll_interval_ms"] = 2.0
    rng = np.random.default_rng(seed + int(config["message_timeout_ms"]))
    sent = frame["n_sent"].to_numpy()
    lost = rng.binomial(sent, synthetic.deployment_loss(frame)) / sent
    frame["p_loss"] = np.clip(lost + rng.normal(0.0, 0.01, len(frame)) * (lost > 0), 0.0, 1.0)
    return with_defaults(frame)


def mae(model, rows) -> float:
    return float(np.abs(model.predict(rows)["p_loss"].to_numpy() - rows["p_loss"].to_numpy()).mean())


def main() -> None:
    torch.set_num_threads(1)
    streams = {name: stream(c) for name, c in CONFIGS.items()}
    (train_name, train_rows), *others = streams.items()
    out = {}
    for name, spec in (
        ("unconstrained", dataclasses.replace(IMPROVED_SPEC, timeout_monotone=False)),
        ("timeout_monotone", dataclasses.replace(IMPROVED_SPEC, timeout_monotone=True)),
    ):
        if len(sys.argv) > ARGS and name not in sys.argv[ARGS:]:
            continue
        base = train_model([PAPER], spec, 20200)
        model = retrain(base, train_rows, [PAPER], RetrainSettings(seed=39, threads=1)).model
        constant = float(np.median(train_rows["p_loss"]))
        row = {
            "paper_heldout_mae_p_loss_after": round(
                model.card.get("metrics", {}).get("paper_heldout", {}).get("mae_p_loss", float("nan")), 4
            ),
            "rise_before": round(check_properties(base).max_timeout_rise, 4),
            "rise_after": round(check_properties(model).max_timeout_rise, 4),
        }
        for other, rows in others:
            row[other] = {
                "mae_p_loss_retrained": round(mae(model, rows), 4),
                "mae_p_loss_before": round(mae(base, rows), 4),
                "mae_constant": round(float(np.abs(constant - rows["p_loss"]).mean()), 4),
                "mean_r_l": round(float(rows["p_loss"].mean()), 4),
            }
        row[train_name] = {"mae_p_loss_retrained": round(mae(model, train_rows), 4)}
        out[name] = row
        print(json.dumps({name: row}, indent=1), flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
