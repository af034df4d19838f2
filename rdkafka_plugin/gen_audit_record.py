"""Generate the plugin's Avro field program from the audit record schema (run at build time).

The librdkafka plugin encodes its snapshots by hand (Avro 1.11 specification, "Binary Encoding"), so
this script turns the *current* ``audit_record/audit_record.avsc`` into a C header,
``audit_record_ops.h``: for each record type the plugin writes (``AuditRecord``, ``ProducerConfig``,
``PartitionDelivery``, ``ProducerIdentity``), the schema's fields in order, each either a field the
plugin fills (an id, and for ``["null", T]`` unions the branch indexes) or the Avro bytes of the field's
default, computed here. A schema version that adds fields (with defaults, as every evolution of this
schema must) therefore needs no C change; a field the plugin fills whose type changed, or a new field
without a default, fails the build naming the field. The header also carries the schema's CRC-64-AVRO
fingerprint (Avro "Single-object encoding"), computed by ``audit_record.codec`` (the one definition).

Usage: ``python rdkafka_plugin/gen_audit_record.py audit_record/audit_record.avsc OUT.h`` (repository
root on ``sys.path``, fastavro installed: the project's venv).
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

FILLED: dict[str, dict[str, str]] = {
    "AuditRecord": {
        "record_id": "string",
        "tier": "string",
        "source": "string",
        "host": "string",
        "producer_id": "null|string",
        "topic": "string",
        "partition": "int",
        "window_start_ms": "long",
        "window_end_ms": "long",
        "emitted_at_ms": "long",
        "final": "boolean",
        "sent": "long",
        "acknowledged": "long",
        "failed": "long",
        "first_sequence": "null|long",
        "last_sequence": "null|long",
        "bytes": "long",
        "latency_p50_ms": "null|double",
        "latency_p99_ms": "null|double",
        "latency_max_ms": "null|double",
        "producer_config": "null|ProducerConfig",
        "partitions": "array<PartitionDelivery>",
        "producer_identity": "null|ProducerIdentity",
        "accounted": "boolean",
    },
    "ProducerConfig": {
        "acks": "string",
        "enable_idempotence": "boolean",
        "batch_num_messages": "null|int",
        "linger_ms": "double",
        "message_timeout_ms": "int",
        "message_send_max_retries": "int",
        "retry_backoff_ms": "int",
    },
    "PartitionDelivery": {
        "partition": "int",
        "acknowledged": "long",
        "failed": "long",
        "failed_by_error": "map<long>",
        "last_offset": "null|long",
    },
    "ProducerIdentity": {
        "client_id": "string",
        "host": "string",
        "process_id": "long",
        "started_at_ms": "long",
        "library": "string",
        "library_version": "string",
        "stamp_version": "int",
    },
}
"""Per record type, the fields the plugin fills and the type each must have (a short type notation)."""


class SchemaMismatch(Exception):
    """The schema changed in a way the plugin's encoder cannot follow (names the field)."""


def zigzag(n: int) -> bytes:
    """Return ``n`` as an Avro ``int``/``long``: zigzag, then a base-128 varint, low group first."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def notation(t: Any) -> str:
    """Return a type's short notation: ``long``, ``null|string``, ``array<X>``, ``map<long>``, a name."""
    if isinstance(t, list):
        return "|".join(notation(b) for b in t)
    if isinstance(t, dict):
        kind = t["type"]
        if kind == "array":
            return f"array<{notation(t['items'])}>"
        if kind == "map":
            return f"map<{notation(t['values'])}>"
        if kind in ("record", "enum", "fixed"):
            return str(t["name"])
        return notation(kind)
    return str(t)


def encode_default(t: Any, value: Any, names: dict[str, Any]) -> bytes:
    """Return the Avro binary encoding of a field default ``value`` of type ``t`` (Avro 1.11 spec)."""
    if isinstance(t, list):  # a union's default is of its first branch
        return zigzag(0) + encode_default(t[0], value, names)
    if isinstance(t, str) and t in names:
        t = names[t]
    kind = t["type"] if isinstance(t, dict) else t
    if isinstance(kind, dict | list):
        return encode_default(kind, value, names)
    if kind == "null":
        return b""
    if kind == "boolean":
        return b"\x01" if value else b"\x00"
    if kind in ("int", "long"):
        return zigzag(int(value))
    if kind == "float":
        return struct.pack("<f", float(value))
    if kind == "double":
        return struct.pack("<d", float(value))
    if kind == "string":
        raw = str(value).encode()
        return zigzag(len(raw)) + raw
    if kind == "bytes":
        raw = str(value).encode("latin-1")
        return zigzag(len(raw)) + raw
    if kind == "array":
        if not value:
            return b"\x00"
        body = b"".join(encode_default(t["items"], v, names) for v in value)
        return zigzag(len(value)) + body + b"\x00"
    if kind == "map":
        if not value:
            return b"\x00"
        values = t["values"]
        body = b"".join(
            encode_default("string", k, names) + encode_default(values, v, names) for k, v in value.items()
        )
        return zigzag(len(value)) + body + b"\x00"
    if kind == "enum":
        return zigzag(t["symbols"].index(value))
    if kind == "fixed":
        return str(value).encode("latin-1")
    if kind == "record":
        out = b""
        for f in t["fields"]:
            v = value.get(f["name"], f.get("default"))
            out += encode_default(f["type"], v, names)
        return out
    raise SchemaMismatch(f"cannot encode a default of type {kind!r}")


def collect(t: Any, names: dict[str, Any]) -> None:
    """Register every named type (record, enum, fixed) inside ``t`` by its name."""
    if isinstance(t, list):
        for b in t:
            collect(b, names)
    elif isinstance(t, dict):
        if t.get("type") in ("record", "enum", "fixed"):
            names[t["name"]] = t
        for f in t.get("fields", ()):
            collect(f["type"], names)
        for k in ("items", "values"):
            if k in t:
                collect(t[k], names)
        if isinstance(t.get("type"), dict | list):
            collect(t["type"], names)


def c_bytes(raw: bytes) -> str:
    """Return bytes as a C string literal."""
    return '"' + "".join(f"\\x{b:02x}" for b in raw) + '"'


def field_ops(record: str, names: dict[str, Any]) -> list[str]:
    """Return the C initializers of one record type's field program.

    Raises:
        SchemaMismatch: a filled field is missing or has another type; a field has no default.
    """
    t = names.get(record)
    if t is None:
        raise SchemaMismatch(f"record {record} is not in the schema")
    present = {f["name"]: f for f in t["fields"]}
    for name in FILLED[record]:
        if name not in present:
            raise SchemaMismatch(f"{record}.{name} is no longer in the schema")
    ops = []
    for f in t["fields"]:
        name = f["name"]
        want = FILLED[record].get(name)
        if want is not None:
            got = notation(f["type"])
            if got != want:
                raise SchemaMismatch(f"{record}.{name} has type {got}, the plugin writes {want}")
            branch = 1 if got.startswith("null|") else -1
            ops.append(f"    {{F_{record.upper()}_{name.upper()}, {branch}, NULL, 0}}, /* {name} */")
        else:
            if "default" not in f:
                raise SchemaMismatch(f"{record}.{name} has no default: the plugin cannot write it")
            raw = encode_default(f["type"], f["default"], names)
            ops.append(f"    {{F_DEFAULT, -1, {c_bytes(raw)}, {len(raw)}}}, /* {name} (default) */")
    return ops


def generate(avsc: Path) -> str:
    """Return the header's text for the schema in ``avsc``."""
    sys.path.insert(0, str(ROOT))
    import fastavro

    from audit_record.codec import crc64_fingerprint

    text = avsc.read_text()
    parsed = json.loads(text)
    names: dict[str, Any] = {}
    collect(parsed, names)
    fp = crc64_fingerprint(fastavro.parse_schema(json.loads(text)))
    enum = ["F_DEFAULT = 0"]
    for record, fields in FILLED.items():
        enum += [f"F_{record.upper()}_{f.upper()}" for f in fields]
    out = [
        f"/* Generated by rdkafka_plugin/gen_audit_record.py from {avsc.name}: do not edit. */",
        "#ifndef KAFKA_AUDIT_AUDIT_RECORD_OPS_H",
        "#define KAFKA_AUDIT_AUDIT_RECORD_OPS_H",
        "#include <stddef.h>",
        "enum field_id {\n    " + ",\n    ".join(enum) + "\n};",
        "struct field_op {\n    int id;\n    int branch; /* [null, T]: the branch of T, else -1 */"
        "\n    const char *dflt; /* F_DEFAULT: the default's Avro bytes */\n    size_t dflt_len;\n};",
        "static const unsigned char AUDIT_RECORD_FINGERPRINT[8] = {"
        + ", ".join(f"0x{b:02x}" for b in fp)
        + "};",
    ]
    for record in FILLED:
        ops = field_ops(record, names)
        out.append(f"static const struct field_op {record.upper()}_OPS[] = {{\n" + "\n".join(ops) + "\n};")
        out.append(f"#define {record.upper()}_N_OPS {len(ops)}")
    out.append("#endif")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    """Write the header; exit status 1 with the reason if the schema cannot be followed."""
    if len(argv) != 3:
        print("usage: gen_audit_record.py AVSC OUT.h", file=sys.stderr)
        return 2
    try:
        text = generate(Path(argv[1]))
    except SchemaMismatch as e:
        print(f"gen_audit_record: {argv[1]}: {e}", file=sys.stderr)
        return 1
    Path(argv[2]).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
