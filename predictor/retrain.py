"""Retraining on the deployment's own windows: warm start, weighting, time split, local conformal interval.

:func:`retrain` fine-tunes a copy of the parent model (the champion) on the base data plus the local
windows of the training store (:mod:`predictor.training_store`):

1. **Time split of the local windows** (:func:`split_local`, by ``window_end_ms``): the newest 20% are the
   *test* split (never trained on, never calibrated on; the champion/challenger decision,
   :mod:`predictor.promotion`, compares both models on it), the 20% before them the *calibration* split (the
   conformal interval), the oldest 60% the *training* split. Base data (the paper's ``experiments.csv`` and
   any testbed grid CSV) trains on its non-held-back rows only (:data:`predictor.data.SPLIT_RULE`), so the
   paper's held-back split stays unseen.
2. **Warm start**: every ensemble member starts from the parent's weights. A parent that reads fewer inputs
   than :data:`~predictor.features.FEATURES` (a model from before the TCP retransmission-timeout rate) gets
   the missing ones with zero weights and a clamp range of their default, so it computes what the parent did
   (:func:`predictor.warm_start.add_inputs`); fine-tuning then learns them from the local windows (the base
   data has them at their default). The input standardisation is refitted to the new training rows and the
   first layer rescaled so the function is unchanged (:func:`predictor.warm_start.restandardise`); the range
   that inputs are clamped to grows to the union of the parent's range and the new rows' (a deployment's
   ``batch.num.messages`` = 10,000 is no longer read as 10).
3. **Weighting** (:func:`source_weights`): each training row is drawn with a probability proportional to its
   weight. Within a source, a row weighs min(messages, ``weight_cap_messages`` (10,000)): a window of 500
   messages measures R_l with a binomial standard error sqrt(R_l (1 - R_l) / 500), ten times a 50,000-message
   window's, but beyond ~10,000 messages the window-to-window spread (about 0.01, like repeated experiments
   with equal settings) dominates, so more messages add no weight. The local windows together get the share
   ``local_share`` x min(1, n_local / ``full_share_windows``) of the total weight
   (:class:`~predictor.settings.RetrainSettings`; default 0.5 from 100 training windows on, growing linearly
   below: a handful of windows cannot outweigh 1,100 measured experiments), the base sources share the rest in
   proportion to their rows. Half the weight on the paper's data keeps the parent's fit there (criterion (b)).
4. **Fine-tuning**: each member takes ``steps`` AdamW steps (one-cycle learning rate up to ``lr``) on its own
   minibatches of ``batch_size`` rows drawn with replacement by weight, with the training loss of
   :mod:`predictor.train` (pinball loss of the 5th/50th/95th percentiles); the members step together
   (``torch.func.vmap``, :func:`predictor.warm_start.fine_tune`). The number of steps does not grow with the
   store, so retraining time is bounded (``steps``, default 600: 2 cores, about 4-9 s for 10,000 windows;
   ``lab/bench/retrain.py``). Deterministic for equal inputs, seed and thread count.
5. **Interval**: the 90% interval is recalibrated on the calibration split by split conformal quantile
   regression with scores relative to the interval's width (CQR-r, Sesia and Candes 2020, "A comparison of
   some conformal quantile regression methods"; :mod:`predictor.conformal`): a window's score is how far R_l
   lies outside the heads' interval [lo, hi] (negative inside) divided by its width, the offset q is the
   ceil((n + 1) 0.9)-th smallest score, and the interval becomes [lo - q w, hi + q w]
   (``ModelSpec.loss_interval_score = "scaled"``). With the additive scores of plain CQR (Romano et al. 2019,
   as :func:`predictor.train.fit` still calibrates the shipped model) a calibration split of fewer than 19
   windows takes its largest miss as the offset for every input: on testbed rounds 7 and 8 one burst window
   predicted at 0 that lost 0.67-0.76 widened every interval to [0, 0.67+] (coverage 100% on the held-out
   runs); relative scores keep the heads' input-dependent width (held-out coverage 96%, mean width 0.17-0.22,
   from the same calibration windows). As before the offset only widens (at least 0): narrowing the heads to
   fit a few stages of this deployment would narrow them on the paper's data too (tried: 0.34 coverage there
   after 200 windows). Heads wider than this deployment needs show as coverage above 97% and fail criterion
   (c). Once a challenger is promoted its offset is recomputed on the calibration and test windows together
   (:func:`predictor.conformal.recalibrate`): the served interval rests on the newest 40% of the windows, none
   trained on.
"""

from __future__ import annotations

import dataclasses
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
from predictor.conformal import calibration_offsets
from predictor.evaluate import metrics
from predictor.features import FEATURES, with_defaults
from predictor.model import Predictor
from predictor.retrain_card import challenger_card
from predictor.settings import FULL_SHARE_WINDOWS, LOCAL_SHARE, WEIGHT_CAP_MESSAGES, RetrainSettings
from predictor.training_store import COLUMNS, LOCAL_SOURCE
from predictor.warm_start import add_inputs, fine_tune, restandardise

DEFAULT_SETTINGS = RetrainSettings()
"""The field defaults of :class:`~predictor.settings.RetrainSettings` (the environment is not read)."""

TEST_FRACTION = 0.2
"""Share of the local windows (the newest) held back as the test split."""
CALIBRATION_FRACTION = 0.2
"""Share of the local windows (the ones before the test split) that calibrate the interval."""


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
            or with NaN weigh as ``weight_cap_messages`` (10,000) messages (the paper sent 10^6 per row).
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


def retrain(
    parent: Predictor,
    local: pd.DataFrame,
    base_paths: Sequence[Path],
    settings: RetrainSettings = DEFAULT_SETTINGS,
) -> RetrainResult:
    """Fine-tune a challenger from ``parent`` on the base data plus the local windows (module docstring).

    Args:
        parent: The model to start from (the champion); not modified.
        local: Local windows (:class:`~predictor.training_store.TrainingStore` rows: the
            :data:`~predictor.training_store.COLUMNS`).
        base_paths: Base data CSVs in the ``experiments.csv`` format (the paper's, testbed grids); their
            non-held-back rows train. Empty: local windows only.
        settings: Seed, threads, steps, batch size, learning rate, weighting and ``min_windows``
            (:class:`~predictor.settings.RetrainSettings`; the decision's criteria are not used here).
            On shared cores set ``OMP_WAIT_POLICY=PASSIVE`` before torch is imported (the CLI does): with
            spinning OpenMP threads a 2-thread retrain beside a busy Spark job took 10-40x longer.

    Returns:
        The challenger with its splits and card (no version yet; the registry sets it on save).

    Raises:
        ConfigError: for fewer than ``settings.min_windows`` local windows, a missing column, or
            unreadable base data.
    """
    import torch

    from predictor.train import features_for

    started = time.monotonic()
    local = with_defaults(local)  # windows stored before an optional feature existed: its default
    missing = [c for c in COLUMNS if c not in local.columns]
    if missing:
        raise ConfigError(f"--from-results: local windows lack column(s) {missing}")
    if len(local) < settings.min_windows:
        raise ConfigError(
            f"--from-results: {len(local)} eligible local window(s); need at least --min-windows "
            f"{settings.min_windows}"
        )
    torch.set_num_threads(settings.threads)
    split = split_local(local)
    base = data_mod.load(list(base_paths)) if base_paths else None
    base_train = base[~data_mod.heldout_mask(base)] if base is not None else None
    local_train = as_training_rows(split.train)
    parts = [local_train] if base_train is None else [base_train, local_train]
    train = pd.concat(parts, ignore_index=True)
    weights = source_weights(
        train, settings.local_share, settings.full_share_windows, settings.weight_cap_messages
    )

    ensemble = add_inputs(parent.ensemble, FEATURES)
    ensemble.spec = dataclasses.replace(ensemble.spec, loss_interval_score="scaled")
    xf = features_for(ensemble.spec, train)
    restandardise(ensemble, xf)
    log_tp = np.log(train["throughput_msgs_per_s"].to_numpy(dtype=np.float64))
    tp_mean, tp_std = float(ensemble.tp_mean), float(ensemble.tp_std)
    y = np.stack(
        [train["p_loss"].to_numpy(), train["p_dup"].to_numpy(), (log_tp - tp_mean) / tp_std], axis=1
    ).astype(np.float32)
    x = ensemble.scale(torch.from_numpy(xf))
    fine_tune(
        ensemble,
        x,
        torch.from_numpy(y),
        weights,
        seed=settings.seed,
        steps=settings.steps,
        batch_size=settings.batch_size,
        lr=settings.lr,
    )
    q_loss, q_dup = calibration_offsets(ensemble, split.calibration)
    ensemble.q_loss.fill_(q_loss)
    ensemble.q_dup.fill_(float(parent.ensemble.q_dup) if q_dup is None else q_dup)

    weights_by_source = {
        str(k): round(float(v), 4) for k, v in pd.Series(weights).groupby(train["source"]).sum().items()
    }
    card = challenger_card(
        parent,
        ensemble,
        settings,
        train=train,
        base=base,
        base_paths=base_paths,
        local_split=split.describe(),
        weights_by_source=weights_by_source,
    )
    rows_by_source = card["rows_by_source"]
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
