"""The model card of a retrained challenger: lineage, data, split, ranges, interval and retraining settings.

:func:`challenger_card` writes what :func:`predictor.retrain.retrain` trained on and how, starting from
the parent's card; base data is named by :func:`predictor.data.portable_path`, so the card holds on every
install.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor import data as data_mod
from predictor.conformal import COVERAGE
from predictor.features import UNITS
from predictor.model import Predictor
from predictor.registry import model_version
from predictor.settings import RetrainSettings
from predictor.training_store import LOCAL_SOURCE

CARD_STALE_KEYS = ("version", "metrics", "reproduce", "paper_baseline_spec", "training_seconds", "split")
"""Keys of the parent's card that do not describe the challenger (set again, or not at all)."""


def challenger_card(
    parent: Predictor,
    ensemble: Any,
    settings: RetrainSettings,
    *,
    train: pd.DataFrame,
    base: pd.DataFrame | None,
    base_paths: Sequence[Path],
    local_split: dict[str, Any],
    weights_by_source: dict[str, float],
) -> dict[str, Any]:
    """Return the card of a challenger fine-tuned from ``parent`` (``metrics`` and timing not yet set).

    Args:
        parent: The model it started from (its card is copied, never modified).
        ensemble: The fine-tuned, calibrated :class:`~predictor.nets.Ensemble` (spec, ``q_loss``, ``q_dup``).
        settings: The retraining's settings (seed, threads, steps, batch size, learning rate, weighting).
        train: Every training row (base and local, with ``source``).
        base: The base data as loaded (None: none), both sides of its split.
        base_paths: The base data files, in ``base``'s order.
        local_split: :meth:`predictor.retrain.LocalSplit.describe` of the local windows.
        weights_by_source: Sampling weight per source (fractions summing to 1).

    Returns:
        The card: the parent's, less :data:`CARD_STALE_KEYS`, with ``parent_version``, ``rows_by_source``,
        ``local_split``, ``seed``, ``threads``, ``data`` (portable paths, sha256, rows), ``split``,
        ``trained_ranges`` (union of the parent's and the training rows'), ``interval`` and ``retrain``.
    """
    spec = ensemble.spec
    card = copy.deepcopy(parent.card)
    card["spec"], card["features"] = spec.to_json(), list(spec.features)
    card["units"] = {**card.get("units", {}), **{f: UNITS[f] for f in spec.features}}
    for stale in CARD_STALE_KEYS:
        card.pop(stale, None)
    n_base_train = int((train["source"] != LOCAL_SOURCE).sum())
    parent_ranges = parent.card.get("trained_ranges", {})
    card.update(
        {
            "parent_version": model_version(parent),
            "rows_by_source": {
                str(k): int(v) for k, v in train["source"].value_counts().sort_index().items()
            },
            "local_split": local_split,
            "seed": settings.seed,
            "threads": settings.threads,
            "data": data_mod.card_entries(base_paths, base) if base is not None else [],
            "split": {
                "rule": data_mod.SPLIT_RULE,
                "heldout_percent": data_mod.HELDOUT_PERCENT,
                "n_train": n_base_train,
                "n_heldout": len(base) - n_base_train if base is not None else 0,
            },
            "trained_ranges": {
                c: [
                    min(float(train[c].min()), *parent_ranges.get(c, [np.inf])),
                    max(float(train[c].max()), *parent_ranges.get(c, [-np.inf])),
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
                "n_calibration": local_split["n_calibration"],
            },
            "retrain": {
                "warm_start": "every member from the parent's weights; inputs restandardised, function kept",
                "steps_per_member": settings.steps,
                "batch_size": settings.batch_size,
                "lr": settings.lr,
                "local_share": settings.local_share,
                "full_share_windows": settings.full_share_windows,
                "weight_cap_messages": settings.weight_cap_messages,
                "weights_by_source": weights_by_source,
            },
        }
    )
    return card
