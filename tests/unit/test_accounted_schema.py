"""Audit record v8 (issue 37): ``accounted``, ``PartitionDelivery.last_offset`` and ``read_offsets``."""

import io

import fastavro
import pytest

from audit_record import (
    AuditRecord,
    MalformedRecordError,
    PartitionDelivery,
    ReadOffset,
    codec,
    decode,
    encode,
)


def _record(**kw) -> AuditRecord:
    base = dict(
        tier="producer",
        source="app",
        producer_id="ab",
        topic="orders",
        window_start_ms=60_000,
        window_end_ms=120_000,
        sent=3,
        acknowledged=3,
    )
    base.update(kw)
    return AuditRecord(**base)


def test_the_new_fields_round_trip():
    rec = _record(accounted=True, partitions=[PartitionDelivery(partition=0, acknowledged=3, last_offset=41)])
    back = decode(encode(rec))
    assert back.accounted is True and back.partitions[0].last_offset == 41
    cluster = _record(
        tier="cluster:a",
        sent=0,
        acknowledged=0,
        received=3,
        unique=3,
        read_offsets=[ReadOffset(partition=0, offset=42), ReadOffset(partition=1, offset=0)],
    )
    assert decode(encode(cluster)).read_offsets == cluster.read_offsets


def test_records_written_with_v7_decode_as_not_accounted_without_offsets():
    old = _record(partitions=[PartitionDelivery(partition=0, acknowledged=3)]).to_avro()
    del old["accounted"], old["read_offsets"], old["partitions"][0]["last_offset"]
    buf = io.BytesIO()
    buf.write(codec.SINGLE_OBJECT_MAGIC + codec.fingerprint("audit_record.v7"))
    fastavro.schemaless_writer(buf, codec.schema("audit_record.v7"), old)
    rec = decode(buf.getvalue())
    assert rec.accounted is False and rec.read_offsets == [] and rec.partitions[0].last_offset is None


@pytest.mark.parametrize(
    "bad",
    [
        {"partitions": [PartitionDelivery(partition=0, acknowledged=3, last_offset=-1)]},
        {"read_offsets": [ReadOffset(partition=0, offset=-5)]},
        {"read_offsets": [ReadOffset(partition=-1, offset=5)]},
    ],
)
def test_negative_offsets_are_malformed(bad):
    with pytest.raises(MalformedRecordError) as err:
        _record(**bad).validate()
    assert err.value.reason == "negative_count"
