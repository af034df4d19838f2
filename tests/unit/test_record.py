import contextlib
import io
import os

import fastavro
import pytest

from audit_record import (
    AuditRecord,
    MalformedRecordError,
    NetworkStats,
    ProducerConfig,
    codec,
    decode,
    encode,
    stamp,
)
from audit_record.windows import window_bounds, window_start


def _record(**kw):
    base = dict(
        tier="producer",
        source="app",
        producer_id="app@h.1.ab",
        topic="orders",
        window_start_ms=60_000,
        window_end_ms=120_000,
        sent=10,
        acknowledged=8,
        failed=1,
        first_sequence=1,
        last_sequence=10,
        producer_config=ProducerConfig(
            acks="1",
            enable_idempotence=False,
            batch_num_messages=4,
            linger_ms=5.0,
            message_timeout_ms=300,
            message_send_max_retries=2,
            retry_backoff_ms=100,
            poll_interval_ms=1.0,
        ),
        network=NetworkStats(rtt_avg_ms=1.5, tx_retries=3),
    )
    base.update(kw)
    return AuditRecord(**base)


def test_roundtrip_keeps_every_field_including_timestamps_as_ms():
    r = _record()
    assert decode(encode(r)) == r


def test_key_identifies_tier_source_producer_topic_partition_window():
    assert _record().key() == "producer|app|app@h.1.ab|orders|-1|60000"
    assert (
        _record(tier="cluster:east", producer_id=None, partition=2).key()
        == "cluster:east|app||orders|2|60000"
    )


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"", "empty"),
        (b"hello world", "bad_magic"),
        (codec.SINGLE_OBJECT_MAGIC + b"\x00" * 8 + b"x", "wrong_schema"),
    ],
)
def test_garbage_is_rejected_with_a_reason(value, reason):
    with pytest.raises(MalformedRecordError) as exc:
        decode(value)
    assert exc.value.reason == reason


def test_truncated_and_trailing_bytes_are_undecodable():
    good = encode(_record())
    for bad in (good[:15], good + b"\x00\x01"):
        with pytest.raises(MalformedRecordError) as exc:
            decode(bad)
        assert exc.value.reason == "undecodable"


def test_negative_counts_written_by_someone_else_are_rejected():
    buf = io.BytesIO()
    buf.write(codec.SINGLE_OBJECT_MAGIC + codec.fingerprint())
    fastavro.schemaless_writer(buf, codec.schema(), {**_record().to_avro(), "failed": -1, "acknowledged": 0})
    with pytest.raises(MalformedRecordError) as exc:
        decode(buf.getvalue())
    assert exc.value.reason == "negative_count"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"tier": "consumer"}, "bad_tier"),
        ({"tier": "cluster:"}, "bad_tier"),
        ({"window_end_ms": 60_000}, "bad_window"),
        ({"acknowledged": 10}, "inconsistent_counts"),
        ({"received": 1, "unique": 2}, "inconsistent_counts"),
    ],
)
def test_encode_refuses_inconsistent_records(changes, reason):
    with pytest.raises(MalformedRecordError) as exc:
        encode(_record(**changes))
    assert exc.value.reason == reason


def test_random_bytes_never_raise_anything_but_malformed():
    for _ in range(500):
        value = codec.SINGLE_OBJECT_MAGIC + codec.fingerprint() + os.urandom(40)
        with contextlib.suppress(MalformedRecordError):
            decode(value)


def test_windows_are_aligned_to_the_epoch():
    assert window_start(125_999, 60_000) == 120_000
    assert window_bounds(120_000, 60_000) == (120_000, 180_000)
    with pytest.raises(ValueError):
        window_start(1, 0)


def test_stamp_roundtrip_and_malformed():
    for version in (1, 2):
        pid = stamp.new_producer_id("my app/1", version)
        key, value = stamp.header(pid, 42)
        assert key == (stamp.STAMP_HEADER if version == 2 else stamp.STAMP_HEADER_V1)
        assert stamp.decode(key, value) == (pid.encode(), 42)
    for bad in (None, b"", b"12345678", b"bad id!" + (1).to_bytes(8, "big"), b"\xff\xfe" + bytes(8)):
        with pytest.raises(stamp.MalformedStampError):
            stamp.decode(stamp.STAMP_HEADER_V1, bad)
    for bad in (None, b"", b"12345678", bytes(8) + b"\x80", bytes(8) + b"\x80\x00", bytes(8) + b"\xff" * 10):
        with pytest.raises(stamp.MalformedStampError):
            stamp.decode(stamp.STAMP_HEADER, bad)
