"""The freshness histogram from the tiers' counts to the job's exporter: exact, additive, versioned.

One latency sample (consume time - CreateTime) feeds both the log-linear latency histogram and the
freshness histogram; snapshots carry it (audit record v10), old records and old consumer state decode
as "not measured"; the job adds the tiers' histograms and exports them cumulative per ``le``.
"""

from __future__ import annotations

import io

import fastavro
import numpy as np
import pytest

from audit_consumer import counts, state_codec
from audit_consumer.counts import PartitionCounts, count_batch
from audit_consumer.snapshots import dirty_buckets, snapshot_record
from audit_record import AuditRecord, codec, decode, encode, freshness, window_result
from audit_record.record import MalformedRecordError
from audit_record.window_result import FINAL
from spark_streaming.metrics import ResultMetrics
from spark_streaming.reconcile import compact, reconcile


def test_bucket_bounds_are_inclusive_upper_bounds_and_counts_add_up():
    assert [freshness.bucket_of(x) for x in (-5, 0, 100, 101, 30_000, 30_001, 3_600_000, 3_600_001)] == [
        0, 0, 0, 1, 8, 9, 14, 15,
    ]  # fmt: skip
    a, b = freshness.empty(), freshness.empty()
    freshness.add_all(a, np.array([50, 100, 29_999, 30_000, 30_001, 10**9], dtype=np.int64))
    freshness.add_all(b, np.array([31_000], dtype=np.int64))
    total = freshness.add_counts([a, [], None, b])
    assert sum(total) == 7 and total[-1] == 1
    assert freshness.fresh_and_total(total, 30_000) == (4, 7)
    assert freshness.cumulative(total)[-1] == 7
    with pytest.raises(ValueError, match="allowed 100, 250"):
        freshness.fresh_and_total(total, 20_000)
    with pytest.raises(ValueError, match="16 entries"):
        freshness.add_counts([[1, 2]])


class _Msg:
    def __init__(self, ts: int, ts_type: int = 1, offset: int = 0) -> None:
        self._ts, self._type, self._offset = ts, ts_type, offset

    def error(self):
        return None

    def topic(self):
        return "t"

    def partition(self):
        return 0

    def offset(self):
        return self._offset

    def timestamp(self):
        return self._type, self._ts

    def headers(self):
        return None

    def value(self):
        return b"x"


def _count(msgs, now_ms: int) -> PartitionCounts:
    st = PartitionCounts("t", 0, window_ms=60_000, grace_ms=1_000)
    count_batch(msgs, {("t", 0): st}, now_ms, {}, lambda k: None, lambda m: None, lambda *a: None)
    return st


def test_the_consumer_measures_consume_time_minus_create_time_and_snapshots_carry_it():
    now = 10 * 60_000 + 59_000
    created = [now - 50, now - 400, now - 31_000, now - 31_000]  # all in window [600000, 660000)
    st = _count([_Msg(ts, offset=i) for i, ts in enumerate(created)], now)
    [(start, pid, bucket, final)] = list(dirty_buckets(st, set(), None))
    record = snapshot_record("cluster:a", "g", "t", 0, 60_000, start, pid, bucket, final)
    assert freshness.fresh_and_total(record.freshness_counts, 30_000) == (2, 4)
    assert record.freshness_counts[freshness.BOUNDS_MS.index(60_000)] == 2
    assert record.latency_max_ms == 31_000  # the same samples as the latency percentiles
    assert decode(encode(record)).freshness_counts == record.freshness_counts


def test_log_append_time_partitions_report_freshness_as_not_measured():
    now = 10 * 60_000 + 59_000
    st = _count([_Msg(now - 10, ts_type=2)], now)
    [(start, pid, bucket, final)] = list(dirty_buckets(st, set(), None))
    record = snapshot_record("cluster:a", "g", "t", 0, 60_000, start, pid, bucket, final)
    assert record.received == 1 and record.freshness_counts == []


def test_consumer_state_keeps_the_histogram_and_old_state_reads_as_not_measured():
    now = 10 * 60_000 + 59_000
    st = _count([_Msg(now - 31_000)], now)
    list(dirty_buckets(st, set(), None))
    back = state_codec.decode_state(state_codec.encode_state("g", st), 60_000, 1_000)
    [b] = back.open.values()
    assert b[counts.FRESH] == st.open[(600_000, None)][counts.FRESH] and sum(b[counts.FRESH]) == 1
    # State written before the field (state.v1.avsc, also what the JVM interceptor writes today):
    # the bucket's messages were counted without freshness, so its window's freshness is not measured.
    new = fastavro.schemaless_reader(
        io.BytesIO(state_codec.encode_state("g", st)), state_codec._schema(), None
    )
    del new["freshness"]
    old = io.BytesIO()
    fastavro.schemaless_writer(old, state_codec._schema("state.v1"), new)
    [b] = state_codec.decode_state(old.getvalue(), 60_000, 1_000).open.values()
    assert b[counts.RECEIVED] == 1 and b[counts.FRESH] is None


def test_records_written_before_freshness_decode_as_not_measured_and_bad_ones_are_rejected():
    rec = AuditRecord(tier="cluster:a", source="g", topic="t", window_start_ms=0, window_end_ms=1_000)
    old = rec.to_avro()
    del old["freshness_counts"]
    buf = io.BytesIO()
    buf.write(codec.SINGLE_OBJECT_MAGIC + codec.fingerprint("audit_record.v9"))
    fastavro.schemaless_writer(buf, codec.schema("audit_record.v9"), old)
    assert decode(buf.getvalue()).freshness_counts == []
    rec.freshness_counts = [1, 2]
    with pytest.raises(MalformedRecordError, match="freshness_counts has 2 entries"):
        encode(rec)


def _snap(tier: str, pid: str | None, fresh: list[int], offset: int) -> dict:
    r = AuditRecord(
        tier=tier,
        source="g",
        topic="t",
        producer_id=pid,
        window_start_ms=0,
        window_end_ms=60_000,
        received=sum(fresh),
        unique=sum(fresh) if pid else 0,
        unaudited=0 if pid else sum(fresh),
        freshness_counts=fresh,
    )
    return compact(r, 0, offset)


def test_the_job_adds_the_tiers_histograms_and_exports_them_cumulative_per_le():
    h1, h2 = freshness.empty(), freshness.empty()
    h1[3], h1[9] = 90, 10  # 90 within 1 s, 10 within 60 s (later than 30 s)
    h2[3] = 5
    snaps = [
        {**compact(AuditRecord(tier="producer", source="p", topic="t", producer_id="p", window_start_ms=0,
                               window_end_ms=60_000, sent=100), 0, 1)},
        _snap("cluster:a", "p", h1, 2),
        _snap("cluster:a", None, h2, 3),  # unaudited messages are held too
        _snap("cluster:a", "q", [], 4),  # a writer that does not measure freshness
    ]  # fmt: skip
    [row] = reconcile("t", 0, 60_000, snaps, ["a"], FINAL)
    assert row["freshness_counts"] == freshness.add_counts([h1, h2])
    assert (
        window_result.from_spark(window_result.to_spark(row))["freshness_counts"] == row["freshness_counts"]
    )
    metrics = ResultMetrics()
    metrics.observe([row, {**row, "window_start_ms": 60_000, "window_end_ms": 120_000}], [], [])

    def value(le: str) -> float | None:
        labels = {"topic": "t", "tier": "cluster:a", "le": le}
        return metrics.registry.get_sample_value("kafka_audit_freshness_messages_total", labels)

    assert (value("1"), value("30"), value("60"), value("+Inf")) == (190.0, 190.0, 210.0, 210.0)


def test_a_message_read_after_its_window_closed_counts_in_the_windows_freshness():
    st = PartitionCounts("t", 0, window_ms=1_000, grace_ms=500)
    st.observe(1_100, b"p", 1, 1, 20)
    st.observe(2_600, b"p", 2, 1, 20)
    assert [s for s, _, _ in st.advance(None, 60_000)] == [1_000]
    st.observe(1_200, b"p", 3, 1, 45_000)  # late: held 45 s after its CreateTime
    closed = st.closed[(1_000, b"p")]
    assert closed[counts.LATE] == 1 and closed[counts.FRESH][freshness.bucket_of(45_000)] == 1
