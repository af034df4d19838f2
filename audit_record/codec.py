"""Avro encoding of audit records (fastavro), as Avro single-object encoding.

Each Kafka message value is ``C3 01`` + the schema's 8-byte CRC-64-AVRO fingerprint (little endian) +
the schemaless Avro body (Avro 1.11 specification, "Single-object encoding"). The fingerprint lets a
reader reject bytes written with another schema before decoding them.

Schema evolution: a schema's earlier versions stay beside it as ``<name>.v<N>.avsc`` (listed in
:data:`WRITER_VERSIONS`). A reader looks the writer schema up by fingerprint and resolves it to the
current schema (Avro "Schema Resolution": fields added since default to their ``default``), so
records written before a field was added still decode.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

import fastavro
import fastavro.schema

from audit_record.record import AuditRecord, MalformedRecordError

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
_HEADER_LEN = 10
WRITER_VERSIONS: dict[str, tuple[str, ...]] = {
    # v1: before NetworkStats.tcp_retransmit_pct; v2: before the per-partition delivery reports;
    # v3: before NetworkStats.rtt_min_ms; v4: before in_flight_bytes; v5: before NetworkStats.tcp_timeout_pct;
    # v6: before producer_identity (who a v2 stamp's random producer id is, issue 36);
    # v7: before accounted, PartitionDelivery.last_offset and read_offsets (finality by proof, issue 37);
    # v8: before ProducerConfig.batch_size_bytes (JVM producers); v9: before freshness_counts (issue 40)
    "audit_record": (
        "audit_record.v9",
        "audit_record.v8",
        "audit_record.v7",
        "audit_record.v6",
        "audit_record.v5",
        "audit_record.v4",
        "audit_record.v3",
        "audit_record.v2",
        "audit_record.v1",
    ),
    # v1: before the live-comparison fields (P_l, P_d, gamma); v2: before the structured suggestion;
    # v3: before final_wait_ms (adaptive finality) and the tier fields (tier_rank ... tier_lag_ms);
    # v4: before the per-partition breakdown (partitions: attribution); v5: before tcp_timeout_pct_est;
    # v6: before unaccounted and unaccounted_unique (stamps naming no reporting producer, issue 36);
    # v7: before final_rule and waiting_for (finality by proof, issue 37); v8: before producers_accounted,
    # suggestion_loco_mae_p_loss and suggestion_calibrated (issue 39); v9: before freshness_counts (the
    # tiers' freshness histograms, issue 40)
    "window_result": (
        "window_result.v9",
        "window_result.v8",
        "window_result.v7",
        "window_result.v6",
        "window_result.v5",
        "window_result.v4",
        "window_result.v3",
        "window_result.v2",
        "window_result.v1",
    ),
}
"""Earlier versions of each schema (``<version>.avsc`` files of this package) that readers still accept."""


@cache
def schema(name: str = "audit_record") -> dict[str, Any]:
    """Return a parsed schema of this package: ``audit_record`` (default), ``window_result`` or a version."""
    return fastavro.parse_schema(json.loads(schema_json(name)))


@cache
def schema_json(name: str = "audit_record") -> str:
    """Return a schema as JSON text (``<name>.avsc``)."""
    return resources.files("audit_record").joinpath(f"{name}.avsc").read_text()


def crc64_fingerprint(parsed: Any) -> bytes:
    """Return a parsed schema's CRC-64-AVRO fingerprint as single objects carry it (8 bytes, little endian).

    Avro specification, "Schema Fingerprints" and "Single-object encoding" (the 64-bit Rabin fingerprint
    of the parsing canonical form, written little endian); the same bytes as Java's
    ``SchemaNormalization.parsingFingerprint64`` written little endian, so Avro's ``BinaryMessageDecoder``
    reads what this package writes. fastavro's hex digest already lists the bytes in that order.
    """
    return bytes.fromhex(
        fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(parsed), "CRC-64-AVRO")
    )


def legacy_fingerprint(spec: bytes) -> bytes:
    """Return the byte-reversed fingerprint that kafka-audit wrote before it followed the specification.

    Readers still accept it for every schema version, so audit, results and alert topics written
    before (within their retention) decode; writers use :func:`crc64_fingerprint` only.
    """
    return spec[::-1]


@cache
def fingerprint(name: str = "audit_record") -> bytes:
    """Return a schema's CRC-64-AVRO fingerprint, 8 bytes little endian (:func:`crc64_fingerprint`)."""
    return crc64_fingerprint(schema(name))


def _without_logical_types(t: Any) -> Any:
    if isinstance(t, list):
        return [_without_logical_types(x) for x in t]
    if not isinstance(t, dict):
        return t
    out = {k: _without_logical_types(v) for k, v in t.items() if k != "logicalType"}
    if "fields" in t:
        out["fields"] = [{**f, "type": _without_logical_types(f["type"])} for f in t["fields"]]
    return out


@cache
def reading_schema(name: str = "audit_record") -> dict[str, Any]:
    """Return schema ``name`` parsed for reading: logical types dropped, so ``timestamp-millis`` is a long.

    fastavro turns a ``timestamp-millis`` into a ``datetime``, which holds only the years 1-9999: a
    record with any other (valid ``long``) timestamp was written but could not be read back. The
    canonical form, so the fingerprint, is that of :func:`schema`.
    """
    return fastavro.parse_schema(_without_logical_types(json.loads(schema_json(name))))


@cache
def writer_schemas(name: str) -> dict[bytes, dict[str, Any]]:
    """Return fingerprint -> writer schema (parsed for reading) of ``name`` and :data:`WRITER_VERSIONS`.

    Each version is found by its fingerprint in either byte order (:func:`legacy_fingerprint`).
    """
    out: dict[bytes, dict[str, Any]] = {}
    for v in (name, *WRITER_VERSIONS.get(name, ())):
        out[fingerprint(v)] = out[legacy_fingerprint(fingerprint(v))] = reading_schema(v)
    return out


INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
"""Range of an Avro ``int`` (32-bit signed). fastavro's reader takes any varint up to 64 bits for an
``int``: a value outside this range would decode, then fail wherever it is written again (Avro, Spark's
``int`` columns)."""

_Check = Callable[[Any], str | None]


def _int_check(t: Any, names: dict[str, Any]) -> _Check | None:
    """Return a function finding an out-of-range ``int`` in a value of parsed type ``t`` (None: no ints)."""
    if isinstance(t, str):
        if t in names:
            return _int_check(names[t], names)
        if t != "int":
            return None

        def check_int(v: Any) -> str | None:
            return None if not isinstance(v, int) or INT_MIN <= v <= INT_MAX else f"int {v} out of range"

        return check_int
    if isinstance(t, list):
        checks = [c for c in (_int_check(b, names) for b in t) if c is not None]
        if not checks:
            return None

        def check_union(v: Any) -> str | None:
            return next((e for e in (c(v) for c in checks) if e), None) if v is not None else None

        return check_union
    kind = t["type"]
    if kind == "record":
        names[t["name"]] = t
        fields = [(f["name"], c) for f in t["fields"] if (c := _int_check(f["type"], names)) is not None]
        if not fields:
            return None

        def check_record(v: Any) -> str | None:
            if not isinstance(v, dict):
                return None
            for name, check in fields:
                if (err := check(v.get(name))) is not None:
                    return f"{name}: {err}"
            return None

        return check_record
    if kind in ("array", "map"):
        inner = _int_check(t["items"] if kind == "array" else t["values"], names)
        if inner is None:
            return None

        def check_items(v: Any) -> str | None:
            items = v.values() if isinstance(v, dict) else v or ()
            return next((e for e in map(inner, items) if e), None)

        return check_items
    return _int_check(kind, names) if isinstance(kind, str | list) else None


@cache
def _range_check(name: str) -> _Check | None:
    return _int_check(reading_schema(name), {})


def encode_object(name: str, data: dict[str, Any]) -> bytes:
    """Encode a dict with schema ``name`` as an Avro single object (no validation beyond Avro's)."""
    buf = io.BytesIO()
    buf.write(SINGLE_OBJECT_MAGIC)
    buf.write(fingerprint(name))
    fastavro.schemaless_writer(buf, schema(name), data)
    return buf.getvalue()


def decode_object(name: str, value: bytes) -> dict[str, Any]:
    """Decode an Avro single object written with schema ``name`` or one of its earlier versions.

    A record written with an earlier version (:data:`WRITER_VERSIONS`) is resolved to the current
    schema: fields it lacks get their defaults.

    Raises:
        MalformedRecordError: ``bad_magic``, ``wrong_schema`` or ``undecodable`` (also for an ``int``
            outside 32 bits, which fastavro's reader lets through).
    """
    if len(value) < _HEADER_LEN or value[:2] != SINGLE_OBJECT_MAGIC:
        raise MalformedRecordError("bad_magic", f"not an Avro single object (first bytes {value[:4].hex()})")
    writer = writer_schemas(name).get(bytes(value[2:_HEADER_LEN]))
    if writer is None:
        raise MalformedRecordError(
            "wrong_schema", f"schema fingerprint {value[2:_HEADER_LEN].hex()} is not {name}"
        )
    reader = reading_schema(name)
    buf = io.BytesIO(value)
    buf.seek(_HEADER_LEN)
    try:
        data: Any = fastavro.schemaless_reader(buf, writer, None if writer is reader else reader)
    except Exception as exc:  # fastavro raises many types on garbage; all mean the same to us
        raise MalformedRecordError("undecodable", f"{type(exc).__name__}: {exc}") from exc
    if buf.tell() != len(value):
        raise MalformedRecordError("undecodable", f"{len(value) - buf.tell()} trailing bytes")
    check = _range_check(name)
    if check is not None and (problem := check(data)) is not None:
        raise MalformedRecordError("undecodable", problem)
    return dict(data)


def encode(record: AuditRecord) -> bytes:
    """Encode one record as an Avro single object.

    Raises:
        MalformedRecordError: if the record fails :meth:`AuditRecord.validate` (nothing invalid is written).
    """
    return encode_object("audit_record", record.validate().to_avro())


def decode(value: bytes | None) -> AuditRecord:
    """Decode and validate one Avro single object.

    Raises:
        MalformedRecordError: ``reason`` is ``empty``, ``bad_magic``, ``wrong_schema``, ``undecodable``, or
            one of :meth:`AuditRecord.validate`'s reasons.
    """
    if not value:
        raise MalformedRecordError("empty", "no value")
    data = decode_object("audit_record", value)
    try:
        record = AuditRecord.from_avro(data)
    except (TypeError, ValueError) as exc:
        raise MalformedRecordError("undecodable", f"{type(exc).__name__}: {exc}") from exc
    return record.validate()
