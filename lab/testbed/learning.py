"""Did the predictor learn the testbed? The retrained champion against the shipped model on held-out windows.

The experiment (``docs/DESIGN.md``, "Learning the deployment"; the README's table): scenarios run through
the live job with retraining on (``kafka-audit testbed run SCENARIO --retrain``) fill a training store
and a model registry; then a scenario whose stages no training run had (``testbed/scenarios/shift.yaml``)
runs against the registry's champion with its windows kept in a separate store. :func:`evaluate_learning`
compares, on those held-out final windows, the champion's P_l (as the job predicted it) with the shipped
model's P_l for the same features, and evaluates the champion on the paper's held-back split.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kafka_plumbing.errors import ConfigError
from predictor.features import FEATURES, with_defaults
from predictor.model import Predictor, default_predictor
from predictor.registry import ModelRegistry
from predictor.retrain import paper_heldout
from predictor.training_store import TrainingStore


@dataclass(frozen=True)
class ModelScore:
    """One model on one set of windows.

    Attributes:
        model: Model version.
        n: Windows.
        mae_p_loss: MAE of P_l against the measured R_l, fraction.
        coverage_90_p_loss: Share of windows whose R_l lies in the 90% interval, fraction.
    """

    model: str
    n: int
    mae_p_loss: float
    coverage_90_p_loss: float


def score(model: str, truth: pd.Series, p: pd.Series, lo: pd.Series, hi: pd.Series) -> ModelScore:
    """Return MAE(P_l) and 90% coverage of ``p`` [``lo``, ``hi``] against ``truth`` (fractions)."""
    y = truth.to_numpy(dtype="float64")
    return ModelScore(
        model,
        len(y),
        float(np.abs(p.to_numpy(dtype="float64") - y).mean()),
        float(((y >= lo.to_numpy(dtype="float64")) & (y <= hi.to_numpy(dtype="float64"))).mean()),
    )


def _predict(model: Predictor, windows: pd.DataFrame) -> pd.DataFrame:
    frame = with_defaults(windows)  # windows stored before an optional feature existed: its default
    return pd.concat([model.predict(frame.loc[[i], list(FEATURES)]) for i in frame.index])


def evaluate_learning(
    registry_dir: Path, holdout_store: Path, training_store: Path, out: Path
) -> dict[str, Any]:
    """Score the registry's champion and the shipped model on the held-out windows; write the run data.

    Args:
        registry_dir: The model registry the training runs filled.
        holdout_store: Training store of the held-out run (its final windows: features, R_l, and the
            champion's P_l as the job predicted it).
        training_store: Training store of the training runs (copied to ``out`` for the record).
        out: Directory for ``summary.json``, ``holdout-windows.csv``, ``training-windows.csv`` and
            ``decisions.jsonl``.

    Returns:
        The summary: per model (the champion as the job served it, the shipped model, every model
        retraining made, promoted or rejected, recomputed) MAE(P_l) and 90% coverage on the held-out
        windows, the champion's metrics on the paper's held-back split, and the registry's decisions.
        With no promoted model the champion is the shipped one.

    Raises:
        ConfigError: if the held-out store has no windows.
    """
    registry = ModelRegistry(registry_dir)
    version = registry.champion_version()
    champion_dir = registry.champion_dir()
    champion = Predictor.load(champion_dir) if champion_dir is not None else default_predictor()
    held = TrainingStore(holdout_store).load()
    if held.empty:
        raise ConfigError(f"--holdout {holdout_store}: no stored windows")
    held = held.reset_index(drop=True)
    served = held[held["model_version"] == version]
    shipped_pred = _predict(default_predictor(), held)
    champion_pred = _predict(champion, held) if champion_dir is not None else shipped_pred
    scores = [
        score(f"{version} (champion, as the job predicted)", served["p_loss"], *(served[c] for c in _SERVED)),
        score("shipped", held["p_loss"], *(shipped_pred[c] for c in _BOUNDS)),
    ]
    promoted = {d.get("challenger_version") for d in registry.decisions() if d.get("promoted")}
    for challenger in registry.versions():  # every model retraining made, promoted or not
        directory = registry.version_dir(challenger)
        if directory is None:
            continue
        pred = champion_pred if challenger == version else _predict(Predictor.load(directory), held)
        fate = "champion" if challenger == version else "promoted" if challenger in promoted else "rejected"
        name = f"{challenger} ({fate}, recomputed)"
        scores.append(score(name, held["p_loss"], *(pred[c] for c in _BOUNDS)))
    paper = paper_heldout()
    paper_pred = champion.predict(paper)
    shipped_paper = default_predictor().predict(paper)
    out.mkdir(parents=True, exist_ok=True)
    held.assign(
        shipped_p_loss=shipped_pred["p_loss"].to_numpy(), champion_p_loss=champion_pred["p_loss"].to_numpy()
    ).to_csv(out / "holdout-windows.csv", index=False)
    TrainingStore(training_store).load().to_csv(out / "training-windows.csv", index=False)
    decisions = registry.decisions()
    if (registry_dir / "decisions.jsonl").is_file():
        shutil.copyfile(registry_dir / "decisions.jsonl", out / "decisions.jsonl")
    summary = {
        "champion": version,
        "champion_card": {k: champion.card.get(k) for k in ("version", "parent_version", "rows_by_source")},
        "holdout_windows": len(held),
        "holdout_windows_served_by_champion": len(served),
        "holdout": [s.__dict__ for s in scores],
        "paper_heldout": {
            "n": len(paper),
            "mae_p_loss_champion": float((paper_pred["p_loss"] - paper["p_loss"]).abs().mean()),
            "mae_p_loss_shipped": float((shipped_paper["p_loss"] - paper["p_loss"]).abs().mean()),
        },
        "decisions": [
            {
                k: d.get(k)
                for k in ("challenger_version", "champion_version", "promoted", "reasons", "numbers")
            }
            for d in decisions
        ],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


_BOUNDS = ("p_loss", "p_loss_lo", "p_loss_hi")
_SERVED = ("pred_p_loss", "pred_p_loss_lo", "pred_p_loss_hi")
