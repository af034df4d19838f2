"""Avro encoding of audit records (fastavro), as Avro single-object encoding.

Each Kafka message value is ``C3 01`` + the schema's 8-byte CRC-64-AVRO fingerprint (little endian) +
the schemaless Avro body (Avro 1.11 specification, "Single-object encoding"). The fingerprint lets a
reader reject bytes written with another schema before decoding them.
"""

from __future__ import annotations

import io
import json
from functools import cache
from importlib import resources
from typing import Any

import fastavro
import fastavro.schema

from audit_record.record import AuditRecord, MalformedRecordError

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
_HEADER_LEN = 10


@cache
def schema() -> dict[str, Any]:
    """Return the parsed audit record schema (``audit_record.avsc``)."""
    text = resources.files("audit_record").joinpath("audit_record.avsc").read_text()
    return fastavro.parse_schema(json.loads(text))


@cache
def schema_json() -> str:
    """Return the schema as JSON text (for Spark's ``from_avro`` or a schema registry)."""
    return resources.files("audit_record").joinpath("audit_record.avsc").read_text()


@cache
def fingerprint() -> bytes:
    """Return the schema's CRC-64-AVRO fingerprint, 8 bytes little endian."""
    hexdigest = fastavro.schema.fingerprint(
        fastavro.schema.to_parsing_canonical_form(schema()), "CRC-64-AVRO"
    )
    return bytes.fromhex(hexdigest)[::-1]


def encode(record: AuditRecord) -> bytes:
    """Encode one record as an Avro single object.

    Raises:
        MalformedRecordError: if the record fails :meth:`AuditRecord.validate` (nothing invalid is written).
    """
    record.validate()
    buf = io.BytesIO()
    buf.write(SINGLE_OBJECT_MAGIC)
    buf.write(fingerprint())
    fastavro.schemaless_writer(buf, schema(), record.to_avro())
    return buf.getvalue()


def decode(value: bytes | None) -> AuditRecord:
    """Decode and validate one Avro single object.

    Raises:
        MalformedRecordError: ``reason`` is ``empty``, ``bad_magic``, ``wrong_schema``, ``undecodable``, or
            one of :meth:`AuditRecord.validate`'s reasons.
    """
    if not value:
        raise MalformedRecordError("empty", "no value")
    if len(value) < _HEADER_LEN or value[:2] != SINGLE_OBJECT_MAGIC:
        raise MalformedRecordError("bad_magic", f"not an Avro single object (first bytes {value[:4].hex()})")
    if value[2:_HEADER_LEN] != fingerprint():
        raise MalformedRecordError(
            "wrong_schema", f"schema fingerprint {value[2:_HEADER_LEN].hex()} is not ours"
        )
    buf = io.BytesIO(value)
    buf.seek(_HEADER_LEN)
    try:
        data = fastavro.schemaless_reader(buf, schema(), None)
        if buf.tell() != len(value):
            raise ValueError(f"{len(value) - buf.tell()} trailing bytes")
        record = AuditRecord.from_avro(data)  # type: ignore[arg-type]
    except MalformedRecordError:
        raise
    except Exception as exc:  # fastavro raises many types on garbage; all mean the same to us
        raise MalformedRecordError("undecodable", f"{type(exc).__name__}: {exc}") from exc
    return record.validate()
