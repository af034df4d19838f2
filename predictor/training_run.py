"""Training run: train a model on the non-held-back rows and write its card (``kafka-audit predictor train``).

Evaluating a model on the right rows (``kafka-audit predictor evaluate``) is
:func:`predictor.evaluate.evaluate_model`.
"""

from __future__ import annotations

import dataclasses
import platform
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kafka_plumbing.errors import ConfigError
from predictor import data as data_mod
from predictor.evaluate import metrics
from predictor.features import BASE_FEATURES, OPTIONAL, UNITS
from predictor.model import Predictor
from predictor.nets import PAPER_SPEC, ModelSpec
from predictor.train import COVERAGE, Progress, fit

CARD_FORMAT = 1
DEFAULT_SEED = 20200


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("torch", "numpy", "pandas", "kafka-audit"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "unknown"
    return out


def trained_features(frame: pd.DataFrame) -> tuple[str, ...]:
    """Return the inputs a model trained on ``frame`` reads: paper Eq. 1's, and each optional one that varies.

    An :data:`~predictor.features.OPTIONAL` feature that the data only has at its default (the paper's
    measurements and testbed grids have no retransmission-timeout rate) teaches nothing, and leaving it
    out keeps a model trained on them what it was (the shipped model reads
    :data:`~predictor.features.BASE_FEATURES`). Retraining adds it (:func:`predictor.warm_start.add_inputs`).
    """
    varying = [f for f in OPTIONAL if f in frame and frame[f].nunique(dropna=True) > 1]
    return (*BASE_FEATURES, *varying)


def train_model(
    paths: Sequence[Path],
    spec: ModelSpec,
    seed: int = DEFAULT_SEED,
    progress: Progress | None = None,
    threads: int = 1,
    baseline: bool = False,
) -> Predictor:
    """Train on the non-held-back rows of ``paths`` and return the model with its card.

    The held-back rows (:data:`predictor.data.SPLIT_RULE`, ~20% of settings) are only used for the card's
    ``metrics.heldout``. Deterministic for equal data, spec, seed and ``threads``. With ``baseline``, the
    paper's ANN (:data:`~predictor.nets.PAPER_SPEC`) is trained on the same rows and its held-back metrics
    are stored as ``metrics.paper_baseline_heldout`` (the shipped weights are the improved model's).

    Raises:
        ConfigError: if the data cannot be read or leaves no training or held-back rows.
    """
    import torch

    torch.set_num_threads(threads)
    frame = data_mod.load(paths)
    held = data_mod.heldout_mask(frame)
    train, test = frame[~held].reset_index(drop=True), frame[held].reset_index(drop=True)
    if train.empty or test.empty:
        raise ConfigError(
            f"--data: {len(frame)} rows give {len(train)} training and {len(test)} held-back rows"
        )
    spec = dataclasses.replace(spec, features=trained_features(train))
    paper_spec = dataclasses.replace(PAPER_SPEC, features=spec.features)
    main_total = spec.epochs * spec.members
    total = main_total + (PAPER_SPEC.epochs * PAPER_SPEC.members if baseline else 0)

    def main_progress(done: int, _: int) -> None:
        if progress is not None:
            progress(done, total)

    def baseline_progress(done: int, _: int) -> None:
        if progress is not None:
            progress(main_total + done, total)

    started = time.monotonic()
    result = fit(train, spec, seed, main_progress)
    seconds = time.monotonic() - started
    card: dict[str, Any] = {
        "format": CARD_FORMAT,
        "model": "kafka-audit predictor: P_l, P_d (90% intervals), throughput (Wu et al. 2020, Eq. 1)",
        "spec": spec.to_json(),
        "seed": seed,
        "threads": threads,
        "data": data_mod.card_entries(paths, frame),
        "features": list(spec.features),
        "units": {
            **UNITS,
            "p_loss": "P_l, fraction 0-1 (lost / sent)",
            "p_dup": "P_d, fraction 0-1 (duplicated / sent)",
            "throughput_msgs_per_s": "messages/s per producer (n_sent / duration_s)",
        },
        "interval": {
            "coverage": COVERAGE,
            "method": "quantile heads (5th/95th) + conformal widening from out-of-fold scores (CQR)",
            "q_loss": float(result.model.q_loss),
            "q_dup": float(result.model.q_dup),
        },
        "split": {
            "rule": data_mod.SPLIT_RULE,
            "heldout_percent": data_mod.HELDOUT_PERCENT,
            "n_train": len(train),
            "n_heldout": len(test),
        },
        "trained_ranges": {c: [float(train[c].min()), float(train[c].max())] for c in spec.features},
        "versions": _versions(),
        "training_seconds": round(seconds, 1),
        "reproduce": " ".join(
            [
                "kafka-audit predictor train",
                *(f"--data {p}" for p in paths),
                "--out DIR",
                f"--seed {seed}",
                f"--arch {spec.arch} --epochs {spec.epochs} --members {spec.members} --threads {threads}",
                *(["--baseline"] if baseline else []),
            ]
        ),
        "inputs_clamped_to_trained_ranges": True,
    }
    model = Predictor(result.model, card)
    oof = result.oof.assign(throughput_msgs_per_s=np.nan)
    card["metrics"] = {
        "heldout": metrics(model.predict(test), test),
        "out_of_fold_train": {k: v for k, v in metrics(oof, train).items() if k != "families"},
    }
    if baseline:
        paper = fit(train, paper_spec, seed, baseline_progress)
        card["metrics"]["paper_baseline_heldout"] = metrics(Predictor(paper.model, {}).predict(test), test)
        card["paper_baseline_spec"] = paper_spec.to_json()
    return model
