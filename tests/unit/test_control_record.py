"""The control record codec: round trip, malformed input, values out of librdkafka's range."""

from __future__ import annotations

import dataclasses

import pytest

from audit_record import AuditRecord, MalformedRecordError, encode
from audit_record.codec import encode_object
from audit_record.control_record import (
    DEFAULT_CONTROL_TOPIC,
    ControlRecord,
    decode_control,
    encode_control,
)


def record(**kw) -> ControlRecord:
    base = {
        "group": "checkout",
        "version": 3,
        "acks": "all",
        "batch_num_messages": 500,
        "linger_ms": 20.0,
        "message_timeout_ms": 30_000,
        "reason": "suggestion",
        "issued_at_ms": 1_700_000_000_000,
    }
    return ControlRecord(**{**base, **kw})


def test_default_topic_name() -> None:
    assert DEFAULT_CONTROL_TOPIC == "__kafka_audit_control"


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {
            "enable_idempotence": True,
            "poll_interval_ms": 2.5,
            "producers": 4,
            "predicted_gamma_before": 0.61,
            "predicted_gamma_after": 0.83,
            "measured_gamma_before": 0.58,
            "packet_loss_pct": 12.5,
            "delay_ms": 80.0,
            "expires_at_ms": 1_700_000_600_000,
        },
        {"acks": "0", "message_timeout_ms": 0, "linger_ms": 0.0, "batch_num_messages": 1},
    ],
)
def test_round_trip(extra: dict) -> None:
    r = record(**extra)
    assert decode_control(encode_control(r)) == r


def test_librdkafka_properties_are_canonical() -> None:
    assert record(acks="-1").librdkafka_config() == {
        "acks": "all",
        "enable.idempotence": False,
        "batch.num.messages": 500,
        "linger.ms": 20.0,
        "message.timeout.ms": 30_000,
    }


def test_key_is_the_group_and_expiry_is_inclusive() -> None:
    r = record(expires_at_ms=1_000)
    assert r.key() == b"checkout"
    assert not r.expired(999) and r.expired(1_000)
    assert not record().expired(1 << 62)  # None: never


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "empty"),
        (b"", "empty"),
        (b"not avro at all", "bad_magic"),
        (b"\xc3\x01" + b"\x00" * 8 + b"body", "wrong_schema"),
        (encode_control(record())[:-3], "undecodable"),
        (encode_control(record()) + b"\x00", "undecodable"),
    ],
)
def test_malformed_bytes_raise_with_a_reason(value: bytes | None, reason: str) -> None:
    with pytest.raises(MalformedRecordError) as info:
        decode_control(value)
    assert info.value.reason == reason


def test_an_audit_record_is_not_a_control_record() -> None:
    audit = AuditRecord(tier="producer", source="p", topic="t", window_start_ms=0, window_end_ms=10)
    with pytest.raises(MalformedRecordError) as info:
        decode_control(encode(audit))
    assert info.value.reason == "wrong_schema"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"group": ""}, "group"),
        ({"version": 0}, "version=0"),
        ({"acks": "2"}, "acks='2'"),
        ({"batch_num_messages": 0}, "batch_num_messages=0"),
        ({"batch_num_messages": 1_000_001}, "batch_num_messages=1000001"),
        ({"linger_ms": -1.0}, "linger_ms=-1.0"),
        ({"linger_ms": float("nan")}, "linger_ms=nan"),
        ({"message_timeout_ms": -5}, "message_timeout_ms=-5"),
        ({"poll_interval_ms": -0.5}, "poll_interval_ms=-0.5"),
        ({"producers": 0}, "producers=0"),
    ],
)
def test_bad_values_name_the_field(change: dict, field: str) -> None:
    bad = record(**change)
    with pytest.raises(MalformedRecordError) as info:
        bad.validate()
    assert info.value.reason == "bad_control"
    assert field in info.value.detail
    with pytest.raises(MalformedRecordError):
        encode_control(bad)  # nothing invalid is written
    # ... and one written by someone else (bypassing validation) is refused when read
    raw = encode_object("control_record", dataclasses.asdict(bad))
    with pytest.raises(MalformedRecordError) as info:
        decode_control(raw)
    assert info.value.reason == "bad_control" and field in info.value.detail


def test_all_problems_are_named_at_once() -> None:
    with pytest.raises(MalformedRecordError) as info:
        record(acks="x", batch_num_messages=0).validate()
    assert "acks" in info.value.detail and "batch_num_messages" in info.value.detail
