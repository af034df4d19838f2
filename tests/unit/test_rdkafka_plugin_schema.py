"""The librdkafka plugin's build-time Avro field program (rdkafka_plugin/gen_audit_record.py).

Every default the generator encodes equals fastavro's encoding of that default; a schema version that adds
a defaulted field builds; one that changes the type of a field the plugin fills, or adds a field without a
default, fails the build naming the field.
"""

from __future__ import annotations

import copy
import importlib.util
import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest

from audit_record import codec

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "gen_audit_record", ROOT / "rdkafka_plugin" / "gen_audit_record.py"
)
assert _spec is not None and _spec.loader is not None
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


def _schema() -> dict[str, Any]:
    return json.loads(codec.schema_json("audit_record"))


def test_every_default_is_encoded_as_fastavro_encodes_it() -> None:
    names: dict[str, Any] = {}
    gen.collect(_schema(), names)
    checked = 0
    for record in names.values():
        for f in record.get("fields", ()):
            if "default" not in f:
                continue
            wrapper = {"type": "record", "name": f"W{checked}", "fields": [f]}
            named = fastavro.parse_schema(wrapper, named_schemas=_named())
            out = io.BytesIO()
            fastavro.schemaless_writer(out, named, {f["name"]: f["default"]})
            assert gen.encode_default(f["type"], f["default"], names) == out.getvalue(), f["name"]
            checked += 1
    assert checked > 20


def _named() -> dict[str, Any]:
    named: dict[str, Any] = {}
    fastavro.parse_schema(_schema(), named_schemas=named)
    return named


def _generate(schema: dict[str, Any], tmp_path: Path) -> str:
    path = tmp_path / "audit_record.avsc"
    path.write_text(json.dumps(schema))
    return gen.generate(path)


def test_a_new_defaulted_field_needs_no_code_change(tmp_path: Path) -> None:
    schema = _schema()
    schema["fields"].append({"name": "shiny", "type": "long", "default": -2})
    header = _generate(schema, tmp_path)
    assert '{F_DEFAULT, -1, "\\x03", 1}, /* shiny (default) */' in header
    fp = codec.crc64_fingerprint(fastavro.parse_schema(copy.deepcopy(schema)))
    assert ", ".join(f"0x{b:02x}" for b in fp) in header


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s["fields"].append({"name": "mandatory", "type": "long"}), "mandatory has no default"),
        (
            lambda s: next(f for f in s["fields"] if f["name"] == "sent").update(type="int"),
            "sent has type int",
        ),
    ],
)
def test_a_schema_the_plugin_cannot_follow_fails_the_build(tmp_path: Path, change: Any, message: str) -> None:
    schema = _schema()
    change(schema)
    with pytest.raises(gen.SchemaMismatch, match=message):
        _generate(schema, tmp_path)
