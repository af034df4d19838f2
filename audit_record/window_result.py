"""The window result, defined once: one (topic, window, cluster tier) reconciled, measured and predicted.

The fields, their order, types, units and meaning are those of ``window_result.avsc`` beside this
module; :data:`FIELDS` and :data:`SPARK_TYPES` are read from it, and every writer and reader (the Spark
state and output schema, the sinks, the alert rules, the live comparison, the predictor, the report,
the metrics) takes the names from here. The groups below name the parts of a result by role, so no
other module retypes a list of its fields.

A result row is a plain ``dict`` (field name -> value, None when unknown): Spark, pandas, fastavro and
JSON all carry it without conversion. Keyed by ``topic|window_start_ms|tier`` (:func:`key`); the newest
per key is the truth, and once ``state`` is ``final`` it never changes (``docs/DESIGN.md``, invariant 5).

The configuration suggestion travels as structure: ``suggested_<property>`` holds the new value of each
property the suggestion changes (null: unchanged) - librdkafka's ``acks``, ``batch.num.messages``,
``message.timeout.ms``, and two hints for the application, the polling interval and the producer count.
:func:`suggested_changes` reads them back as ``{property: value}``; ``suggestion`` is the same change
in words, for people, and nothing parses it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

SCHEMA = "window_result"
"""Name of the Avro schema (``window_result.avsc``) in :mod:`audit_record.codec`."""

PROVISIONAL = "provisional"
FINAL = "final"
"""Values of the ``state`` field: provisional until the watermark passes window end + grace, then final."""

_SPARK_TYPE = {"string": "string", "long": "long", "int": "int", "double": "double", "boolean": "boolean"}


@cache
def _schema_fields() -> tuple[dict[str, Any], ...]:
    text = resources.files("audit_record").joinpath(f"{SCHEMA}.avsc").read_text()
    return tuple(json.loads(text)["fields"])


def _non_null(avro_type: Any) -> Any:
    types = avro_type if isinstance(avro_type, list) else [avro_type]
    (one,) = [t for t in types if t != "null"]
    return one


@cache
def _avro_fields() -> tuple[tuple[str, str], ...]:
    """(name, type) of every field; ``structure`` for an array of records (see :data:`STRUCTURED_FIELDS`)."""
    out = []
    for f in _schema_fields():
        avro_type = _non_null(f["type"])
        out.append((f["name"], avro_type if isinstance(avro_type, str) else "structure"))
    return tuple(out)


FIELDS: tuple[str, ...] = tuple(name for name, _ in _avro_fields())
"""Every field of a window result, in schema order (``window_result.avsc``)."""

STRUCTURED_FIELDS: tuple[str, ...] = tuple(name for name, t in _avro_fields() if t == "structure")
"""Fields that hold structure (Avro arrays; in a row, a list): ``partitions`` (a list of dicts) and
``freshness_counts`` (a list of message counts, :mod:`audit_record.freshness`). Inside
the Spark query they travel as JSON text (their :data:`SPARK_TYPES` entry is ``string``): the
reconciler writes them with :func:`to_spark`, the driver reads them back with :func:`from_spark` before
any sink or listener sees the row, so every contract (Avro, Parquet, listeners) carries the structure."""

SPARK_TYPES: dict[str, str] = {
    name: "string" if t == "structure" else _SPARK_TYPE[t] for name, t in _avro_fields()
}
"""Field -> Spark SQL type name (``long``, ``int``, ``double``, ``string``, ``boolean``); every field is
nullable in Spark, the Avro schema says which may be null when written. :data:`STRUCTURED_FIELDS` are
``string`` (JSON text) inside Spark."""


@cache
def _partition_schema() -> dict[str, Any]:
    (f,) = [f for f in _schema_fields() if f["name"] == "partitions"]
    return dict(_non_null(f["type"])["items"])


PARTITION_FIELDS: tuple[str, ...] = tuple(f["name"] for f in _partition_schema()["fields"])
"""The fields of one ``partitions`` entry (``PartitionResult`` in ``window_result.avsc``): partition,
leader, leaders, sent, acknowledged, failed, failed_by_error, unique, duplicated, lost."""

KEY_FIELDS: tuple[str, ...] = ("topic", "window_start_ms", "tier")
"""The fields of the result key (:func:`key`)."""

CONFIG_FIELDS: tuple[str, ...] = (
    "acks",
    "enable_idempotence",
    "batch_num_messages",
    "linger_ms",
    "message_timeout_ms",
    "poll_interval_ms",
)
"""The producer configuration in effect (of the producer that sent the most in the window); each is the
:class:`~audit_record.ProducerConfig` attribute of the same name."""

NETWORK_FIELDS: tuple[str, ...] = ("rtt_avg_ms", "tx_retries", "request_timeouts")
"""librdkafka's network statistics, summed or averaged over the producers (see the schema)."""

ESTIMATE_FIELDS: tuple[str, ...] = (
    "message_size_bytes",
    "packet_loss_pct_est",
    "delay_ms_est",
    "tcp_timeout_pct_est",
)
"""The predictor's inputs estimated from the producers: M (bytes), L (percent), D (ms) (paper Eq. 1) and
the retransmission-timeout rate (percent)."""

PREDICTION_FIELDS: tuple[str, ...] = ("p_loss", "p_loss_lo", "p_loss_hi", "p_dup", "p_dup_lo", "p_dup_hi")
"""Predicted P_l and P_d with their 90% intervals (5th / 95th percentile), fractions 0-1 (paper Eq. 1)."""

GAMMA_FIELDS: tuple[str, ...] = ("gamma_actual", "gamma_predicted", "gamma_target")
"""KPI gamma (paper Eq. 2) with the measured R_l, R_d, with the predicted P_l, P_d, and the target, 0-1."""

SUGGESTED_PROPERTIES: dict[str, str] = {
    "acks": "suggested_acks",
    "batch.num.messages": "suggested_batch_num_messages",
    "message.timeout.ms": "suggested_message_timeout_ms",
    "poll_interval_ms": "suggested_poll_interval_ms",
    "producers": "suggested_producers",
}
"""Property a suggestion may change (librdkafka names; ``poll_interval_ms`` and ``producers`` are hints
for the application) -> the field holding its suggested value."""

CURRENT_PROPERTIES: dict[str, str] = {
    "acks": "acks",
    "batch.num.messages": "batch_num_messages",
    "message.timeout.ms": "message_timeout_ms",
    "poll_interval_ms": "poll_interval_ms",
    "producers": "producers",
}
"""The same properties -> the field holding the value in effect during the window."""

SUGGESTION_FIELDS: tuple[str, ...] = (
    "suggestion",
    *SUGGESTED_PROPERTIES.values(),
    "suggested_p_loss",
    "suggested_gamma",
    "suggestion_meets_target",
    "suggestion_loco_mae_p_loss",
    "suggestion_calibrated",
)
"""The configuration suggestion: in words, the new value per property, what the model predicts, and how
sure it is (its counterfactual score; calibrated or not for such a change, issue 39)."""

TIER_FIELDS: tuple[str, ...] = (
    "tier_rank",
    "previous_tier",
    "previous_unique",
    "completeness_vs_previous",
    "duplicates_added",
    "duplicate_rate_vs_previous",
    "tier_lag_ms",
)
"""The tier view (``docs/DESIGN.md``, "Tiers"): the tier's place in the order, its completeness and the
duplicates it adds relative to the tier before it, and its lag after the window's end (ms)."""

MODEL_FIELDS: tuple[str, ...] = ("model_version", "model_calibrated")
"""Which predictor model made the prediction, and whether it was calibrated for this deployment then."""

LIVE_COMPARISON_FIELDS: tuple[str, ...] = (
    *MODEL_FIELDS,
    *PREDICTION_FIELDS,
    *GAMMA_FIELDS,
    *SUGGESTION_FIELDS,
)
"""What the live comparison (``spark_streaming.predict``) fills for final windows; null before, for
provisional windows, and in results written before the fields existed."""

SUMMARY_NUMBERS: tuple[str, ...] = (
    "sent",
    "unique",
    "completeness",
    "loss_rate",
    "duplicate_rate",
    "unaudited_producers",
    "unaccounted",
    "packet_loss_pct_est",
    "delay_ms_est",
    "tcp_timeout_pct_est",
    *PREDICTION_FIELDS,
    *GAMMA_FIELDS,
    "completeness_vs_previous",
    "duplicate_rate_vs_previous",
    "tier_lag_ms",
)
"""The numbers an alert quotes about its window (measured, estimated, predicted, relative to the tier
before)."""

BRIEF_FIELDS: tuple[str, ...] = (
    "window_start_ms",
    "window_end_ms",
    "tier",
    "sent",
    "received",
    "unaudited",
    "loss_rate",
    "duplicate_rate",
)
"""A window in brief: when, which tier, how many messages, the measured rates (``kafka-audit status``'s
last final window of a topic)."""


def _check_groups() -> None:
    """Fail at import if a group names a field the schema lacks (a renamed or removed field)."""
    known = set(FIELDS)
    groups = (
        KEY_FIELDS,
        CONFIG_FIELDS,
        NETWORK_FIELDS,
        ESTIMATE_FIELDS,
        LIVE_COMPARISON_FIELDS,
        TIER_FIELDS,
        BRIEF_FIELDS,
        ("producer_configs",),
    )
    unknown = sorted({f for g in (*groups, SUMMARY_NUMBERS, CURRENT_PROPERTIES.values()) for f in g} - known)
    if unknown:
        raise RuntimeError(f"window_result groups name fields missing from {SCHEMA}.avsc: {unknown}")


_check_groups()


def partition_entry(partition: int, **values: Any) -> dict[str, Any]:
    """Return one ``partitions`` entry: ``values`` over the schema's defaults (counts 0, unknowns None).

    Raises:
        KeyError: if ``values`` names a field ``PartitionResult`` lacks.
    """
    unknown = set(values) - set(PARTITION_FIELDS)
    if unknown:
        raise KeyError(f"not partition-result fields: {sorted(unknown)}")
    out: dict[str, Any] = {}
    for f in _partition_schema()["fields"]:
        default = f.get("default")
        out[f["name"]] = values.get(
            f["name"], type(default)() if isinstance(default, list | dict) else default
        )
    out["partition"] = int(partition)
    return out


def to_spark(row: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``row`` with every :data:`STRUCTURED_FIELDS` value as JSON text (how Spark carries it)."""
    out = dict(row)
    for name in STRUCTURED_FIELDS:
        value = out.get(name)
        out[name] = json.dumps(value if value is not None else [], separators=(",", ":"))
    return out


def from_spark(row: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``row`` with every :data:`STRUCTURED_FIELDS` value as structure (inverse of :func:`to_spark`).

    A missing or null value becomes ``[]`` (the schema's default); structure passes unchanged. Also
    reads a row of the Parquet results back (pyarrow reads a map, ``failed_by_error``, as a list of
    (key, value) pairs): every map becomes a dict again.
    """
    out = dict(row)
    for name in STRUCTURED_FIELDS:
        value = out.get(name)
        if isinstance(value, str | bytes):
            value = json.loads(value)
        out[name] = [_maps_as_dicts(p) for p in value] if value is not None else []
    return out


def _maps_as_dicts(entry: Any) -> Any:
    if not isinstance(entry, Mapping):
        return entry  # a count of freshness_counts
    out = dict(entry)
    pairs = out.get("failed_by_error")
    out["failed_by_error"] = dict(pairs) if pairs else {}
    return out


def partition_losses(row: Mapping[str, Any], top: int | None = None) -> list[dict[str, Any]]:
    """Return the partitions of a result that lost messages, most first.

    Each: ``partition``, ``leader`` (broker node id or None), ``lost``, ``failed`` (messages).

    ``lost`` is the entry's ``lost`` (sent - unique, messages), or its failed delivery reports when its
    sent count is unknown (a producer reporting failures only). Ties go to the lower partition.

    Args:
        row: A window result (``partitions`` as structure or JSON text).
        top: Keep this many (None: all).
    """
    out = []
    for p in from_spark({"partitions": row.get("partitions")})["partitions"]:
        failed = int(p.get("failed") or 0)
        lost = p.get("lost")
        lost = failed if lost is None else int(lost)
        if lost > 0:
            out.append(
                {"partition": int(p["partition"]), "leader": p.get("leader"), "lost": lost, "failed": failed}
            )
    out.sort(key=lambda p: (-p["lost"], p["partition"]))
    return out if top is None else out[:top]


def lost_by_leader(row: Mapping[str, Any]) -> dict[int | None, int]:
    """Return messages lost per leader broker (node id; None: unknown); see :func:`partition_losses`."""
    out: dict[int | None, int] = {}
    for p in partition_losses(row):
        out[p["leader"]] = out.get(p["leader"], 0) + p["lost"]
    return out


def key(row: Mapping[str, Any]) -> str:
    """Kafka key of a window result: ``topic|window_start_ms|tier`` (a compacted topic keeps the newest)."""
    return f"{row['topic']}|{row['window_start_ms']}|{row['tier']}"


def blank(**values: Any) -> dict[str, Any]:
    """Return a result row with every field None except ``values``.

    Raises:
        KeyError: if ``values`` names a field the schema lacks.
    """
    unknown = set(values) - set(SPARK_TYPES)
    if unknown:
        raise KeyError(f"not window-result fields: {sorted(unknown)}")
    out = {name: values.get(name) for name in FIELDS}
    for name in STRUCTURED_FIELDS:
        if out[name] is None:
            out[name] = []
    return out


def only_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """Return the window-result fields of ``row`` (missing ones None, structure ``[]``), in schema order."""
    return blank(**{name: row.get(name) for name in FIELDS})


def suggestion_fields(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Return the ``suggested_*`` field values of a change ``{property: new value}``.

    Args:
        changes: e.g. ``{"batch.num.messages": 8, "producers": 2}`` (keys of
            :data:`SUGGESTED_PROPERTIES`; ``acks`` as 0/1 or librdkafka's text).

    Returns:
        Every ``suggested_<property>`` field: the new value (acks as text ``"0"``/``"1"``, counts and
        ms as int, the polling interval as float) or None where the property is unchanged.

    Raises:
        KeyError: for a property outside :data:`SUGGESTED_PROPERTIES`.
    """
    unknown = set(changes) - set(SUGGESTED_PROPERTIES)
    if unknown:
        raise KeyError(
            f"not a suggested property: {sorted(unknown)} (allowed: {sorted(SUGGESTED_PROPERTIES)})"
        )
    out: dict[str, Any] = dict.fromkeys(SUGGESTED_PROPERTIES.values())
    for prop, value in changes.items():
        if prop == "acks":
            out[SUGGESTED_PROPERTIES[prop]] = (
                str(int(value)) if isinstance(value, int | float) else str(value)
            )
        elif prop == "poll_interval_ms":
            out[SUGGESTED_PROPERTIES[prop]] = float(value)
        else:
            out[SUGGESTED_PROPERTIES[prop]] = int(value)
    return out


def suggested_changes(row: Mapping[str, Any]) -> dict[str, Any]:
    """Return the suggestion of a result row as ``{property: new value}`` (``{}`` when there is none).

    The inverse of :func:`suggestion_fields`: librdkafka property names (``acks``,
    ``batch.num.messages``, ``message.timeout.ms``) and the hints ``poll_interval_ms`` (ms) and
    ``producers`` (count), ready to configure a producer with.
    """
    out: dict[str, Any] = {}
    for prop, name in SUGGESTED_PROPERTIES.items():
        value = row.get(name)
        if value is not None and value == value:  # NaN (pandas' missing float) is no suggestion
            out[prop] = value
    return out


def current_properties(row: Mapping[str, Any]) -> dict[str, Any]:
    """Return the value in effect during the window of every property a suggestion may change."""
    return {prop: row.get(name) for prop, name in CURRENT_PROPERTIES.items()}
