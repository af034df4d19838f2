"""Issue 39 acceptance (a): the promoted model on the other streams' default configurations, same stages.

Usage: ``report.py L [WINDOWS_PER_STAGE]`` (``L``: the directory ``commands.sh`` filled,
``results/train-N``, ``results/holdout-V``, ``models``, ``training``; windows per stage: 4 for
``bursts3.yaml``'s 40-s stages, 6 for ``bernoulli4.yaml``'s 60-s ones).
Prints JSON: per held-out configuration, over its run's windows, MAE(P_l) against the verifier's R_l of

* ``champion_served``: the registry's champion as the job predicted each window (its own measured L, D,
  retransmission-timeout rate; D is 0 where the window had no broker RTT, acks 0);
* ``champion_train_network``: the champion for the held-out configuration on the network the training
  stream measured in the same window of its last run (window i of ``train-N`` beside window i of the
  held-out run; both runs start on a window boundary with the same stages): what a suggestion or the
  control loop asks the model;
* ``shipped``: the shipped model on the held-out run's own features;
* ``constant``: the training windows' median R_l (the gate's constant; issue 39's "constant median
  R_l"), and the mean R_l for reference;
* ``stage_oracle``: each window predicted by the median R_l of its stage's windows in the same run (it
  reads the labels: no model can know more of a stage from its network measurements, so its MAE is the
  window-to-window noise within a stage the bar has to be above);

per stage as well, plus the registry's decisions. The acceptance: each held-out configuration's
``champion_served`` MAE <= 0.08 and below ``constant``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.features import FEATURES
from predictor.model import Predictor, default_predictor
from predictor.registry import ModelRegistry
from predictor.training_store import TrainingStore

BAR = 0.08
"""Issue 39 acceptance (a): MAE(P_l) of each other configuration, fraction."""


def _config(stages: dict[str, Any]) -> dict[str, float]:
    c = stages["stages"][0]["config"]
    return {
        "acks": 0.0 if str(c["acks"]) == "0" else 1.0,
        "batch_num_messages": float(c["batch.num.messages"]),
        "message_timeout_ms": float(c["message.timeout.ms"]),
    }


def _stage_of(windows: pd.DataFrame, stages: dict[str, Any], per_stage: int) -> list[str]:
    """Stage name of each window by position (the runs start on a window boundary; stages whole windows)."""
    names = [s["name"] for s in stages["stages"]]
    return [names[min(i // per_stage, len(names) - 1)] for i in range(len(windows))]


def _features(windows: pd.DataFrame, config: dict[str, float], size: float, poll: float) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "packet_loss_pct": windows["packet_loss_pct_est"].astype("float64").fillna(0.0).to_numpy(),
            "delay_ms": windows["delay_ms_est"].astype("float64").fillna(0.0).to_numpy(),
            "tcp_timeout_pct": windows["tcp_timeout_pct_est"].astype("float64").fillna(0.0).to_numpy(),
            "message_size_bytes": size,
            "poll_interval_ms": poll,
            **{k: v for k, v in config.items()},
        }
    )
    return frame[list(FEATURES)]


def _row(values: np.ndarray) -> str:
    return " ".join("-" if np.isnan(x) else f"{x:.3f}" for x in values)


def _mae(pred: np.ndarray, truth: np.ndarray) -> float:
    ok = ~np.isnan(pred)
    return float(np.abs(pred[ok] - truth[ok]).mean()) if ok.any() else float("nan")


def report(lab: Path, per_stage_windows: int = 4) -> dict[str, Any]:
    """Return the acceptance numbers (module docstring) for the run directory ``lab``.

    ``per_stage_windows``: audit windows per stage (stage length / 10 s).
    """
    registry = ModelRegistry(lab / "models")
    version = registry.champion_version()
    champion_dir = registry.champion_dir()
    champion = Predictor.load(champion_dir) if champion_dir is not None else default_predictor()
    shipped = default_predictor()
    training = TrainingStore(lab / "training").load()
    median, mean = float(training["p_loss"].median()), float(training["p_loss"].mean())
    size = float(training["message_size_bytes"].median())
    poll = float(training["poll_interval_ms"].median())
    trains = sorted((lab / "results").glob("train-*"))
    last_train = pd.read_csv(trains[-1] / "windows.csv")
    out: dict[str, Any] = {
        "champion": version,
        "training_windows": len(training),
        "training_configurations": sorted(
            training[["acks", "batch_num_messages", "message_timeout_ms", "poll_interval_ms"]]
            .drop_duplicates()
            .astype(float)
            .apply(lambda r: ",".join(f"{k}={v:g}" for k, v in r.items()), axis=1)
        ),
        "constant_median_r_l": median,
        "constant_mean_r_l": mean,
        "bar": BAR,
        "held_out": {},
        "decisions": [
            {
                "challenger": d.get("challenger_version"),
                "promoted": d.get("promoted"),
                "reasons": d.get("reasons"),
                "mae_local_challenger": (d.get("numbers") or {}).get("mae_local_challenger"),
                "mae_local_champion": (d.get("numbers") or {}).get("mae_local_champion"),
                "mae_local_baseline": (d.get("numbers") or {}).get("mae_local_baseline"),
                "mae_paper_challenger": (d.get("numbers") or {}).get("mae_paper_challenger"),
                "n_local_test": (d.get("numbers") or {}).get("n_local_test"),
            }
            for d in registry.decisions()
        ],
    }
    for run in [*trains[-1:], *sorted((lab / "results").glob("holdout-*"))]:
        stages = json.loads((run / "stages.json").read_text())
        windows = pd.read_csv(run / "windows.csv")
        config = _config(stages)
        truth = windows["truth_loss_rate"].to_numpy(dtype="float64")
        served = windows["model_version"].astype(str) == version
        served_pred = np.where(served, windows["p_loss"].astype("float64"), np.nan)
        own = _features(windows, config, size, poll)
        n = min(len(windows), len(last_train))
        on_train = _features(last_train.iloc[:n], config, size, poll)
        train_net = np.full(len(windows), np.nan)
        train_net[:n] = champion.predict(on_train)["p_loss"].to_numpy()
        preds = {
            "champion_served": served_pred,
            "champion_recomputed": champion.predict(own)["p_loss"].to_numpy(),
            "champion_train_network": train_net,
            "shipped": shipped.predict(own)["p_loss"].to_numpy(),
            "constant": np.full(len(windows), median),
        }
        stage = _stage_of(windows, stages, per_stage_windows)
        oracle = np.full(len(windows), np.nan)
        for name in dict.fromkeys(stage):
            m = np.array([s == name for s in stage])
            oracle[m] = float(np.median(truth[m]))
        preds["stage_oracle"] = oracle
        per_stage = {}
        for name in dict.fromkeys(stage):
            m = np.array([s == name for s in stage])
            per_stage[name] = {"windows": int(m.sum()), "r_l": _row(truth[m])} | {
                k: _row(p[m]) for k, p in preds.items()
            }
        mae = {k: _mae(p, truth) for k, p in preds.items()}
        for other in registry.versions():  # every model retraining made, promoted or not, recomputed
            directory = registry.version_dir(other)
            if directory is not None and other != version:
                mae[f"{other}_recomputed"] = _mae(
                    Predictor.load(directory).predict(own)["p_loss"].to_numpy(), truth
                )
        out["held_out"][run.name] = {
            "configuration": config,
            "windows": len(windows),
            "windows_served_by_champion": int(served.sum()),
            "exact_windows": int(windows["exact"].astype(str).eq("True").sum()),
            "mean_r_l": float(truth.mean()),
            "mae_p_loss": mae,
            "met": bool(mae["champion_served"] <= BAR and mae["champion_served"] < mae["constant"]),
            "per_stage": per_stage,
        }
    return out


if __name__ == "__main__":
    print(json.dumps(report(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 4), indent=1))
