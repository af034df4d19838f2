"""The predictor's input features (paper Eq. 1: M, D, L and the producer configuration), units and checks.

The feature names are the columns of ``experiments.csv`` (Wu, Shang, Wolter 2020 measurements, see
``/work/shared/data/wu2020/README.md``) and the fixed names of the cross-team contract.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from kafka_audit.errors import ConfigError

FEATURES: tuple[str, ...] = (
    "acks",
    "packet_loss_pct",
    "delay_ms",
    "message_size_bytes",
    "batch_size",
    "message_timeout_ms",
    "poll_interval_ms",
)
"""Input columns, in model order (one row per case)."""

UNITS: dict[str, str] = {
    "acks": "librdkafka acks: 0 = at-most-once, 1 = at-least-once (leader ack; 'all' counts as 1)",
    "packet_loss_pct": "network packet loss L, percent 0-100",
    "delay_ms": "one-way network delay D (NetEm delay), ms",
    "message_size_bytes": "message size M (key + value), bytes",
    "batch_size": "librdkafka batch.num.messages B, messages",
    "message_timeout_ms": "librdkafka message.timeout.ms T_o, ms (0 = infinite)",
    "poll_interval_ms": "application polling interval delta between source reads, ms (0 = full load)",
}

ALLOWED: dict[str, tuple[float, float]] = {
    "acks": (0, 1),
    "packet_loss_pct": (0.0, 100.0),
    "delay_ms": (0.0, 60_000.0),
    "message_size_bytes": (1.0, 1_000_000_000.0),
    "batch_size": (1.0, 1_000_000.0),
    "message_timeout_ms": (0.0, 2_147_483_647.0),
    "poll_interval_ms": (0.0, 3_600_000.0),
}
"""Accepted value ranges (inclusive); batch.num.messages and message.timeout.ms are librdkafka's ranges."""

FLAGS: dict[str, str] = {name: "--" + name.replace("_", "-") for name in FEATURES}
"""Feature -> its ``kafka-audit predictor predict`` / ``suggest`` flag."""

LIBRDKAFKA_NAMES: dict[str, str] = {
    "acks": "acks",
    "batch_size": "batch.num.messages",
    "message_timeout_ms": "message.timeout.ms",
    "poll_interval_ms": "poll_interval_ms",
}
"""Feature -> the configuration key a user changes (librdkafka property names where one exists)."""

INFINITE_TIMEOUT_MS = 2_147_483_647.0


def check_value(name: str, value: Any, flag: str | None = None) -> float:
    """Return ``value`` as a float after checking it against :data:`ALLOWED`.

    Args:
        name: A feature name from :data:`FEATURES`.
        value: The value to check.
        flag: How to name the value in the error (a CLI flag or column); default the feature name.

    Raises:
        ConfigError: if the value is not a finite number in the allowed range (acks must be 0 or 1).
    """
    label = flag or name
    lo, hi = ALLOWED[name]
    try:
        x = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{label}={value!r}: expected a number in [{lo:g}, {hi:g}]") from exc
    if name == "acks":
        if x not in (0.0, 1.0):
            raise ConfigError(f"{label}={value!r}: allowed values are 0 (at-most-once) and 1 (at-least-once)")
        return x
    if not math.isfinite(x) or not lo <= x <= hi:
        raise ConfigError(f"{label}={value!r}: allowed range is [{lo:g}, {hi:g}] ({UNITS[name]})")
    return x


def acks_number(acks: Any) -> int:
    """Map a librdkafka ``acks`` value (0, 1, "all", -1) to the model's 0/1 delivery semantics.

    Raises:
        ConfigError: if the value is not one of 0, 1, -1, "all".
    """
    text = str(acks).strip().lower()
    if text in ("0",):
        return 0
    if text in ("1", "all", "-1"):
        return 1
    raise ConfigError(f"acks={acks!r}: allowed values are 0, 1, all, -1")


def validate_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Check that ``frame`` has every feature column with values in range; return the (n, 7) float copy.

    Raises:
        ConfigError: naming the first missing column, or the column and first row index out of range.
    """
    missing = [c for c in FEATURES if c not in frame.columns]
    if missing:
        raise ConfigError(f"input is missing feature column(s) {missing}; required: {list(FEATURES)}")
    out = pd.DataFrame(index=frame.index)
    for name in FEATURES:
        col = pd.to_numeric(frame[name], errors="coerce").astype("float64")
        lo, hi = ALLOWED[name]
        bad = ~np.isfinite(col) | (col < lo) | (col > hi)
        if name == "acks":
            bad |= ~col.isin((0.0, 1.0))
        if bad.any():
            idx = bad.idxmax()
            check_value(name, frame.at[idx, name], f"{name} (row {idx!r})")
        out[name] = col
    return out


def transform(frame: pd.DataFrame) -> np.ndarray:
    """Scale validated features for the improved model (before standardisation).

    Log transforms follow the measured curves (P_l falls roughly with log M, log B, log T_o; Fig. 4-7):
    acks as 0/1, L as a fraction, log1p(D), log(M), log(B), log(T_o) (0 = infinite -> 2^31-1 ms),
    log1p(delta).

    Returns:
        float32 array of shape (n, 7), columns in :data:`FEATURES` order.
    """
    f = frame
    timeout = f["message_timeout_ms"].where(f["message_timeout_ms"] > 0, INFINITE_TIMEOUT_MS)
    cols = [
        f["acks"].to_numpy(),
        f["packet_loss_pct"].to_numpy() / 100.0,
        np.log1p(f["delay_ms"].to_numpy()),
        np.log(f["message_size_bytes"].to_numpy()),
        np.log(f["batch_size"].to_numpy()),
        np.log(timeout.to_numpy()),
        np.log1p(f["poll_interval_ms"].to_numpy()),
    ]
    return np.stack(cols, axis=1).astype(np.float32)


def raw(frame: pd.DataFrame) -> np.ndarray:
    """Return the unscaled features (the paper baseline min-max scales these), shape (n, 7), float32."""
    return frame.loc[:, list(FEATURES)].to_numpy(dtype=np.float32)


def settings_frame(settings: Mapping[str, Any]) -> pd.DataFrame:
    """One-row feature frame from a mapping of feature name -> value (checked with :func:`check_value`).

    Raises:
        ConfigError: if a feature is missing or out of range.
    """
    row = {}
    for name in FEATURES:
        if name not in settings:
            raise ConfigError(f"missing {name} ({UNITS[name]})")
        row[name] = check_value(name, settings[name])
    return pd.DataFrame([row])
