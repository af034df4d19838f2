"""The predictor's input features (paper Eq. 1: M, D, L and the producer configuration), units and checks.

The feature names are the columns of ``experiments.csv`` (Wu, Shang, Wolter 2020 measurements, see
``predictor/base_data/wu2020/README.md``) and the fixed names of the predictor contract
(``docs/DESIGN.md``, "Contracts"), plus one network measurement the paper's data does not have, the
TCP retransmission-timeout rate
(:data:`OPTIONAL`): L cannot tell a loss burst from random loss, and bursts are what lose messages
(issue 13). A model's card names the features it reads (:class:`predictor.nets.ModelSpec`
``features``); models from before the rate read :data:`BASE_FEATURES`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from audit_record import canonical_acks
from kafka_plumbing.errors import ConfigError

FEATURES: tuple[str, ...] = (
    "acks",
    "packet_loss_pct",
    "delay_ms",
    "message_size_bytes",
    "batch_num_messages",
    "message_timeout_ms",
    "poll_interval_ms",
    "tcp_timeout_pct",
)
"""Input columns, in model order (one row per case)."""

BASE_FEATURES: tuple[str, ...] = FEATURES[:7]
"""Paper Eq. 1's inputs: what the paper's measurements and testbed grids set per experiment (they also
identify an experiment's settings: :func:`predictor.data.settings_key`), and all that models from before
the retransmission-timeout rate read."""

OPTIONAL: dict[str, float] = {"tcp_timeout_pct": 0.0}
"""Features a data source may lack (a column missing or a value unknown) -> the value they take then.
The paper's measurements and testbed grid CSVs have no retransmission-timeout rate: 0. A model trained
where a feature only ever took its default ignores it (inputs are clamped to the training range)."""

RENAMED: dict[str, str] = {"batch_size": "batch_num_messages"}
"""Former feature / CSV column name -> current name. ``batch_size`` (0.1.0) counted messages
(librdkafka ``batch.num.messages``), not the bytes of librdkafka's ``batch.size``; files and model
cards written with it still read (:func:`current_name`, :func:`current_columns`, :func:`current_card`)."""

UNITS: dict[str, str] = {
    "acks": "librdkafka acks: 0 = at-most-once, 1 = at-least-once (leader ack; 'all' counts as 1)",
    "packet_loss_pct": "network packet loss L, percent 0-100",
    "delay_ms": "one-way network delay D (NetEm delay), ms",
    "message_size_bytes": "message size M (key + value), bytes",
    "batch_num_messages": "librdkafka batch.num.messages B, messages",
    "message_timeout_ms": "librdkafka message.timeout.ms T_o, ms (0 = infinite)",
    "poll_interval_ms": "application polling interval delta between source reads, ms (0 = full load)",
    "tcp_timeout_pct": (
        "TCP retransmission timeouts per 100 segments the producers sent, percent 0-100 (TCPTimeouts / "
        "OutSegs; 0 = none or unknown): loss bursts read high, random loss of the same L low"
    ),
}

ALLOWED: dict[str, tuple[float, float]] = {
    "acks": (0, 1),
    "packet_loss_pct": (0.0, 100.0),
    "delay_ms": (0.0, 60_000.0),
    "message_size_bytes": (1.0, 1_000_000_000.0),
    "batch_num_messages": (1.0, 1_000_000.0),
    "message_timeout_ms": (0.0, 2_147_483_647.0),
    "poll_interval_ms": (0.0, 3_600_000.0),
    "tcp_timeout_pct": (0.0, 100.0),
}
"""Accepted value ranges (inclusive); batch.num.messages and message.timeout.ms are librdkafka's ranges."""

FLAGS: dict[str, str] = {name: "--" + name.replace("_", "-") for name in FEATURES}
"""Feature -> its ``kafka-audit predictor predict`` / ``suggest`` flag."""

INFINITE_TIMEOUT_MS = 2_147_483_647.0


def current_name(column: str) -> str:
    """Return the current name of a feature or CSV column (:data:`RENAMED`); other names unchanged.

    For ``pandas.DataFrame.rename(columns=current_name)`` and for the keys of a ``csv.DictReader`` row.
    """
    return RENAMED.get(column, column)


def current_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Return ``frame`` with former column names (:data:`RENAMED`) renamed, unless the current one exists."""
    return frame.rename(columns={old: new for old, new in RENAMED.items() if new not in frame.columns})


def current_card(card: dict[str, Any]) -> dict[str, Any]:
    """Return a model card with former feature names (:data:`RENAMED`) replaced by the current ones.

    Touches the card's ``features`` list and the feature-keyed ``trained_ranges`` and ``units``; the
    weights do not depend on names (features enter in :data:`FEATURES` order), so an older model
    predicts exactly as before. ``spec.batch_size`` (the training minibatch) is no feature and stays.
    """
    out = dict(card)
    if "features" in out:
        out["features"] = [current_name(f) for f in out["features"]]
    for section in ("trained_ranges", "units"):
        if isinstance(out.get(section), dict):
            out[section] = {current_name(k): v for k, v in out[section].items()}
    return out


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

    0 = at-most-once (``acks=0``), 1 = at-least-once (``1``, ``all``, ``-1``), from
    :func:`audit_record.canonical_acks`.

    Raises:
        ConfigError: if the value is not one of 0, 1, -1, "all" (naming ``acks`` and those values).
    """
    return 0 if canonical_acks(acks) == "0" else 1


_LO = np.array([ALLOWED[f][0] for f in FEATURES])
_HI = np.array([ALLOWED[f][1] for f in FEATURES])


def with_defaults(frame: pd.DataFrame) -> pd.DataFrame:
    """Return ``frame`` with every :data:`OPTIONAL` feature: a missing column or value takes its default."""
    out = frame
    for name, default in OPTIONAL.items():
        if name not in out.columns or out[name].isna().any():
            out = out.copy() if out is frame else out
            col = pd.to_numeric(out[name], errors="coerce") if name in out.columns else np.nan
            out[name] = pd.Series(col, index=out.index, dtype="float64").fillna(default)
    return out


def feature_matrix(frame: pd.DataFrame) -> np.ndarray:
    """Return the feature columns of ``frame`` as a float64 array (n, 8); non-numbers become NaN.

    :data:`OPTIONAL` features that are missing or unknown take their default (:func:`with_defaults`).

    Raises:
        ConfigError: if a required feature column (:data:`BASE_FEATURES`) is missing.
    """
    missing = [c for c in BASE_FEATURES if c not in frame.columns]
    if missing:
        raise ConfigError(f"input is missing feature column(s) {missing}; required: {list(BASE_FEATURES)}")
    frame = with_defaults(frame)
    try:
        return frame.loc[:, list(FEATURES)].to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        return np.stack(
            [pd.to_numeric(frame[c], errors="coerce").to_numpy(dtype=np.float64) for c in FEATURES], 1
        )


def valid_rows(x: np.ndarray) -> np.ndarray:
    """Return a bool array (n,): True for feature-matrix (n, 8) rows with every value in :data:`ALLOWED`."""
    with np.errstate(invalid="ignore"):
        ok = np.all((x >= _LO) & (x <= _HI), axis=1)
    return ok & ((x[:, 0] == 0.0) | (x[:, 0] == 1.0))


def validate_frame(frame: pd.DataFrame) -> np.ndarray:
    """Check that ``frame`` has every feature column with values in range; return the (n, 8) float64 matrix.

    :data:`OPTIONAL` features that are missing or unknown take their default.

    Raises:
        ConfigError: naming the first missing column, or the first out-of-range column, row and range.
    """
    x = feature_matrix(frame)
    ok = valid_rows(x)
    if not ok.all():
        pos = int(np.flatnonzero(~ok)[0])
        where = f"row {frame.index[pos]!r}"
        frame = with_defaults(frame)
        for name in FEATURES:
            check_value(name, frame[name].iloc[pos], f"{name} ({where})")
        raise ConfigError(f"{where}: a feature is not a number: {dict(zip(FEATURES, x[pos], strict=True))}")
    return x


def transform(x: np.ndarray) -> np.ndarray:
    """Scale a validated feature matrix (n, 8) for the improved model (before standardisation).

    Log transforms follow the measured curves (P_l falls roughly with log M, log B, log T_o; Fig. 4-7):
    acks as 0/1, L as a fraction, log1p(D), log(M), log(B), log(T_o) (0 = infinite -> 2^31-1 ms),
    log1p(delta), the retransmission-timeout rate as a fraction.

    Returns:
        float32 array of shape (n, 8), columns in :data:`FEATURES` order.
    """
    timeout = np.where(x[:, 5] > 0, x[:, 5], INFINITE_TIMEOUT_MS)
    cols = [
        x[:, 0],
        x[:, 1] / 100.0,
        np.log1p(x[:, 2]),
        np.log(x[:, 3]),
        np.log(x[:, 4]),
        np.log(timeout),
        np.log1p(x[:, 6]),
        x[:, 7] / 100.0,
    ]
    return np.stack(cols, axis=1).astype(np.float32)


def raw(x: np.ndarray) -> np.ndarray:
    """Return the unscaled feature matrix (the paper baseline min-max scales it), shape (n, 8), float32."""
    return np.asarray(x, dtype=np.float32)


def columns_of(features: tuple[str, ...]) -> list[int]:
    """Return the positions in :data:`FEATURES` of a model's ``features`` (its card's list, in its order).

    Raises:
        ConfigError: naming a feature this version of kafka-audit does not know.
    """
    unknown = [f for f in features if f not in FEATURES]
    if unknown:
        raise ConfigError(f"model reads unknown feature(s) {unknown}; known: {list(FEATURES)}")
    return [FEATURES.index(f) for f in features]
