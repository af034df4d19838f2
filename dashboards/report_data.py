"""Read what ``kafka-audit report`` shows: final window results from Parquet, alert events from a file.

Results are the reconciliation job's Parquet files (``ParquetResultSink``:
``<root>/date=YYYY-MM-DD/batch-<id>.parquet``, one row per window result). Files written before the
live-comparison fields existed lack ``p_loss``, ``gamma_actual`` and the rest: they are read all the
same and those columns come out null. Likewise ``model_version`` and ``model_calibrated``: predictions
written before them are scored under the version :data:`UNKNOWN_VERSION` (:func:`predicted_windows`).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from audit_record import window_result
from kafka_plumbing.errors import ConfigError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def parse_since(text: str) -> timedelta:
    """Parse a look-back such as ``90s``, ``30m``, ``1h``, ``2d``, ``1w`` (also ``1.5h``).

    Raises:
        ConfigError: naming ``--since`` and the accepted forms.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(
            f"--since {text!r}: expected a positive number and a unit s, m, h, d or w (e.g. 1h)"
        )
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def _parquet_files(root: Path, since_day: str | None) -> list[Path]:
    files = []
    for path in sorted(root.rglob("*.parquet")):
        day = next((p.split("=", 1)[1] for p in path.parent.parts if p.startswith("date=")), None)
        if since_day is None or day is None or day >= since_day:
            files.append(path)
    return files


def load_results(root: Path, since: timedelta | None = None, now: datetime | None = None) -> pd.DataFrame:
    """Return the final window results under ``root`` whose window ended within ``since`` of ``now``.

    Args:
        root: Parquet results root (``spark-job --parquet-dir``).
        since: Look-back (None: everything).
        now: Reference time (default: the current UTC time).

    Returns:
        One row per (topic, window_start_ms, tier), the newest ``result_at_ms`` if a window appears more
        than once, sorted by window start; every live-comparison field
        (``window_result.LIVE_COMPARISON_FIELDS``) present (null if absent).

    Raises:
        ConfigError: ``root`` is not a directory.
    """
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"--results-dir {root}: no such directory (the spark-job --parquet-dir)")
    now = now or datetime.now(UTC)
    cutoff_ms = int((now - since).timestamp() * 1000) if since is not None else None
    since_day = (now - since).strftime("%Y-%m-%d") if since is not None else None
    tables = [pq.read_table(f, partitioning=None) for f in _parquet_files(root, since_day)]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        frame = pd.DataFrame(columns=["topic", "window_start_ms", "window_end_ms", "tier", "state"])
    else:
        frame = pa.concat_tables(tables, promote_options="default").to_pandas()
    for col in window_result.LIVE_COMPARISON_FIELDS:
        if col not in frame.columns:
            frame[col] = None
    frame = frame[frame["state"] == "final"]
    if cutoff_ms is not None:
        frame = frame[frame["window_end_ms"] >= cutoff_ms]
    if "result_at_ms" in frame.columns:
        frame = frame.sort_values("result_at_ms")
    frame = frame.drop_duplicates(["topic", "window_start_ms", "tier"], keep="last")
    return frame.sort_values(["window_start_ms", "topic", "tier"]).reset_index(drop=True)


def load_alerts(
    path: Path | None, since: timedelta | None = None, now: datetime | None = None
) -> pd.DataFrame:
    """Return alert events (``alerts/alert.avsc`` fields) from a JSON-lines or Parquet file or directory.

    The newest event per alert episode (alertname, topic, tier, starts_at_ms) is kept, so an alert that
    fired and resolved shows once, resolved. Episodes that ended before ``now - since`` are dropped.

    Args:
        path: ``.jsonl`` / ``.json`` file, ``.parquet`` file, or a directory of them; None or missing:
            no alerts.
        since: Look-back (None: everything).
        now: Reference time (default: now, UTC).

    Raises:
        ConfigError: a line of a JSON-lines file is not a JSON object.
    """
    if path is None or not Path(path).exists():
        return pd.DataFrame()
    path = Path(path)
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    frames = []
    for f in files:
        if f.suffix == ".parquet":
            frames.append(pq.read_table(f, partitioning=None).to_pandas())
        elif f.suffix in (".jsonl", ".json"):
            rows = []
            for number, line in enumerate(f.read_text().splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"--alerts {f}: line {number} is not JSON ({exc.msg})") from None
                if not isinstance(row, dict):
                    raise ConfigError(f"--alerts {f}: line {number} is not a JSON object")
                rows.append(row)
            frames.append(pd.DataFrame(rows))
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame()
    alerts = pd.concat(frames, ignore_index=True)
    episode = [c for c in ("alertname", "topic", "tier", "starts_at_ms") if c in alerts.columns]
    if "event_at_ms" in alerts.columns:
        alerts = alerts.sort_values("event_at_ms")
    if episode:
        alerts = alerts.drop_duplicates(episode, keep="last")
    if since is not None and "starts_at_ms" in alerts.columns:
        cutoff_ms = int(((now or datetime.now(UTC)) - since).timestamp() * 1000)
        ended = alerts["ends_at_ms"] if "ends_at_ms" in alerts.columns else None
        keep = alerts["starts_at_ms"] >= cutoff_ms
        if ended is not None:
            keep |= ended.isna() | (ended >= cutoff_ms)
        alerts = alerts[keep]
    sort = "starts_at_ms" if "starts_at_ms" in alerts.columns else alerts.columns[0]
    return alerts.sort_values(sort, ascending=False).reset_index(drop=True)


UNKNOWN_VERSION = "unknown"
"""Model version shown for predictions written before results carried ``model_version`` (the shipped
model or the job's pinned ``--model``: the results do not say which)."""

ROLLING_WINDOWS = 30
"""Final windows per model version in the rolling live MAE and coverage (the job's default
``calibration_windows``)."""


def predicted_windows(results: pd.DataFrame) -> pd.DataFrame:
    """Return the final windows that have both a prediction and a measured R_l, scored.

    Args:
        results: Final window results (:func:`load_results`).

    Returns:
        Those rows, sorted by ``window_end_ms``, with ``version`` (``model_version``, or
        :data:`UNKNOWN_VERSION` for results written before the field existed), ``abs_error`` =
        ``|p_loss - loss_rate|`` (fraction of messages) and ``covered`` (1.0 if ``p_loss_lo <= loss_rate
        <= p_loss_hi``, 0.0 if not, NaN without an interval).
    """
    cols = ["p_loss", "loss_rate"]
    if results.empty or any(c not in results.columns for c in cols):
        return pd.DataFrame(columns=[*results.columns, "version", "abs_error", "covered"])
    frame = results[results["p_loss"].notna() & results["loss_rate"].notna()].copy()
    versions = (
        frame["model_version"] if "model_version" in frame.columns else pd.Series(None, index=frame.index)
    )
    frame["version"] = versions.where(
        versions.notna() & (versions.astype(str) != ""), UNKNOWN_VERSION
    ).astype(str)
    p, r = frame["p_loss"].astype(float), frame["loss_rate"].astype(float)
    frame["abs_error"] = (p - r).abs()
    nan = pd.Series(float("nan"), index=frame.index)
    lo = pd.to_numeric(frame["p_loss_lo"] if "p_loss_lo" in frame.columns else nan, errors="coerce")
    hi = pd.to_numeric(frame["p_loss_hi"] if "p_loss_hi" in frame.columns else nan, errors="coerce")
    inside = ((lo <= r) & (r <= hi)).astype(float)
    frame["covered"] = inside.where(lo.notna() & hi.notna())
    return frame.sort_values(["window_end_ms", "topic", "tier"]).reset_index(drop=True)


def version_summary(scored: pd.DataFrame) -> pd.DataFrame:
    """Return one row per model version, in the order the versions first served.

    Args:
        scored: :func:`predicted_windows`.

    Returns:
        Columns ``version``, ``windows``, ``first_ms``, ``last_ms`` (window start / end, ms),
        ``mae`` (mean |P_l - R_l|, fraction), ``coverage`` (share of windows with an interval whose R_l
        lay inside it; NaN without intervals), ``calibrated`` (share of windows judged with the model
        calibrated; NaN if no window says), ``topics``.
    """
    columns = ["version", "windows", "first_ms", "last_ms", "mae", "coverage", "calibrated", "topics"]
    if scored.empty:
        return pd.DataFrame(columns=columns)
    calibrated = (
        scored["model_calibrated"].map(lambda v: None if v is None or pd.isna(v) else float(bool(v)))
        if "model_calibrated" in scored.columns
        else pd.Series(float("nan"), index=scored.index)
    )
    frame = scored.assign(_calibrated=pd.to_numeric(calibrated, errors="coerce"))
    out = (
        frame.groupby("version", sort=False)
        .agg(
            windows=("abs_error", "size"),
            first_ms=("window_start_ms", "min"),
            last_ms=("window_end_ms", "max"),
            mae=("abs_error", "mean"),
            coverage=("covered", "mean"),
            calibrated=("_calibrated", "mean"),
            topics=("topic", "nunique"),
        )
        .reset_index()
    )
    return out.sort_values("first_ms", kind="stable").reset_index(drop=True)[columns]


def rolling_accuracy(scored: pd.DataFrame, windows: int = ROLLING_WINDOWS) -> pd.DataFrame:
    """Return the live MAE(P_l) and 90% coverage of each model version over time.

    Per version, over its last ``windows`` final windows (all topics, by window end), like the job's
    calibration monitor.

    Args:
        scored: :func:`predicted_windows`.
        windows: Rolling length, final windows.

    Returns:
        Columns ``version``, ``window_end_ms``, ``mae`` (fraction), ``coverage`` (fraction; NaN without
        intervals), one row per scored window.
    """
    if scored.empty:
        return pd.DataFrame(columns=["version", "window_end_ms", "mae", "coverage"])
    parts = []
    for version, rows in scored.groupby("version", sort=False):
        rows = rows.sort_values("window_end_ms")
        parts.append(
            pd.DataFrame(
                {
                    "version": version,
                    "window_end_ms": rows["window_end_ms"].to_numpy(),
                    "mae": rows["abs_error"].rolling(windows, min_periods=1).mean().to_numpy(),
                    "coverage": rows["covered"].rolling(windows, min_periods=1).mean().to_numpy(),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def topic_accuracy(scored: pd.DataFrame) -> pd.DataFrame:
    """Return, per (topic, tier), predicted against actual R_l over the scored windows.

    Returns:
        Columns ``topic``, ``tier``, ``windows``, ``r_l`` (mean measured R_l), ``p_l`` (mean predicted
        P_l), ``mae`` (mean |P_l - R_l|), ``coverage``, ``versions`` (model versions, in order served);
        fractions 0-1.
    """
    columns = ["topic", "tier", "windows", "r_l", "p_l", "mae", "coverage", "versions"]
    if scored.empty:
        return pd.DataFrame(columns=columns)
    out = (
        scored.groupby(["topic", "tier"])
        .agg(
            windows=("abs_error", "size"),
            r_l=("loss_rate", "mean"),
            p_l=("p_loss", "mean"),
            mae=("abs_error", "mean"),
            coverage=("covered", "mean"),
            versions=("version", lambda v: ", ".join(dict.fromkeys(v))),
        )
        .reset_index()
    )
    return out[columns]
