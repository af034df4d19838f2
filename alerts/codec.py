"""Avro encoding of alert events (fastavro), as Avro single-object encoding.

Same framing as ``audit_record/codec.py``: ``C3 01`` + the CRC-64-AVRO fingerprint of ``alert.avsc``
(8 bytes, little endian) + the schemaless Avro body (Avro 1.11 specification, "Single-object
encoding"), so readers reject bytes of another schema before decoding them. Events written with an
earlier version (``alert.v<N>.avsc`` beside it, :data:`WRITER_VERSIONS`) are resolved to the current
schema: fields added since take their defaults.
"""

from __future__ import annotations

import io
import json
from functools import cache
from importlib import resources
from typing import Any

import fastavro
import fastavro.schema

from alerts.event import AlertEvent
from audit_record.codec import SINGLE_OBJECT_MAGIC, crc64_fingerprint, legacy_fingerprint
from audit_record.record import MalformedRecordError

_HEADER_LEN = 10
WRITER_VERSIONS: tuple[str, ...] = ("alert.v1",)
"""Earlier versions of ``alert.avsc`` readers still accept (v1: before ``attribution``)."""


@cache
def schema_json(name: str = "alert") -> str:
    """Return ``alert.avsc`` (or an earlier version, ``alert.v1``) as JSON text."""
    return resources.files("alerts").joinpath(f"{name}.avsc").read_text()


@cache
def schema(name: str = "alert") -> dict[str, Any]:
    """Return the parsed AlertEvent schema (or an earlier version)."""
    return fastavro.parse_schema(json.loads(schema_json(name)))


@cache
def schema_fingerprint(name: str = "alert") -> bytes:
    """Return the schema's CRC-64-AVRO fingerprint, 8 bytes little endian (``codec.crc64_fingerprint``)."""
    return crc64_fingerprint(schema(name))


@cache
def _writers() -> dict[bytes, dict[str, Any]]:
    """Fingerprint (either byte order, ``codec.legacy_fingerprint``) -> writer schema of each version."""
    out: dict[bytes, dict[str, Any]] = {}
    for n in ("alert", *WRITER_VERSIONS):
        out[schema_fingerprint(n)] = out[legacy_fingerprint(schema_fingerprint(n))] = schema(n)
    return out


def encode_alert(event: AlertEvent) -> bytes:
    """Encode one event as an Avro single object (``alert.avsc``)."""
    buf = io.BytesIO()
    buf.write(SINGLE_OBJECT_MAGIC)
    buf.write(schema_fingerprint())
    fastavro.schemaless_writer(buf, schema(), event.to_dict())
    return buf.getvalue()


def decode_alert(value: bytes | None) -> AlertEvent:
    """Decode one Avro single object written by :func:`encode_alert`.

    Raises:
        MalformedRecordError: ``empty``, ``bad_magic``, ``wrong_schema`` or ``undecodable``.
    """
    if not value:
        raise MalformedRecordError("empty", "no value")
    if len(value) < _HEADER_LEN or value[:2] != SINGLE_OBJECT_MAGIC:
        raise MalformedRecordError("bad_magic", f"not an Avro single object (first bytes {value[:4].hex()})")
    writer = _writers().get(value[2:_HEADER_LEN])
    if writer is None:
        raise MalformedRecordError(
            "wrong_schema", f"schema fingerprint {value[2:_HEADER_LEN].hex()} is not AlertEvent"
        )
    buf = io.BytesIO(value)
    buf.seek(_HEADER_LEN)
    try:
        data: Any = fastavro.schemaless_reader(buf, writer, schema())
        if buf.tell() != len(value):
            raise ValueError(f"{len(value) - buf.tell()} trailing bytes")
        return AlertEvent.from_dict(dict(data))
    except Exception as exc:  # fastavro raises many types on garbage; all mean the same to us
        raise MalformedRecordError("undecodable", f"{type(exc).__name__}: {exc}") from exc
