"""The training store: every eligible final window the job audited, as a labelled training row (Parquet).

A final window result (``audit_record/window_result.py``) already holds what the predictor learns from
(paper Eq. 1): the producers' configuration, the network the producers measured (L from the TCP
retransmission ratio, D from the RTT), M, and the exact R_l and R_d the audit measured. The job appends
each eligible final window once to ``<training_dir>/date=YYYY-MM-DD/batch-<batch id>.parquet``
(:class:`TrainingStore`); ``kafka-audit predictor retrain --from-results <training_dir>`` reads it back.

Eligibility (:func:`skip_reason`, counted per reason by the job in
``kafka_audit_training_windows_total{outcome}``): the window has a producer configuration, a known
loss estimate L, at least ``min_messages`` messages sent (default 500: below it R_l is too noisy, its
binomial standard error at R_l = 0.05 exceeds 0.01), no unaudited producers (their messages would count
as duplicates or be unknown to the audit) and one producer configuration only (features of a mixed
window describe none of its producers).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kafka_plumbing.errors import ConfigError
from predictor.features import FEATURES, valid_rows, with_defaults

SKIP_REASONS: tuple[str, ...] = (
    "downstream_tier",
    "no_producer_config",
    "unmapped_config",
    "unknown_loss",
    "unknown_delay",
    "too_few_messages",
    "unaudited_producers",
    "mixed_config",
)
"""Why a final window is not stored, in the order :func:`skip_reason` checks them."""

DEFAULT_MIN_MESSAGES = 500
"""Fewest messages sent in a window for it to be a training example (the job's ``training_min_messages``)."""

LOCAL_SOURCE = "local"
"""``source`` of a training row from the job's own windows (base data rows carry their CSV's name)."""

COLUMNS: dict[str, str] = {
    **dict.fromkeys(FEATURES, "float64"),
    "p_loss": "float64",
    "p_dup": "float64",
    "n_sent": "int64",
    "duration_s": "float64",
    "topic": "string",
    "tier": "string",
    "window_start_ms": "int64",
    "window_end_ms": "int64",
    "model_version": "string",
    "pred_p_loss": "float64",
    "pred_p_loss_lo": "float64",
    "pred_p_loss_hi": "float64",
    "pred_p_dup": "float64",
    "source": "string",
}
"""Columns of a training row and their pandas dtypes (the Parquet schema, the same in every file).

Features as the model uses them (:data:`~predictor.features.FEATURES`, units there); ``p_loss`` = the
measured R_l and ``p_dup`` = the measured R_d clipped to [0, 1] (fractions; the labels); ``n_sent``
messages sent in the window; ``duration_s`` the window length (s; a window does not measure the
producers' capacity, so local rows carry no throughput label); the result key (``topic``, ``tier``,
``window_start_ms``) and ``window_end_ms`` (ms since the epoch, UTC); ``model_version`` and
``pred_*`` what the job predicted for the window (fractions; null when it predicted nothing);
``source`` = :data:`LOCAL_SOURCE`."""

KEY: tuple[str, ...] = ("topic", "tier", "window_start_ms")
"""A stored window's identity (the window result's key)."""


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)  # NaN is missing


def skip_reason(result: Mapping[str, Any], min_messages: int = DEFAULT_MIN_MESSAGES) -> str | None:
    """Return why a final window result is no training example, or None when it is one.

    Args:
        result: A final window-result row (``window_result.avsc`` fields; missing fields count as null).
        min_messages: Fewest messages ``sent`` in the window (default :data:`DEFAULT_MIN_MESSAGES`).

    Returns:
        The first applicable reason of :data:`SKIP_REASONS`: ``downstream_tier`` (a tier after the
        first one: a MirrorMaker 2 replica or an application consumer group, whose hop the producers'
        configuration does not decide; docs/DESIGN.md, "Tiers"), ``no_producer_config`` (no ``acks``),
        ``unmapped_config`` (``batch_num_messages`` or ``message_timeout_ms`` null: a client without the
        librdkafka setting, e.g. a Java producer audited by the JVM interceptors, batching by bytes),
        ``unknown_loss`` (``packet_loss_pct_est`` null), ``unknown_delay`` (``delay_ms_est`` null: no
        broker RTT sample, D would enter the model as 0), ``too_few_messages`` (``sent`` <
        ``min_messages``), ``unaudited_producers`` (> 0), ``mixed_config`` (``producer_configs`` > 1);
        None when the window is eligible.
    """
    previous = result.get("previous_tier")
    if not _missing(previous) and previous != "producer":
        return "downstream_tier"
    if _missing(result.get("acks")):
        return "no_producer_config"
    if _missing(result.get("batch_num_messages")) or _missing(result.get("message_timeout_ms")):
        return "unmapped_config"
    if _missing(result.get("packet_loss_pct_est")):
        return "unknown_loss"
    if _missing(result.get("delay_ms_est")):
        return "unknown_delay"
    sent = result.get("sent")
    if _missing(sent) or sent < min_messages:
        return "too_few_messages"
    unaudited = result.get("unaudited_producers")
    if not _missing(unaudited) and unaudited > 0:
        return "unaudited_producers"
    configs = result.get("producer_configs")
    if not _missing(configs) and configs > 1:
        return "mixed_config"
    return None


def _num(col: pd.Series) -> pd.Series:
    return pd.to_numeric(col, errors="coerce").astype("float64")


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Return ``frame`` with exactly :data:`COLUMNS` in their dtypes (one schema for every file).

    An :data:`~predictor.features.OPTIONAL` feature that is unknown (or missing: a file written before
    it existed) takes its default, as the job predicts with it.
    """
    out = pd.DataFrame(index=frame.index)
    for name, dtype in COLUMNS.items():
        col = frame[name] if name in frame else pd.Series(None, index=frame.index, dtype="object")
        if dtype == "string":
            out[name] = col.astype("string")
        elif dtype == "int64":
            out[name] = pd.to_numeric(col, errors="coerce").astype("int64")
        else:
            out[name] = _num(col)
    return with_defaults(out)


def training_frame(
    results: pd.DataFrame, features: pd.DataFrame, min_messages: int = DEFAULT_MIN_MESSAGES
) -> pd.DataFrame:
    """Turn final window results into training rows (:data:`COLUMNS`).

    Args:
        results: Final window-result rows (``window_result.avsc`` columns).
        features: The model's input for the same rows (same index; the
            :data:`~predictor.features.FEATURES` columns as the job predicts with them, e.g. from
            ``spark_streaming.predict.feature_frame``).
        min_messages: As in :func:`skip_reason`.

    Returns:
        One row per eligible window (:func:`skip_reason` is None) whose features are in the allowed
        ranges and whose R_l is known; columns :data:`COLUMNS`, index reset. R_l is clipped to [0, 1].
    """
    if results.empty:
        return _typed(pd.DataFrame(columns=list(COLUMNS)))
    eligible = np.array([skip_reason(r, min_messages) is None for r in results.to_dict("records")])
    rows, feats = results[eligible], with_defaults(features).loc[results.index[eligible], list(FEATURES)]
    out = pd.DataFrame(index=rows.index)
    for name in FEATURES:
        out[name] = _num(feats[name])
    out["p_loss"] = _num(rows["loss_rate"]).clip(0.0, 1.0)
    out["p_dup"] = _num(rows["duplicate_rate"]).fillna(0.0).clip(0.0, 1.0)
    out["n_sent"] = rows["sent"]
    out["duration_s"] = (_num(rows["window_end_ms"]) - _num(rows["window_start_ms"])) / 1000.0
    for name in ("topic", "tier", "window_start_ms", "window_end_ms", "model_version"):
        out[name] = rows.get(name)
    for name in ("p_loss", "p_loss_lo", "p_loss_hi", "p_dup"):
        out[f"pred_{name}"] = _num(rows[name]) if name in rows else np.nan
    out["source"] = LOCAL_SOURCE
    usable = valid_rows(out[list(FEATURES)].to_numpy(dtype=np.float64)) & out["p_loss"].notna().to_numpy()
    return _typed(out[usable]).reset_index(drop=True)


def _utc_date(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000.0, tz=dt.UTC).strftime("%Y-%m-%d")


def open_store(root: Path, option: str = "--from-results") -> TrainingStore:
    """Return the store at an existing directory ``root``.

    Raises:
        ConfigError: naming ``option``, if ``root`` is not a directory.
    """
    if not Path(root).is_dir():
        raise ConfigError(
            f"{option} {root}: not a directory (the job's training store: its training_dir, by default "
            "the training/ directory beside the checkpoint directory)"
        )
    return TrainingStore(Path(root))


class TrainingStore:
    """Training rows under ``root``: ``date=YYYY-MM-DD/batch-<writer>-<batch id, 12 digits>.parquet``.

    One file per (writer, micro-batch, UTC date of the window start). The writer names the streaming
    query (one per checkpoint), so jobs with different checkpoints - scenario after scenario, or a job
    moved to a new checkpoint - share a store without overwriting each other's batches. Files are written
    to a temporary name and renamed, so a reader never sees half a file; a re-run micro-batch (same
    writer and batch id after a restart) replaces its own file, so each window is stored exactly once.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def write(self, batch_id: int, rows: pd.DataFrame, writer: str = "") -> list[Path]:
        """Store the training rows (from :func:`training_frame`) of micro-batch ``batch_id`` of ``writer``.

        Args:
            batch_id: The micro-batch id.
            rows: Training rows.
            writer: The streaming query's id in this store (letters and digits; "" for none).

        Returns:
            The files written (none for no rows).
        """
        if rows.empty:
            return []
        typed = _typed(rows)
        dates = typed["window_start_ms"].map(_utc_date)
        written = []
        for date, part in typed.groupby(dates, sort=True):
            directory = self.root / f"date={date}"
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / (
                f"batch-{writer}-{batch_id:012d}.parquet" if writer else f"batch-{batch_id:012d}.parquet"
            )
            tmp = directory / f".{path.name}.{os.getpid()}.tmp"
            try:
                part.reset_index(drop=True).to_parquet(tmp, index=False)
                os.replace(tmp, path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
            written.append(path)
        return written

    def files(self) -> list[Path]:
        """Every stored file, in (date, batch id) order (temporary files excluded)."""
        if not self.root.is_dir():
            return []
        return sorted(self.root.glob("date=*/batch-*.parquet"))

    def load(self) -> pd.DataFrame:
        """Every stored window once (the newest batch's row per :data:`KEY`), sorted by window end.

        Returns:
            Columns :data:`COLUMNS`; empty (with those columns) when nothing is stored.
        """
        import pyarrow.dataset as ds

        files = self.files()
        if not files:
            return _typed(pd.DataFrame(columns=list(COLUMNS)))
        table = ds.dataset([str(f) for f in files], format="parquet").to_table()
        frame = _typed(table.to_pandas())
        # files() is in batch order within a date, and a window's start (part of its key) fixes its date,
        # so keep="last" keeps the newest batch's copy of a window stored twice
        frame = frame.drop_duplicates(list(KEY), keep="last")
        return frame.sort_values(["window_end_ms", *KEY], kind="stable").reset_index(drop=True)

    def count(self) -> int:
        """Return the rows stored, from the Parquet footers (without reading the data).

        A window counts once unless two different batches stored it.
        """
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(f).metadata.num_rows for f in self.files())
