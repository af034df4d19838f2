"""The retrained model's 90% interval: split-conformal offsets on windows never trained on.

Step 5 of the retraining (:mod:`predictor.retrain`): the interval of the quantile heads is widened by
an offset q computed on the calibration split (:func:`calibration_offsets`, :func:`interval_offset`);
once a challenger is promoted, q is recomputed on its calibration and test windows together
(:func:`recalibrate`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from predictor.model import Predictor

COVERAGE = 0.90
"""Target coverage of the interval (share of windows inside it)."""


def interval_offset(
    lo: np.ndarray, mid: np.ndarray, hi: np.ndarray, y: np.ndarray, scaled: bool = False
) -> float:
    """Split-conformal offset q for intervals around the median ``mid`` (fractions).

    The score of a row is the smallest q that covers it, as :class:`~predictor.nets.Ensemble` applies q
    (clamped to [0, 1], never crossing the median): ``lo - y`` below the median, ``y - hi`` above it,
    -inf at it; with ``scaled`` (CQR-r, for ``[lo - q w, hi + q w]``) divided by the row's width w =
    max(hi - lo, :data:`~predictor.nets.MIN_INTERVAL_WIDTH`). Returns the ceil((n + 1) 0.9)-th smallest
    score, at least 0 and at most 1 (additive; a scaled q has no upper bound), 0 without rows.
    """
    from predictor.nets import MIN_INTERVAL_WIDTH

    if len(y) == 0:
        return 0.0
    mid = np.clip(mid, 0.0, 1.0)
    scores = np.where(y < mid, lo - y, np.where(y > mid, y - hi, -np.inf))
    if scaled:
        scores = scores / np.maximum(hi - lo, MIN_INTERVAL_WIDTH)
    s = np.sort(scores)
    k = min(len(s) - 1, math.ceil((len(s) + 1) * COVERAGE) - 1)
    return float(np.clip(s[k], 0.0, None if scaled else 1.0))


def calibration_offsets(ensemble: Any, calibration: pd.DataFrame) -> tuple[float, float | None]:
    """Return the conformal offsets (q_loss, q_dup; q_dup None without acks=1 rows) on ``calibration``.

    ``q_loss`` follows ``ensemble.spec.loss_interval_score`` (additive fraction, or a multiple of each
    interval's width for ``scaled``); ``q_dup`` is additive (fraction). ``calibration``: training-store
    rows (the :data:`~predictor.features.FEATURES` columns, ``p_loss``, ``p_dup``, ``acks``).

    Scores come from the unclipped member-averaged outputs, so they are exact for the clamping in
    :meth:`~predictor.nets.Ensemble.forward`.
    """
    import torch

    from predictor.nets import DUP_SCALE
    from predictor.train import features_for

    x = torch.from_numpy(features_for(ensemble.spec, calibration))
    with torch.inference_mode():
        out = {k: v.numpy().astype("float64") for k, v in ensemble.raw_outputs(x).items()}
    yl = calibration["p_loss"].to_numpy(dtype="float64")
    scaled = ensemble.spec.loss_interval_score == "scaled"
    q_loss = interval_offset(out["p_loss_lo"], out["p_loss"], out["p_loss_hi"], yl, scaled=scaled)
    acks1 = calibration["acks"].to_numpy() > 0.5
    if not acks1.any():
        return q_loss, None
    unit = 1.0 if ensemble.spec.arch == "paper" else DUP_SCALE
    yd = calibration["p_dup"].to_numpy(dtype="float64")[acks1]
    q_dup = interval_offset(*(out[k][acks1] / unit for k in ("p_dup_lo", "p_dup", "p_dup_hi")), yd)
    return q_loss, q_dup


def recalibrate(model: Predictor, windows: pd.DataFrame) -> None:
    """Recompute ``model``'s conformal offsets on ``windows`` (a promoted model's newest windows), in place.

    Called on a challenger once it has won (:func:`predictor.promotion.challenge`): the decision judged
    the interval calibrated on the calibration split against the test split; the served model is then
    calibrated on both splits together (the newest 40% of the local windows, none trained on), so its
    offset rests on twice the windows and on the newest ones. With a few dozen windows the finite-sample
    rank ceil((n + 1) 0.9) otherwise lets one or two misses of a single run set q: on testbed round 10 the
    22 calibration windows of one unseen run gave q = 5.09 widths and [0, 1] intervals (held-out coverage
    100%), its 44 calibration and test windows q = 1.43 (96%, mean width 0.38;
    ``data/testbed-learning/recalibration.txt``).

    Args:
        model: A retrained model (its card has ``interval``); its ensemble's ``q_loss`` / ``q_dup`` change.
        windows: Training-store rows never trained on (:func:`calibration_offsets`' columns).

    The card's ``interval`` gets the new ``q_loss``, ``q_dup``, ``n_calibration`` and
    ``calibration_ms`` (first window start, last window end), and keeps the decision's offsets as
    ``q_loss_at_decision`` / ``q_dup_at_decision``. No rows: unchanged.
    """
    if windows.empty:
        return
    ensemble = model.ensemble
    interval = model.card.setdefault("interval", {})
    interval["q_loss_at_decision"] = float(ensemble.q_loss)
    interval["q_dup_at_decision"] = float(ensemble.q_dup)
    q_loss, q_dup = calibration_offsets(ensemble, windows)
    ensemble.q_loss.fill_(q_loss)
    if q_dup is not None:
        ensemble.q_dup.fill_(q_dup)
    interval.update(
        {
            "q_loss": float(ensemble.q_loss),
            "q_dup": float(ensemble.q_dup),
            "n_calibration": len(windows),
            "calibration_ms": [int(windows["window_start_ms"].min()), int(windows["window_end_ms"].max())],
            "recalibrated": "after promotion, on the calibration and test windows (never trained on)",
        }
    )
