"""Training data: the measured experiments (``experiments.csv`` format), targets and the held-back split.

Targets per row: P_l (``p_loss``, fraction), P_d (``p_dup``, fraction) and throughput
(messages/s = ``n_sent / duration_s``, NaN where ``duration_s`` is missing or not positive).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kafka_plumbing.errors import ConfigError
from predictor import SHARED_DATA as SHARED_DATA
from predictor.features import BASE_FEATURES, FEATURES, current_columns, validate_frame

TARGETS: tuple[str, ...] = ("p_loss", "p_dup")
HELDOUT_PERCENT = 20
SPLIT_RULE = (
    f"held out if int(sha256(settings)[:8], 16) % 100 < {HELDOUT_PERCENT}, where settings = the 7 feature "
    "values formatted with '%g' and joined by ','; rows with equal settings (repeated experiments) always "
    "fall on the same side"
)


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def portable_path(path: Path) -> str:
    """Return ``path`` relative to the directory holding the product's packages if inside it, else as given.

    A model card names its data by a path that holds on every install and clone
    (``predictor/base_data/wu2020/experiments.csv``: relative to the repository or to site-packages), not
    the absolute path of the machine that trained it (the sha256 beside it identifies the content).
    """
    root = SHARED_DATA.parents[3]
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


def card_entries(paths: Sequence[Path], frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Return a model card's ``data``: per file its :func:`portable_path`, sha256 and rows in ``frame``.

    Args:
        paths: The data files, as given to :func:`load`.
        frame: What :func:`load` returned for them (rows are counted by ``source``, the file name).
    """
    return [
        {
            "file": portable_path(p),
            "sha256": file_sha256(p),
            "rows": int((frame["source"] == p.name).sum()),
        }
        for p in paths
    ]


def load(paths: Sequence[Path]) -> pd.DataFrame:
    """Read and concatenate experiment CSVs (``experiments.csv`` columns; extra columns are ignored).

    Required columns: the 7 :data:`~predictor.features.BASE_FEATURES` (or their former names,
    :data:`~predictor.features.RENAMED`: ``batch_size``), ``p_loss``, ``p_dup``. Optional:
    the :data:`~predictor.features.OPTIONAL` features (their default where missing),
    ``n_sent`` and ``duration_s`` (throughput target), ``experiment`` (family for the breakdown; default
    the file's stem).

    Returns:
        DataFrame with the feature columns (float), ``p_loss``, ``p_dup``, ``throughput_msgs_per_s``
        (NaN where unknown), ``experiment`` and ``source`` (file name), index 0..n-1.

    Raises:
        ConfigError: if a file is missing, has no rows, lacks a column or holds out-of-range values.
    """
    if not paths:
        raise ConfigError("--data: give at least one CSV in the experiments.csv format")
    parts = []
    for path in paths:
        if not path.is_file():
            raise ConfigError(f"--data {path}: no such file")
        df = current_columns(pd.read_csv(path))
        missing = [c for c in (*BASE_FEATURES, *TARGETS) if c not in df.columns]
        if missing:
            raise ConfigError(f"--data {path}: missing column(s) {missing} (see the experiments.csv README)")
        if df.empty:
            raise ConfigError(f"--data {path}: no rows")
        try:
            out = pd.DataFrame(validate_frame(df), columns=list(FEATURES))
        except ConfigError as exc:
            raise ConfigError(f"--data {path}: {exc}") from exc
        for t in TARGETS:
            y = pd.to_numeric(df[t], errors="coerce")
            if not y.between(0.0, 1.0).all():
                raise ConfigError(f"--data {path}: column {t} must be a fraction in [0, 1] for every row")
            out[t] = y.astype("float64")
        if {"n_sent", "duration_s"} <= set(df.columns):
            n_sent = pd.to_numeric(df["n_sent"], errors="coerce")
            dur = pd.to_numeric(df["duration_s"], errors="coerce")
            out["throughput_msgs_per_s"] = (n_sent / dur).where(dur > 0)
        else:
            out["throughput_msgs_per_s"] = np.nan
        out["experiment"] = df["experiment"].astype(str) if "experiment" in df.columns else path.stem
        out["source"] = path.name
        parts.append(out)
    return pd.concat(parts, ignore_index=True)


def settings_key(frame: pd.DataFrame) -> pd.Series:
    """Return the settings string of each row: the 7 feature values formatted with ``%g``, joined by ``,``.

    The settings are :data:`~predictor.features.BASE_FEATURES`, what an experiment sets (the
    retransmission-timeout rate is measured, not set; leaving it out keeps the paper's held-back split).
    """
    cols = [frame[c].map(lambda v: f"{v:g}") for c in BASE_FEATURES]
    key = cols[0]
    for c in cols[1:]:
        key = key + "," + c
    return key


def heldout_mask(frame: pd.DataFrame) -> np.ndarray:
    """Boolean array, True for rows in the held-back part (:data:`SPLIT_RULE`, ~20% of the settings)."""
    keys = settings_key(frame)
    buckets = keys.map(lambda k: int(hashlib.sha256(k.encode()).hexdigest()[:8], 16) % 100)
    return (buckets < HELDOUT_PERCENT).to_numpy()
