"""Avro encoding of alert events (fastavro), as Avro single-object encoding.

Same framing as ``audit_record/codec.py``: ``C3 01`` + the CRC-64-AVRO fingerprint of ``alert.avsc``
(8 bytes, little endian) + the schemaless Avro body (Avro 1.11 specification, "Single-object
encoding"), so readers reject bytes of another schema before decoding them.
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
from audit_record.codec import SINGLE_OBJECT_MAGIC
from audit_record.record import MalformedRecordError

_HEADER_LEN = 10


@cache
def schema_json() -> str:
    """Return ``alert.avsc`` as JSON text."""
    return resources.files("alerts").joinpath("alert.avsc").read_text()


@cache
def schema() -> dict[str, Any]:
    """Return the parsed AlertEvent schema."""
    return fastavro.parse_schema(json.loads(schema_json()))


@cache
def schema_fingerprint() -> bytes:
    """Return the schema's CRC-64-AVRO fingerprint, 8 bytes little endian."""
    canonical = fastavro.schema.to_parsing_canonical_form(schema())
    return bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))[::-1]


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
    if value[2:_HEADER_LEN] != schema_fingerprint():
        raise MalformedRecordError(
            "wrong_schema", f"schema fingerprint {value[2:_HEADER_LEN].hex()} is not AlertEvent"
        )
    buf = io.BytesIO(value)
    buf.seek(_HEADER_LEN)
    try:
        data: Any = fastavro.schemaless_reader(buf, schema(), None)
        if buf.tell() != len(value):
            raise ValueError(f"{len(value) - buf.tell()} trailing bytes")
        return AlertEvent.from_dict(dict(data))
    except Exception as exc:  # fastavro raises many types on garbage; all mean the same to us
        raise MalformedRecordError("undecodable", f"{type(exc).__name__}: {exc}") from exc
