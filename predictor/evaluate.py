"""Accuracy of a model on measured experiments: MAE of P_l and P_d, 90% interval coverage, per family.

:func:`metrics` compares predictions with measurements; :func:`evaluate_model` (``kafka-audit predictor
evaluate``) picks the rows a model may be judged on and computes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from kafka_plumbing.errors import ConfigError
from predictor import data as data_mod

if TYPE_CHECKING:
    from predictor.model import Predictor

Split = Literal["auto", "heldout", "train", "all"]
"""Which rows ``evaluate_model`` judges: ``auto``, ``heldout``, ``train`` or ``all``."""


def _block(pred: pd.DataFrame, truth: pd.DataFrame) -> dict[str, Any]:
    yl, yd = truth["p_loss"].to_numpy(), truth["p_dup"].to_numpy()
    pl, pdup = pred["p_loss"].to_numpy(), pred["p_dup"].to_numpy()
    cov_l = (yl >= pred["p_loss_lo"].to_numpy()) & (yl <= pred["p_loss_hi"].to_numpy())
    cov_d = (yd >= pred["p_dup_lo"].to_numpy()) & (yd <= pred["p_dup_hi"].to_numpy())
    tp = truth["throughput_msgs_per_s"].to_numpy(dtype="float64")
    tp_hat = pred["throughput_msgs_per_s"].to_numpy(dtype="float64")
    known = np.isfinite(tp) & np.isfinite(tp_hat)
    rel = np.abs(tp_hat[known] - tp[known]) / tp[known]
    return {
        "n": len(truth),
        "mae_p_loss": float(np.abs(pl - yl).mean()),
        "mae_p_dup": float(np.abs(pdup - yd).mean()),
        "coverage_90_p_loss": float(cov_l.mean()),
        "coverage_90_p_dup": float(cov_d.mean()),
        "mean_width_90_p_loss": float((pred["p_loss_hi"] - pred["p_loss_lo"]).mean()),
        "n_throughput": int(known.sum()),
        "median_rel_error_throughput": float(np.median(rel)) if known.any() else None,
    }


def metrics(pred: pd.DataFrame, truth: pd.DataFrame) -> dict[str, Any]:
    """Compare predictions with measurements.

    Args:
        pred: Output of :meth:`~predictor.model.Predictor.predict` for ``truth``'s rows (same index).
        truth: Rows from :func:`predictor.data.load` (``p_loss``, ``p_dup``, ``throughput_msgs_per_s``,
            ``experiment``).

    Returns:
        ``{"n", "mae_p_loss", "mae_p_dup", "coverage_90_p_loss", "coverage_90_p_dup",
        "mean_width_90_p_loss", "n_throughput", "median_rel_error_throughput", "families": {family:
        same keys}}``; MAE in fraction units (0-1), coverage = share of rows inside [lo, hi], throughput
        error relative (|predicted - measured| / measured, median over rows with a duration).

    Raises:
        ValueError: if ``truth`` is empty.
    """
    if truth.empty:
        raise ValueError("no rows to evaluate")
    out = _block(pred, truth)
    out["families"] = {
        str(fam): _block(pred.loc[idx], truth.loc[idx])
        for fam, idx in truth.groupby("experiment", sort=True).groups.items()
    }
    return out


def select_rows(model: Predictor, paths: Sequence[Path], split: Split) -> tuple[pd.DataFrame, str]:
    """Load ``paths`` and keep the rows to evaluate.

    ``auto``: for a file the model was trained on (same sha256 as in its card), its held-back rows; for
    any other file, all rows. ``heldout`` / ``train``: that side of the split for every file; ``all``.

    Returns:
        The rows and a description of the selection.

    Raises:
        ConfigError: if no rows are left.
    """
    frame = data_mod.load(paths)
    held = data_mod.heldout_mask(frame)
    trained = {d["sha256"] for d in model.card.get("data", [])}
    if split == "auto":
        seen = {p.name for p in paths if data_mod.file_sha256(p) in trained}
        keep = np.where(frame["source"].isin(seen).to_numpy(), held, True)
        what = f"auto: held-back rows of {sorted(seen)}, all rows of the others" if seen else "auto: all rows"
    elif split == "heldout":
        keep, what = held, "heldout"
    elif split == "train":
        keep, what = ~held, "train"
    else:
        keep, what = np.ones(len(frame), dtype=bool), "all"
    rows = frame[keep]
    if rows.empty:
        raise ConfigError(f"--split {split}: no rows selected from {[str(p) for p in paths]}")
    return rows, what


def evaluate_model(model: Predictor, paths: Sequence[Path], split: Split = "auto") -> dict[str, Any]:
    """Metrics of ``model`` on the selected rows of ``paths`` (see :func:`select_rows`, :func:`metrics`)."""
    rows, what = select_rows(model, paths, split)
    out = metrics(model.predict(rows), rows)
    return {"split": what, **out}
