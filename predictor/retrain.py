"""Retraining on the deployment's own windows: warm start, weighting, time split, local conformal interval.

:func:`retrain` fine-tunes a copy of the parent model (the champion) on the base data plus the local
windows of the training store (:mod:`predictor.training_store`):

1. **Time split of the local windows** (:func:`split_local`, by ``window_end_ms``): the newest 20% are
   the *test* split (never trained on, never calibrated on; the champion/challenger decision,
   :mod:`predictor.promotion`, compares both models on it), the 20% before them the *calibration* split
   (the conformal interval), the oldest 60% the *training* split. Base data (the paper's
   ``experiments.csv`` and any testbed grid CSV) trains on its non-held-back rows only
   (:data:`predictor.data.SPLIT_RULE`), so the paper's held-back split stays unseen.
2. **Warm start**: every ensemble member starts from the parent's weights. A parent that reads fewer
   inputs than :data:`~predictor.features.FEATURES` (a model from before the TCP retransmission-timeout
   rate) gets the missing ones with zero weights and a clamp range of their default, so it computes
   what the parent did (:func:`add_inputs`); fine-tuning then learns them from the local windows (the
   base data has them at their default). The input standardisation is refitted to the new training
   rows and the first layer rescaled so the function is unchanged
   (:func:`restandardise`); the range that inputs are clamped to grows to the union of the parent's range
   and the new rows' (a deployment's ``batch.num.messages`` = 10,000 is no longer read as 10).
3. **Weighting** (:func:`source_weights`): each training row is drawn with a probability proportional
   to its weight. Within a source, a row weighs min(messages, :data:`WEIGHT_CAP_MESSAGES`): a window of
   500 messages measures R_l with a binomial standard error sqrt(R_l (1 - R_l) / 500), ten times a
   50,000-message window's, but beyond ~10,000 messages the window-to-window spread (about 0.01,
   like repeated experiments with equal settings) dominates, so more messages add no weight. The local
   windows together get the share ``local_share`` x min(1, n_local / :data:`FULL_SHARE_WINDOWS`) of
   the total weight (default 0.5 from 100 training windows on, growing linearly below: a handful of
   windows cannot outweigh 1,100 measured experiments), the base sources share the rest in proportion
   to their rows. Half the weight on the paper's data keeps the parent's fit there (criterion (b)).
4. **Fine-tuning**: each member takes ``steps`` AdamW steps (one-cycle learning rate up to ``lr``) on
   its own minibatches of ``batch_size`` rows drawn with replacement by weight, with the training loss
   of :mod:`predictor.train` (pinball loss of the 5th/50th/95th percentiles); the members step
   together (``torch.func.vmap``). The number of steps does
   not grow with the store, so retraining time is bounded (:data:`DEFAULT_STEPS`: 2 cores, about 4-9 s
   for 10,000 windows; ``bench/retrain.py``). Deterministic for equal inputs, seed and thread count.
5. **Interval**: the 90% interval is recalibrated on the calibration split by split conformal
   quantile regression with scores relative to the interval's width (CQR-r, Sesia and Candes 2020, "A
   comparison of some conformal quantile regression methods"; :func:`interval_offset`): a window's
   score is how far R_l lies outside the heads' interval [lo, hi] (negative inside) divided by its
   width, the offset q is the ceil((n + 1) 0.9)-th smallest score, and the interval becomes
   [lo - q w, hi + q w] (``ModelSpec.loss_interval_score = "scaled"``). With the additive scores of
   plain CQR (Romano et al. 2019, as :func:`predictor.train.fit` still calibrates the shipped model)
   a calibration split of fewer than 19 windows takes its largest miss as the offset for every input:
   on testbed rounds 7 and 8 one burst window predicted at 0 that lost 0.67-0.76 widened every interval
   to [0, 0.67+] (coverage 100% on the held-out runs); relative scores keep the heads' input-dependent
   width (held-out coverage 96%, mean width 0.17-0.22, from the same calibration windows). As before
   the offset only widens (at least 0): narrowing the heads to fit a few stages of this deployment
   would narrow them on the paper's data too (tried: 0.34 coverage there after 200 windows). Heads
   wider than this deployment needs show as coverage above 97% and fail criterion (c).
   Once a challenger is promoted its offset is recomputed on the calibration and test windows together
   (:func:`recalibrate`): the served interval rests on the newest 40% of the windows, none trained on.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kafka_plumbing.errors import ConfigError
from predictor import SHARED_DATA
from predictor import data as data_mod
from predictor.evaluate import metrics
from predictor.features import ALLOWED, BASE_FEATURES, FEATURES, UNITS, with_defaults
from predictor.model import Predictor
from predictor.registry import model_version
from predictor.training_store import COLUMNS, LOCAL_SOURCE

COVERAGE = 0.90
TEST_FRACTION = 0.2
"""Share of the local windows (the newest) held back as the test split."""
CALIBRATION_FRACTION = 0.2
"""Share of the local windows (the ones before the test split) that calibrate the interval."""
LOCAL_SHARE = 0.5
"""Share of the total sampling weight the local windows get once there are :data:`FULL_SHARE_WINDOWS`."""
FULL_SHARE_WINDOWS = 100
"""Local training windows from which they get the full :data:`LOCAL_SHARE`."""
WEIGHT_CAP_MESSAGES = 10_000
"""Messages beyond which a row weighs no more (within its source)."""
DEFAULT_STEPS = 600
"""AdamW steps per member."""
DEFAULT_BATCH_SIZE = 256
"""Rows per minibatch."""
DEFAULT_LR = 2e-3
"""Peak learning rate (one-cycle; the parent was trained with 1e-2)."""
DEFAULT_SEED = 20200
MIN_LOCAL_WINDOWS = 50
"""Fewest local windows to retrain on (10 test, 10 calibration, 30 training windows)."""


@dataclass(frozen=True)
class LocalSplit:
    """The local windows split by time (each part sorted by ``window_end_ms``).

    Attributes:
        train: The oldest windows (fine-tuning).
        calibration: The windows before the test split (the conformal interval).
        test: The newest windows (the decision; never trained or calibrated on).
    """

    train: pd.DataFrame
    calibration: pd.DataFrame
    test: pd.DataFrame

    def describe(self) -> dict[str, Any]:
        """Sizes and time bounds (ms since the epoch) of the parts, for the model card."""

        def bounds(part: pd.DataFrame) -> list[int] | None:
            if part.empty:
                return None
            return [int(part["window_start_ms"].min()), int(part["window_end_ms"].max())]

        return {
            "rule": (
                f"local windows sorted by window_end_ms: newest {TEST_FRACTION:.0%} test (never trained "
                f"or calibrated on), the {CALIBRATION_FRACTION:.0%} before calibration (conformal "
                "interval), the rest training"
            ),
            "n_train": len(self.train),
            "n_calibration": len(self.calibration),
            "n_test": len(self.test),
            "train_ms": bounds(self.train),
            "calibration_ms": bounds(self.calibration),
            "test_ms": bounds(self.test),
        }


@dataclass
class RetrainResult:
    """A challenger and what it was trained and checked on.

    Attributes:
        model: The challenger (card: ``parent_version``, ``rows_by_source``, ``local_split``,
            ``metrics`` = its own ``local_test`` and ``paper_heldout`` metrics; ``version`` unset).
        split: The local windows' time split.
        paper_heldout: The paper's held-back rows (:data:`predictor.data.SPLIT_RULE` on
            :data:`predictor.SHARED_DATA`).
        rows_by_source: Training rows per source (CSV file name, or ``local``).
        seconds: Wall time of :func:`retrain`, s.
    """

    model: Predictor
    split: LocalSplit
    paper_heldout: pd.DataFrame
    rows_by_source: dict[str, int]
    seconds: float
    weights_by_source: dict[str, float] = field(default_factory=dict)


def portable_path(path: Path) -> str:
    """Return ``path`` relative to the directory holding the product's packages if inside it, else as given.

    A card names its base data by a path that holds on every install and clone
    (``predictor/base_data/wu2020/experiments.csv``: relative to the repository or to site-packages), not
    the absolute path of the machine that retrained it (the sha256 beside it identifies the content).
    """
    root = SHARED_DATA.parents[3]
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


def as_training_rows(local: pd.DataFrame) -> pd.DataFrame:
    """Return local store rows in :func:`predictor.data.load`'s layout.

    No throughput label (a window does not measure capacity), family (``experiment``) = topic,
    ``source`` = ``local``.
    """
    out = local.copy()
    out["throughput_msgs_per_s"] = np.nan
    out["experiment"] = out["topic"].astype(str) if "topic" in out else LOCAL_SOURCE
    out["source"] = LOCAL_SOURCE
    return out


def split_local(
    local: pd.DataFrame,
    test_fraction: float = TEST_FRACTION,
    calibration_fraction: float = CALIBRATION_FRACTION,
) -> LocalSplit:
    """Split local windows by time (``window_end_ms``) into training, calibration and test.

    The newest ``test_fraction`` are the test split, the ``calibration_fraction`` before them the
    calibration split, the rest training; each part gets at least one window.

    Raises:
        ConfigError: with fewer than three windows.
    """
    n = len(local)
    if n < 3:
        raise ConfigError(f"--from-results: {n} local window(s); need at least 3 to split by time")
    ordered = local.sort_values("window_end_ms", kind="stable").reset_index(drop=True)
    n_test = max(1, round(n * test_fraction))
    n_cal = max(1, round(n * calibration_fraction))
    n_train = n - n_test - n_cal
    if n_train < 1:
        n_train, n_cal = 1, n - n_test - 1
    return LocalSplit(
        train=ordered.iloc[:n_train].reset_index(drop=True),
        calibration=ordered.iloc[n_train : n_train + n_cal].reset_index(drop=True),
        test=ordered.iloc[n_train + n_cal :].reset_index(drop=True),
    )


def source_weights(
    frame: pd.DataFrame,
    local_share: float = LOCAL_SHARE,
    full_share_windows: int = FULL_SHARE_WINDOWS,
    weight_cap: int = WEIGHT_CAP_MESSAGES,
) -> np.ndarray:
    """Return the sampling weight of each training row (sums to 1); see the module docstring, step 3.

    Args:
        frame: Training rows with ``source`` and (local rows) ``n_sent``; base rows without ``n_sent``
            or with NaN weigh as :data:`WEIGHT_CAP_MESSAGES` messages (the paper sent 10^6 per row).
        local_share: Share of the local rows once there are ``full_share_windows`` of them.
        full_share_windows: Local rows from which they get the full share.
        weight_cap: Messages beyond which a row weighs no more.
    """
    n_sent = frame["n_sent"] if "n_sent" in frame else pd.Series(np.nan, index=frame.index)
    raw = np.minimum(pd.to_numeric(n_sent, errors="coerce").fillna(weight_cap).to_numpy(float), weight_cap)
    raw = np.maximum(raw, 1.0)
    source = frame["source"].astype(str).to_numpy()
    is_local = source == LOCAL_SOURCE
    n_local, n_base = int(is_local.sum()), int((~is_local).sum())
    share = local_share * min(1.0, n_local / full_share_windows) if n_local else 0.0
    if n_base == 0:
        share = 1.0
    out = np.zeros(len(frame))
    if n_local:
        out[is_local] = share * raw[is_local] / raw[is_local].sum()
    for name in np.unique(source[~is_local]):
        rows = source == name
        out[rows] = (1.0 - share) * (rows.sum() / n_base) * raw[rows] / raw[rows].sum()
    return out / out.sum()


def add_inputs(ensemble: Any, features: tuple[str, ...] = FEATURES) -> Any:
    """Return a copy of ``ensemble`` that reads ``features``, computing what ``ensemble`` computed.

    Inputs the ensemble already reads keep their weights, standardisation and clamp range; a new input
    gets zero first-layer weights, standardisation (0, 1) and the clamp range of its pre-scaled default
    (:data:`~predictor.features.OPTIONAL`), so the function is unchanged until fine-tuning
    (:func:`restandardise` widens the range to the training rows').

    Args:
        ensemble: A :class:`~predictor.nets.Ensemble`; not modified.
        features: The inputs of the copy, in order; must include every input of ``ensemble``.

    Raises:
        ValueError: if ``features`` lacks an input ``ensemble`` reads.
    """
    import torch

    from predictor.nets import Ensemble
    from predictor.train import features_for

    old = tuple(ensemble.spec.features)
    if old == tuple(features):
        return copy.deepcopy(ensemble)
    if not set(old) <= set(features):
        raise ValueError(f"cannot drop inputs {sorted(set(old) - set(features))} of a warm-started model")
    spec = dataclasses.replace(ensemble.spec, features=tuple(features))
    wide = Ensemble(spec)
    keep = [features.index(f) for f in old]
    lowest = pd.DataFrame([{f: ALLOWED[f][0] for f in BASE_FEATURES}])  # defaults for the optional ones
    default = torch.from_numpy(features_for(spec, lowest)[0])
    state, target = ensemble.state_dict(), wide.state_dict()
    with torch.no_grad():
        for key, value in state.items():
            new = target[key]
            if new.shape == value.shape:
                new.copy_(value)
            elif key in ("x_shift", "x_scale", "x_lo", "x_hi"):
                start = {"x_shift": torch.zeros_like(new), "x_scale": torch.ones_like(new)}
                new.copy_(start.get(key, default))
                new[keep] = value
            else:  # a member's first layer: (hidden, inputs)
                new.zero_()
                new[:, keep] = value
    wide.load_state_dict(target)
    wide.eval()
    return wide


def restandardise(ensemble: Any, xf: np.ndarray) -> None:
    """Refit the input standardisation to pre-scaled features ``xf`` (n, 7), keeping the function.

    In place: every member's first layer is rescaled so the ensemble computes the same as before.

    With z = (x - s) / c the layer computes W z + b; for the new (s', c') it gets W' = W diag(c' / c)
    and b' = b + W (s' - s) / c. The clamp range (``x_lo``, ``x_hi``) becomes the union of the old one
    and ``xf``'s.
    """
    import torch

    if ensemble.spec.arch == "paper":
        shift, span = xf.min(0), xf.max(0) - xf.min(0)
    else:
        shift, span = xf.mean(0), xf.std(0)
    new_shift = torch.from_numpy(shift.astype(np.float32))
    new_scale = torch.from_numpy(np.where(span > 0, span, 1.0).astype(np.float32))
    old_shift, old_scale = ensemble.x_shift.clone(), ensemble.x_scale.clone()
    with torch.no_grad():
        for member in ensemble.members:
            first = member.net[0]
            w = first.weight.clone()
            first.bias.add_(w @ ((new_shift - old_shift) / old_scale))
            first.weight.mul_((new_scale / old_scale)[None, :])
        ensemble.x_shift.copy_(new_shift)
        ensemble.x_scale.copy_(new_scale)
        lo = torch.from_numpy(xf.min(0).astype(np.float32))
        hi = torch.from_numpy(xf.max(0).astype(np.float32))
        ensemble.x_lo.copy_(torch.minimum(ensemble.x_lo, lo))
        ensemble.x_hi.copy_(torch.maximum(ensemble.x_hi, hi))


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


def paper_heldout() -> pd.DataFrame:
    """Return the paper's held-back split (criterion (b) of the promotion; never trained on).

    The rows of :data:`predictor.SHARED_DATA` in :func:`predictor.data.heldout_mask`.
    """
    frame = data_mod.load([SHARED_DATA])
    return frame[data_mod.heldout_mask(frame)].reset_index(drop=True)


def baseline_mae(split: LocalSplit) -> float:
    """Return the test split's MAE of P_l (fraction) of a constant: the training windows' median R_l.

    A challenger that learnt nothing about which window loses what (e.g. from labels shuffled
    between windows) predicts about this constant; criterion (a) asks the challenger to beat it.
    """
    median = float(split.train["p_loss"].median())
    return float((split.test["p_loss"] - median).abs().mean())


def evaluate(model: Predictor, test: pd.DataFrame, paper: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Return ``{"local_test": metrics, "paper_heldout": metrics}`` of ``model``.

    :func:`predictor.evaluate.metrics` on the local test split (families = topics) and on the paper's
    held-back split.
    """
    local = as_training_rows(test)
    return {
        "local_test": metrics(model.predict(local), local),
        "paper_heldout": metrics(model.predict(paper), paper),
    }


def _fine_tune(
    ensemble: Any,
    x: Any,
    y: Any,
    weights: np.ndarray,
    *,
    seed: int,
    steps: int,
    batch_size: int,
    lr: float,
) -> None:
    """Fine-tune all members at once (``torch.func.vmap`` over their stacked weights), in place.

    Member k draws its own minibatches (generator seeded ``seed * 1000 + k``); each member's gradient is
    that of its own mean loss (:func:`predictor.train._loss`), as if trained alone, but the K members
    share every tensor operation, which is what makes a step cheap on 2 cores.
    """
    import torch
    from torch.func import functional_call, stack_module_state, vmap

    from predictor.train import _loss

    spec = ensemble.spec
    members = list(ensemble.members)
    k = len(members)
    probabilities = torch.from_numpy(weights.astype(np.float64))
    idx = torch.stack(
        [
            torch.multinomial(
                probabilities,
                steps * batch_size,
                replacement=True,
                generator=torch.Generator().manual_seed(seed * 1000 + i),
            )
            for i in range(k)
        ]
    )
    params, buffers = stack_module_state(members)  # leaves, requires_grad
    template = copy.deepcopy(members[0]).to("meta")

    def one(p: dict[str, Any], b: dict[str, Any], xb: Any) -> dict[str, Any]:
        return functional_call(template, (p, b), (xb,))

    forward = vmap(one)
    opt = torch.optim.AdamW(params.values(), lr=lr, weight_decay=spec.weight_decay, foreach=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    for step in range(steps):
        rows = idx[:, step * batch_size : (step + 1) * batch_size]  # (K, B)
        out = forward(params, buffers, x[rows])
        flat = {name: v.reshape(-1) for name, v in out.items()}
        loss = _loss(spec, flat, y[rows].reshape(-1, y.shape[1])) * k
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        for i, member in enumerate(members):
            member.load_state_dict({name: v[i].detach().clone() for name, v in params.items()})
            member.eval()
    ensemble.eval()


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


def retrain(
    parent: Predictor,
    local: pd.DataFrame,
    base_paths: Sequence[Path],
    *,
    seed: int = DEFAULT_SEED,
    threads: int = 2,
    steps: int = DEFAULT_STEPS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    lr: float = DEFAULT_LR,
    local_share: float = LOCAL_SHARE,
    full_share_windows: int = FULL_SHARE_WINDOWS,
    weight_cap: int = WEIGHT_CAP_MESSAGES,
    min_windows: int = MIN_LOCAL_WINDOWS,
) -> RetrainResult:
    """Fine-tune a challenger from ``parent`` on the base data plus the local windows (module docstring).

    Args:
        parent: The model to start from (the champion); not modified.
        local: Local windows (:class:`~predictor.training_store.TrainingStore` rows: the
            :data:`~predictor.training_store.COLUMNS`).
        base_paths: Base data CSVs in the ``experiments.csv`` format (the paper's, testbed grids); their
            non-held-back rows train. Empty: local windows only.
        seed: Seed of the sampling (member k uses ``seed * 1000 + k``).
        threads: torch CPU threads (results are reproducible per count). On shared cores set
            ``OMP_WAIT_POLICY=PASSIVE`` before torch is imported (the CLI does): with spinning OpenMP
            threads a 2-thread retrain beside a busy Spark job took 10-40x longer.
        steps: AdamW steps per member.
        batch_size: Rows per step.
        lr: Peak learning rate.
        local_share: Sampling share of the local windows (see :func:`source_weights`).
        full_share_windows: Local training windows from which they get ``local_share``.
        weight_cap: Messages beyond which a row weighs no more.
        min_windows: Fewest local windows.

    Returns:
        The challenger with its splits and card (no version yet; the registry sets it on save).

    Raises:
        ConfigError: for fewer than ``min_windows`` local windows, a missing column, or unreadable base
            data.
    """
    import torch

    from predictor.train import features_for

    started = time.monotonic()
    local = with_defaults(local)  # windows stored before an optional feature existed: its default
    missing = [c for c in COLUMNS if c not in local.columns]
    if missing:
        raise ConfigError(f"--from-results: local windows lack column(s) {missing}")
    if len(local) < max(min_windows, 3):
        raise ConfigError(
            f"--from-results: {len(local)} eligible local window(s); need at least --min-windows "
            f"{max(min_windows, 3)}"
        )
    torch.set_num_threads(threads)
    split = split_local(local)
    base = data_mod.load(list(base_paths)) if base_paths else None
    base_train = base[~data_mod.heldout_mask(base)] if base is not None else None
    local_train = as_training_rows(split.train)
    parts = [local_train] if base_train is None else [base_train, local_train]
    train = pd.concat(parts, ignore_index=True)
    weights = source_weights(train, local_share, full_share_windows, weight_cap)

    ensemble = add_inputs(parent.ensemble, FEATURES)
    ensemble.spec = dataclasses.replace(ensemble.spec, loss_interval_score="scaled")
    spec = ensemble.spec
    xf = features_for(spec, train)
    restandardise(ensemble, xf)
    log_tp = np.log(train["throughput_msgs_per_s"].to_numpy(dtype=np.float64))
    tp_mean, tp_std = float(ensemble.tp_mean), float(ensemble.tp_std)
    y = np.stack(
        [train["p_loss"].to_numpy(), train["p_dup"].to_numpy(), (log_tp - tp_mean) / tp_std], axis=1
    ).astype(np.float32)
    x = ensemble.scale(torch.from_numpy(xf))
    _fine_tune(
        ensemble, x, torch.from_numpy(y), weights, seed=seed, steps=steps, batch_size=batch_size, lr=lr
    )
    q_loss, q_dup = calibration_offsets(ensemble, split.calibration)
    ensemble.q_loss.fill_(q_loss)
    ensemble.q_dup.fill_(float(parent.ensemble.q_dup) if q_dup is None else q_dup)

    rows_by_source = {str(k): int(v) for k, v in train["source"].value_counts().sort_index().items()}
    weights_by_source = {
        str(k): round(float(v), 4) for k, v in pd.Series(weights).groupby(train["source"]).sum().items()
    }
    card = copy.deepcopy(parent.card)
    card["spec"], card["features"] = spec.to_json(), list(spec.features)
    card["units"] = {**card.get("units", {}), **{f: UNITS[f] for f in spec.features}}
    for stale in ("version", "metrics", "reproduce", "paper_baseline_spec", "training_seconds", "split"):
        card.pop(stale, None)
    card.update(
        {
            "parent_version": model_version(parent),
            "rows_by_source": rows_by_source,
            "local_split": split.describe(),
            "seed": seed,
            "threads": threads,
            "data": [
                {
                    "file": portable_path(p),
                    "sha256": data_mod.file_sha256(p),
                    "rows": int((base["source"] == p.name).sum()) if base is not None else 0,
                }
                for p in base_paths
            ],
            "split": {
                "rule": data_mod.SPLIT_RULE,
                "heldout_percent": data_mod.HELDOUT_PERCENT,
                "n_train": len(base_train) if base_train is not None else 0,
                "n_heldout": len(base) - len(base_train) if base is not None else 0,
            },
            "trained_ranges": {
                c: [
                    min(float(train[c].min()), *parent.card.get("trained_ranges", {}).get(c, [np.inf])),
                    max(float(train[c].max()), *parent.card.get("trained_ranges", {}).get(c, [-np.inf])),
                ]
                for c in spec.features
            },
            "interval": {
                "coverage": COVERAGE,
                "method": (
                    "quantile heads (5th/95th) + split-conformal widening from the local calibration "
                    "windows, scores relative to the interval width (CQR-r)"
                ),
                "q_loss": float(ensemble.q_loss),
                "q_dup": float(ensemble.q_dup),
                "n_calibration": len(split.calibration),
            },
            "retrain": {
                "warm_start": "every member from the parent's weights; inputs restandardised, function kept",
                "steps_per_member": steps,
                "batch_size": batch_size,
                "lr": lr,
                "local_share": local_share,
                "full_share_windows": full_share_windows,
                "weight_cap_messages": weight_cap,
                "weights_by_source": weights_by_source,
            },
        }
    )
    model = Predictor(ensemble, card)
    paper = paper_heldout()
    card["metrics"] = evaluate(model, split.test, paper)
    seconds = time.monotonic() - started
    card["training_seconds"] = round(seconds, 1)
    return RetrainResult(
        model=model,
        split=split,
        paper_heldout=paper,
        rows_by_source=rows_by_source,
        seconds=seconds,
        weights_by_source=weights_by_source,
    )
