"""Counterfactual accuracy: leave-one-configuration-out (LOCO) scores of a retraining on the training store.

Suggestions, the gamma of a proposed configuration and the control loop ask the model about producer
configurations the deployment has not run. The promotion's other scores (:mod:`predictor.promotion`,
criteria (a)-(c)) judge the newest windows, which ran the configurations the challenger trained on, so
they never measure this (issue 39: a model retrained on one stream's windows predicted another stream on
the same network at MAE(P_l) 0.405; it had learnt "this network loses half" and ignored
``message.timeout.ms``).

:func:`loco_score` holds out whole configurations: the local windows are grouped by producer
configuration (:data:`CONFIGURATION_FEATURES`, :func:`configuration_key`); for each of the ``folds`` most
frequent configurations (ties by key; at least two configurations must have been seen) a fold model is
retrained exactly as the challenger is (:func:`predictor.retrain.retrain`, from the same champion, with
the same base data and settings) on every other configuration's windows, and scored on the held-out
configuration's windows, all of them (the same network periods the other configurations ran on). The
champion is scored on the same windows. A fold model never saw the held-out configuration in the local
windows; it starts from the champion, so what the champion knew of it (from the paper's data, or from
the store's older windows if it was trained on them) carries over to the fold as to the challenger, and
the score measures what retraining on the other configurations does to the prediction of this one: the
erosion issue 39 found. The cap bounds a promotion's time: each fold is one more retraining (about 2-3 s
for 10,000 windows on 2 idle cores, ``lab/bench/retrain.py``).

The score is the mean over folds (each configuration counts once, whatever its window count) of MAE(P_l)
and MAE(P_d) (fractions). Criterion (d) of the promotion rejects a challenger whose score is worse than
the champion's by more than ``loco_tolerance``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.model import Predictor
from predictor.settings import RetrainSettings

CONFIGURATION_FEATURES: tuple[str, ...] = (
    "acks",
    "batch_num_messages",
    "message_timeout_ms",
    "poll_interval_ms",
)
"""The inputs a producer configuration sets: paper Eq. 1 less the network's L and D (the
retransmission-timeout rate is the network's too) and less M, which is the stream's and measured: a
window's M is its messages' mean size, so one stream's windows differ in it (201.76-202.07 bytes in
``var/demo``'s store) and with M every window would be a configuration of its own."""

FOLD_MIN_WINDOWS = 3
"""Fewest windows of the other configurations a fold trains on (a time split needs three)."""


def configuration_key(frame: pd.DataFrame) -> pd.Series:
    """Return each row's configuration: the :data:`CONFIGURATION_FEATURES` as ``name=%g``, joined by ``,``."""
    key = pd.Series("", index=frame.index, dtype="object")
    for i, name in enumerate(CONFIGURATION_FEATURES):
        part = frame[name].map(lambda v, n=name: f"{n}={float(v):g}")
        key = part if i == 0 else key + "," + part
    return key


def held_out_configurations(local: pd.DataFrame, folds: int) -> list[str]:
    """Return the configurations to hold out: the ``folds`` most frequent (ties by key); none if < 2 seen."""
    if folds < 1 or local.empty:
        return []
    counts = configuration_key(local).value_counts()
    if len(counts) < 2:
        return []
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [key for key, _ in ordered[:folds]]


@dataclass(frozen=True)
class FoldScore:
    """One held-out configuration: the champion's and the fold model's errors on its windows.

    Attributes:
        configuration: The held-out configuration (:func:`configuration_key`).
        n_windows: Its windows (scored).
        n_train_windows: Windows of the other configurations the fold model trained on (all splits).
        mae_p_loss_champion, mae_p_dup_champion: The champion's MAE of P_l and P_d on them, fractions.
        mae_p_loss_challenger, mae_p_dup_challenger: The fold model's, fractions.
    """

    configuration: str
    n_windows: int
    n_train_windows: int
    mae_p_loss_champion: float
    mae_p_dup_champion: float
    mae_p_loss_challenger: float
    mae_p_dup_challenger: float

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class LocoScore:
    """The leave-one-configuration-out score of a retraining (module docstring).

    Attributes:
        folds: One entry per held-out configuration, most frequent first.
        n_configurations: Configurations seen in the local windows.
        cap: The ``folds`` cap it ran with.
        seconds: Wall time, s.
        skipped: Configurations not scored and why (``{key: reason}``).
    """

    folds: tuple[FoldScore, ...]
    n_configurations: int
    cap: int
    seconds: float
    skipped: dict[str, str] = field(default_factory=dict)

    def mean(self, name: str) -> float | None:
        """Return the mean over folds of a :class:`FoldScore` attribute; None without folds."""
        return float(np.mean([getattr(f, name) for f in self.folds])) if self.folds else None

    def numbers(self) -> dict[str, float]:
        """Return the decision's numbers (empty without folds).

        ``loco_mae_p_loss_champion`` / ``_challenger``, ``loco_mae_p_dup_*`` (fractions), ``loco_folds``
        and ``loco_configurations``.
        """
        if not self.folds:
            return {}
        return {
            "loco_mae_p_loss_champion": self.mean("mae_p_loss_champion"),
            "loco_mae_p_loss_challenger": self.mean("mae_p_loss_challenger"),
            "loco_mae_p_dup_champion": self.mean("mae_p_dup_champion"),
            "loco_mae_p_dup_challenger": self.mean("mae_p_dup_challenger"),
            "loco_folds": len(self.folds),
            "loco_configurations": self.n_configurations,
        }  # type: ignore[return-value]

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (the card's ``metrics.loco``)."""
        return {
            "rule": (
                f"leave-one-configuration-out over the {self.cap} most frequent producer configurations "
                f"({', '.join(CONFIGURATION_FEATURES)}): a fold retrains from the champion on the other "
                "configurations' windows plus the base data and is scored on the held-out one's windows"
            ),
            "folds": [f.to_json() for f in self.folds],
            "n_configurations": self.n_configurations,
            "cap": self.cap,
            "seconds": round(self.seconds, 1),
            "skipped": dict(self.skipped),
            **self.numbers(),
        }


def _mae(model: Predictor, rows: pd.DataFrame) -> tuple[float, float]:
    pred = model.predict(rows)
    return (
        float(np.abs(pred["p_loss"].to_numpy() - rows["p_loss"].to_numpy()).mean()),
        float(np.abs(pred["p_dup"].to_numpy() - rows["p_dup"].to_numpy()).mean()),
    )


def loco_score(
    champion: Predictor,
    local: pd.DataFrame,
    base_paths: Sequence[Path],
    settings: RetrainSettings,
    folds: int | None = None,
) -> LocoScore:
    """Score leave-one-configuration-out retrainings from ``champion`` (module docstring).

    Args:
        champion: The model the challenger (and every fold) starts from; not modified.
        local: The local windows (training-store rows).
        base_paths: Base data CSVs, as for the challenger.
        settings: As for the challenger (``min_windows`` is not applied to a fold: it needs
            :data:`FOLD_MIN_WINDOWS`).
        folds: Cap on the held-out configurations (default ``settings.loco_folds``; 0: none).

    Returns:
        The score; no folds with fewer than two configurations (then nothing is held out).

    Raises:
        ConfigError: as :func:`predictor.retrain.retrain` (unreadable base data).
    """
    from predictor.features import with_defaults
    from predictor.retrain import retrain

    started = time.monotonic()
    cap = settings.loco_folds if folds is None else folds
    local = with_defaults(local)
    keys = configuration_key(local)
    fold_settings = settings.model_copy(update={"min_windows": FOLD_MIN_WINDOWS})
    scores, skipped = [], {}
    for key in held_out_configurations(local, cap):
        held = (keys == key).to_numpy()
        rest = local[~held].reset_index(drop=True)
        if len(rest) < FOLD_MIN_WINDOWS:
            skipped[key] = f"{len(rest)} window(s) of other configurations; a fold needs {FOLD_MIN_WINDOWS}"
            continue
        rows = local[held].reset_index(drop=True)
        fold = retrain(champion, rest, base_paths, fold_settings).model
        l_champ, d_champ = _mae(champion, rows)
        l_fold, d_fold = _mae(fold, rows)
        scores.append(
            FoldScore(
                configuration=key,
                n_windows=len(rows),
                n_train_windows=len(rest),
                mae_p_loss_champion=l_champ,
                mae_p_dup_champion=d_champ,
                mae_p_loss_challenger=l_fold,
                mae_p_dup_challenger=d_fold,
            )
        )
    return LocoScore(
        folds=tuple(scores),
        n_configurations=int(keys.nunique()),
        cap=cap,
        seconds=time.monotonic() - started,
        skipped=skipped,
    )


__all__ = [
    "CONFIGURATION_FEATURES",
    "FoldScore",
    "LocoScore",
    "configuration_key",
    "held_out_configurations",
    "loco_score",
]
