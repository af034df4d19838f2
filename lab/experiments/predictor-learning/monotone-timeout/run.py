"""Issue 39 item 2: P_l non-increasing in message.timeout.ms by construction, against the model before.

For the spec shipped before issue 39 item 2 (``IMPROVED_SPEC`` with ``timeout_monotone=False``,
"unconstrained") and the same with ``timeout_monotone=True`` (shipped since), seed 20200, on the
paper's data (predictor/base_data/wu2020/experiments.csv), 1 torch thread:

1. train as ``kafka-audit predictor train`` does (non-held-back rows) and report the paper held-back
   MAE(P_l), 90% coverage, and the property check (predictor.properties: seeded grid, largest rise of P_l
   along message.timeout.ms);
2. leave-one-configuration-out on the base data: for each of the FOLDS most frequent producer
   configurations (acks, batch.num.messages, message.timeout.ms, polling interval) among the training
   rows, train a model without that configuration's rows and score it on them (MAE(P_l), mean over folds);
3. erosion (issue 39's case): retrain each model (predictor.retrain, as the live job does) on synthetic
   windows of one configuration (lab/testbed/synthetic.py, T_o 700 ms) and score the retrained model on
   the same stages with two other configurations (T_o 5,000 and 70,000 ms); also the rise after retraining.

Usage (from the repository):
  .venv/bin/python lab/experiments/predictor-learning/monotone-timeout/run.py [FOLDS [ARCH...]] > results.txt
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from predictor import data as data_mod
from predictor.counterfactual import configuration_key
from predictor.model import Predictor
from predictor.nets import IMPROVED_SPEC
from predictor.properties import check_properties
from predictor.train import fit
from predictor.training_run import train_model, trained_features

REPO = Path(__file__).resolve().parents[4]
PAPER = REPO / "predictor/base_data/wu2020/experiments.csv"
SEED = 20200
ARGS = 2  # run.py FOLDS [ARCH...]


def mae(model: Predictor, rows) -> float:
    return float(np.abs(model.predict(rows)["p_loss"].to_numpy() - rows["p_loss"].to_numpy()).mean())


def main() -> None:
    folds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    torch.set_num_threads(1)
    frame = data_mod.load([PAPER])
    train = frame[~data_mod.heldout_mask(frame)].reset_index(drop=True)
    out = {}
    for name, spec in (
        ("unconstrained", dataclasses.replace(IMPROVED_SPEC, timeout_monotone=False)),
        ("timeout_monotone", dataclasses.replace(IMPROVED_SPEC, timeout_monotone=True)),
    ):
        if len(sys.argv) > ARGS and name not in sys.argv[ARGS:]:
            continue
        t0 = time.monotonic()
        model = train_model([PAPER], spec, SEED)
        held = model.card["metrics"]["heldout"]
        check = check_properties(model)
        row = {
            "train_s": round(time.monotonic() - t0, 1),
            "paper_heldout_mae_p_loss": round(held["mae_p_loss"], 4),
            "paper_heldout_coverage_90_p_loss": round(held["coverage_90_p_loss"], 3),
            "paper_heldout_mae_p_dup": held["mae_p_dup"],
            "msgTmout_mae_p_loss": round(held["families"]["msgTmout"]["mae_p_loss"], 4),
            "property_violations": sorted({v.name for v in check.violations}),
            "largest_timeout_rise": round(check.max_timeout_rise, 4),
            "rising_inputs": check.rising_inputs,
        }
        fspec = dataclasses.replace(spec, features=trained_features(train))
        keys = configuration_key(train)
        loco = []
        ordered = sorted(keys.value_counts().items(), key=lambda kv: (-kv[1], kv[0]))
        for key in [k for k, _ in ordered][:folds]:
            held_rows = (keys == key).to_numpy()
            fold = fit(train[~held_rows].reset_index(drop=True), fspec, SEED).model
            fold_model = Predictor(fold, {"spec": fspec.to_json(), "features": list(fspec.features)})
            score = round(mae(fold_model, train[held_rows]), 4)
            loco.append({"configuration": key, "n": int(held_rows.sum()), "mae_p_loss": score})
        row["loco_folds"] = loco
        row["loco_mean_mae_p_loss"] = round(float(np.mean([f["mae_p_loss"] for f in loco])), 4)
        out[name] = row
        print(json.dumps({name: row}, indent=1), flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
