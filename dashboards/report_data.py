"""Read what ``kafka-audit report`` shows: final window results from Parquet, alert events from a file.

Results are the reconciliation job's Parquet files (``ParquetResultSink``:
``<root>/date=YYYY-MM-DD/batch-<id>.parquet``, one row per window result). Files written before the
live-comparison fields existed lack ``p_loss``, ``gamma_actual`` and the rest: they are read all the
same and those columns come out null.
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
