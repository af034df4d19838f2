"""Training: cross-fitted ensemble, conformal calibration of the 90% intervals, deterministic by seed.

Intervals (improved model): each member learns the 5th/50th/95th percentiles (pinball loss). Member k
is trained without fold k (folds group rows by their settings, so repeated experiments never straddle
folds); its predictions on fold k are out-of-fold. Conformalised quantile regression (Romano et al.
2019, "CV+" style) then widens every interval by the 90% empirical quantile of the out-of-fold scores
``max(lo - y, y - hi)``, so the shipped interval covers ~90% of unseen settings.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from audit_record import window_result
from predictor.data import settings_key
from predictor.features import columns_of, feature_matrix, raw, transform
from predictor.nets import DUP_SCALE, QUANTILES, Ensemble, Member, ModelSpec

COVERAGE = 0.90
Progress = Callable[[int, int], None]
"""Called as ``progress(steps_done, steps_total)`` during training."""


@dataclass
class FitResult:
    """A trained ensemble and its out-of-fold diagnostics.

    Attributes:
        model: The ensemble, in eval mode, offsets set.
        oof: Out-of-fold predictions per training row (columns ``p_loss``, ``p_loss_lo``, ...), before
            conformal widening; in-sample when ``spec.members == 1``.
    """

    model: Ensemble
    oof: pd.DataFrame


def features_for(spec: ModelSpec, x: np.ndarray | pd.DataFrame) -> np.ndarray:
    """Pre-scaled features for ``spec.arch`` (log transforms for improved, raw for paper), float32 (n, k).

    Args:
        spec: The model spec; its ``features`` (k of them) are the columns returned, in its order.
        x: Validated feature matrix (n, 8) in :data:`~predictor.features.FEATURES` order, or a frame with
            those columns (optional ones may be missing: their default).
    """
    if isinstance(x, pd.DataFrame):
        x = feature_matrix(x)
    scaled = raw(x) if spec.arch == "paper" else transform(x)
    return scaled[:, columns_of(spec.features)]


def _folds(frame: pd.DataFrame, k: int, seed: int) -> np.ndarray:
    keys = settings_key(frame)
    h = keys.map(lambda s: int(hashlib.sha256(f"{seed}:{s}".encode()).hexdigest()[:8], 16))
    uniq = np.sort(h.unique())
    order = {v: i % k for i, v in enumerate(uniq)}
    return h.map(order).to_numpy()


def _pinball(pred: torch.Tensor, y: torch.Tensor, tau: float) -> torch.Tensor:
    d = y - pred
    return torch.maximum(tau * d, (tau - 1.0) * d)


def _loss(spec: ModelSpec, out: dict[str, torch.Tensor], y: torch.Tensor) -> torch.Tensor:
    """Mean training loss; y columns: p_loss, p_dup (fraction), std log throughput (NaN = unknown)."""
    tp, mask = y[:, 2], ~torch.isnan(y[:, 2])
    tp_err = torch.where(mask, out["log_tp"] - torch.nan_to_num(tp), torch.zeros_like(tp))
    if spec.arch == "paper":
        # The paper's ANN predicts P_l and P_d only (Sec. III-G); its throughput output stays untrained.
        return ((out["p_loss"] - y[:, 0]) ** 2 + (out["p_dup"] - y[:, 1]) ** 2).mean()
    lo_t, med_t, hi_t = QUANTILES
    yd = y[:, 1] * DUP_SCALE
    ql = (
        _pinball(out["p_loss"], y[:, 0], med_t)
        + _pinball(out["p_loss_lo"], y[:, 0], lo_t)
        + _pinball(out["p_loss_hi"], y[:, 0], hi_t)
    )
    qd = (
        _pinball(out["p_dup"], yd, med_t)
        + _pinball(out["p_dup_lo"], yd, lo_t)
        + _pinball(out["p_dup_hi"], yd, hi_t)
    )
    huber = torch.nn.functional.huber_loss(tp_err, torch.zeros_like(tp_err), reduction="sum", delta=1.0)
    return ql.mean() + 0.1 * qd.mean() + 0.1 * huber / mask.sum().clamp(min=1)


def _train_member(
    spec: ModelSpec, x: torch.Tensor, y: torch.Tensor, seed: int, tick: Callable[[], None]
) -> Member:
    torch.manual_seed(seed)
    member = Member(spec)
    if spec.optimizer == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(member.parameters(), lr=spec.lr)
    else:
        opt = torch.optim.AdamW(member.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
    steps_per_epoch = math.ceil(len(x) / spec.batch_size)
    sched = (
        torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=spec.lr, total_steps=spec.epochs * steps_per_epoch, pct_start=0.1
        )
        if spec.optimizer == "adamw"
        else None
    )
    gen = torch.Generator().manual_seed(seed)
    member.train()
    for _ in range(spec.epochs):
        perm = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), spec.batch_size):
            idx = perm[i : i + spec.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = _loss(spec, member(x[idx]), y[idx])
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
        tick()
    member.eval()
    return member


def _conformal_offset(scores: np.ndarray, coverage: float = COVERAGE) -> float:
    """Split-conformal quantile: the ceil((n+1)*coverage)-th smallest score (0 if no scores)."""
    if len(scores) == 0:
        return 0.0
    s = np.sort(scores)
    k = min(len(s) - 1, math.ceil((len(s) + 1) * coverage) - 1)
    return float(max(s[k], 0.0))


def fit(frame: pd.DataFrame, spec: ModelSpec, seed: int, progress: Progress | None = None) -> FitResult:
    """Train an :class:`~predictor.nets.Ensemble` on ``frame`` (output of :func:`predictor.data.load`).

    Deterministic for a given ``seed``, data and thread count (``torch.set_num_threads`` is the caller's).

    Args:
        frame: Training rows: features, ``p_loss``, ``p_dup``, ``throughput_msgs_per_s`` (NaN allowed).
        spec: Architecture and hyper-parameters.
        seed: Seed for initialisation, shuffling and the fold assignment.
        progress: Optional callback ``(epochs_done, epochs_total)`` over all members.

    Returns:
        The fitted ensemble (offsets calibrated) and out-of-fold predictions.
    """
    torch.manual_seed(seed)
    xf = features_for(spec, frame)
    model = Ensemble(spec)
    if spec.arch == "paper":
        shift, span = xf.min(0), xf.max(0) - xf.min(0)
    else:
        shift, span = xf.mean(0), xf.std(0)
    model.x_shift.copy_(torch.from_numpy(shift))
    model.x_lo.copy_(torch.from_numpy(xf.min(0)))
    model.x_hi.copy_(torch.from_numpy(xf.max(0)))
    model.x_scale.copy_(torch.from_numpy(np.where(span > 0, span, 1.0).astype(np.float32)))
    log_tp = np.log(frame["throughput_msgs_per_s"].to_numpy(dtype=np.float64))
    known = np.isfinite(log_tp)
    tp_mean = float(log_tp[known].mean()) if known.any() else 0.0
    tp_std = float(log_tp[known].std()) if known.sum() > 1 else 1.0
    model.tp_mean.fill_(tp_mean)
    model.tp_std.fill_(tp_std or 1.0)
    y = np.stack(
        [frame["p_loss"].to_numpy(), frame["p_dup"].to_numpy(), (log_tp - tp_mean) / (tp_std or 1.0)], axis=1
    ).astype(np.float32)
    xs = model.scale(torch.from_numpy(xf))
    yt = torch.from_numpy(y)
    k = spec.members
    folds = _folds(frame, k, seed) if k > 1 else np.full(len(frame), -1)
    total, done = spec.epochs * k, 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    oof = pd.DataFrame(
        index=frame.index,
        columns=list(window_result.PREDICTION_FIELDS),
        dtype="float64",
    )
    for i in range(k):
        train_rows = folds != i
        member = _train_member(spec, xs[train_rows], yt[train_rows], seed * 1000 + i, tick)
        model.members[i] = member
        eval_rows = folds == i if k > 1 else np.ones(len(frame), dtype=bool)
        with torch.no_grad():
            o = member(xs[eval_rows])
        dup_unit = 1.0 if spec.arch == "paper" else DUP_SCALE
        for col in oof.columns:
            v = o[col].numpy().astype("float64")
            oof.loc[eval_rows, col] = v / dup_unit if col.startswith("p_dup") else v
    model.eval()
    oof = oof.clip(0.0, 1.0)
    acks1 = frame["acks"].to_numpy() > 0.5
    oof.loc[~acks1, ["p_dup", "p_dup_lo", "p_dup_hi"]] = 0.0
    yl, yd = frame["p_loss"].to_numpy(), frame["p_dup"].to_numpy()
    s_loss = np.maximum(oof["p_loss_lo"].to_numpy() - yl, yl - oof["p_loss_hi"].to_numpy())
    s_dup = np.maximum(oof["p_dup_lo"].to_numpy() - yd, yd - oof["p_dup_hi"].to_numpy())[acks1]
    model.q_loss.fill_(_conformal_offset(s_loss))
    model.q_dup.fill_(_conformal_offset(s_dup))
    return FitResult(model=model, oof=oof)
