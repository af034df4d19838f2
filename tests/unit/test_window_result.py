"""The window result is defined once: audit_record/window_result.py beside window_result.avsc."""

import json
import re
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from audit_record import window_result
from audit_record.codec import decode_object, encode_object
from spark_streaming.sinks import PARQUET_SCHEMA
from spark_streaming.window_state import OUTPUT_SCHEMA, RESULT_COLUMNS

REPO = Path(__file__).resolve().parents[2]


def test_fields_and_types_come_from_the_avro_schema():
    avsc = json.loads(resources.files("audit_record").joinpath("window_result.avsc").read_text())
    assert tuple(f["name"] for f in avsc["fields"]) == window_result.FIELDS
    assert [n for n, _ in RESULT_COLUMNS] == list(window_result.FIELDS)
    assert PARQUET_SCHEMA.names == list(window_result.FIELDS)
    assert OUTPUT_SCHEMA.startswith(", ".join(f"{n} {t}" for n, t in RESULT_COLUMNS))
    assert window_result.SPARK_TYPES["suggested_batch_num_messages"] == "int"
    assert window_result.SPARK_TYPES["suggestion_meets_target"] == "boolean"


def test_a_suggestion_round_trips_as_structure_through_avro():
    changes = {"batch.num.messages": 8, "acks": 0, "producers": 2}
    fields = window_result.suggestion_fields(changes)
    assert fields["suggested_acks"] == "0" and fields["suggested_message_timeout_ms"] is None
    row = window_result.blank(
        topic="t",
        window_start_ms=0,
        window_end_ms=10,
        tier="cluster:a",
        state="final",
        sent=1,
        acknowledged=1,
        failed=0,
        received=1,
        unique=1,
        duplicated=0,
        late=0,
        stale=0,
        unaudited=0,
        producers=1,
        unaudited_producers=0,
        tx_retries=0,
        request_timeouts=0,
        result_at_ms=10,
        **fields,
    )
    decoded = decode_object("window_result", encode_object("window_result", row))
    assert window_result.suggested_changes(decoded) == {"acks": "0", "batch.num.messages": 8, "producers": 2}
    assert window_result.key(decoded) == "t|0|cluster:a"


def test_bad_names_are_refused():
    with pytest.raises(KeyError, match=r"linger\.ms"):
        window_result.suggestion_fields({"linger.ms": 5})
    with pytest.raises(KeyError, match="p_lost"):
        window_result.blank(p_lost=0.1)


# Literals that share six or more names with the window result but are lists of something else.
OTHER_SCHEMAS = {
    "audit_record/record.py": "COUNT_FIELDS: the audit record's counters (audit_record.avsc)",
    "kafka_audit/cli.py": "`kafka-audit verify --json`: the verifier's report row",
    "predictor/suggest.py": "_CONFIG_KEYS: the configuration keys suggest() accepts, and their aliases",
    "rdkafka_plugin/gen_audit_record.py": "FILLED: the audit record fields the C plugin fills, checked "
    "against audit_record.avsc when the plugin is built (every other field: its schema default)",
    "testbed/grid.py": "the testbed grid's CSV columns (predictor features and measured labels)",
}


def test_no_field_list_of_the_window_result_outside_its_module():
    # A run of six or more window-result names in one literal tuple/list/dict is a retyped field list.
    names = set(window_result.FIELDS)
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    offenders = []
    for rel in files.stdout.split():
        if rel.startswith("tests/") or rel == "audit_record/window_result.py" or rel in OTHER_SCHEMAS:
            continue
        text = (REPO / rel).read_text()
        for literal in re.findall(r"[\(\[\{]([^()\[\]{}]*)[\)\]\}]", text):
            quoted = set(re.findall(r"\"([a-z_0-9]+)\"", literal))
            if len(quoted & names) >= 6:
                offenders.append((rel, sorted(quoted & names)))
    assert offenders == []
