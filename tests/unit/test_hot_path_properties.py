"""Property tests: every hot path that inlines a shared rule agrees with the rule's reference function.

The references are :func:`audit_record.stamp.encode` / :func:`~audit_record.stamp.decode` /
:func:`~audit_record.stamp.stamp_of` / :func:`~audit_record.stamp.read` (stamp formats v1 and v2),
:func:`audit_record.windows.window_start` and
:meth:`audit_consumer.counts.PartitionCounts.observe`. The code under test is the very code the hot
paths run: ``AuditedProducer.produce`` and its delivery-report counting (with fake librdkafka clients),
:func:`audit_consumer.counts.count_batch` (the audit consumer's loop) and
:func:`audit_consumer.ground_truth.tally` (the verifier's loop), fed random timestamps (negative and int64
edges included), window lengths,
producer ids, sequences (with duplicates) and malformed stamps.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any
from unittest import mock

import pytest
from confluent_kafka import KafkaError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import audit_producer.audit_topic_writer as audit_topic_writer_module
import audit_producer.producer as producer_module
from audit_consumer import counts
from audit_consumer.counts import PartitionCounts, count_batch
from audit_consumer.ground_truth import tally
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_producer.stamp_packer import stamp_blocks, stamp_packer
from audit_record import decode, window_bounds, window_start
from audit_record.stamp import (
    SEQUENCE_BYTES,
    SEQUENCE_LIMIT,
    STAMP_HEADER,
    STAMP_HEADER_V1,
    MalformedStampError,
    encode,
    encode_prefix,
    encode_varint,
    header,
    read,
    stamp_of,
)
from audit_record.stamp import decode as decode_stamp

PROPERTY = settings(
    max_examples=100,
    deadline=None,
    database=None,  # no .hypothesis directory in the working tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# ---------------------------------------------------------------------------------------------- inputs
v1_producer_ids = st.from_regex(r"\A[A-Za-z0-9._:@-]{1,40}\Z")
v2_producer_ids = st.binary(min_size=8, max_size=8).map(lambda b: "~" + b.hex())
producer_ids = st.one_of(v1_producer_ids, v2_producer_ids)
sequences = st.one_of(  # every varint length, its edges, and the limit
    st.integers(0, SEQUENCE_LIMIT - 1),
    st.integers(0, 20).map(lambda k: (1 << 7 * k) - 1).filter(lambda n: n < SEQUENCE_LIMIT),
    st.integers(0, 8).map(lambda k: 1 << 7 * k),
)
varint_tails = st.one_of(  # what may follow a v2 id: random bytes, mostly with continuation bits
    st.binary(max_size=11),
    st.lists(st.integers(0x80, 0xFF), max_size=10).flatmap(
        lambda more: st.integers(0, 0xFF).map(lambda last: bytes([*more, last]))
    ),
)
bad_producer_ids = st.one_of(
    st.just(""),
    st.text(min_size=1, max_size=10).filter(
        lambda s: any(not (c.isascii() and (c.isalnum() or c in "._:@-")) for c in s)
    ),
)
window_lengths = st.one_of(
    st.integers(1, 10**7), st.sampled_from([1, 2, 1_000, 5_000, 60_000, 86_400_000, 1 << 40])
)


@st.composite
def timestamps(draw: st.DrawFn, window_ms: int) -> int:
    """CreateTimes: anywhere in int64, near zero (both signs) and next to window boundaries."""
    near = draw(st.integers(-3, 3)) * window_ms + draw(st.sampled_from([-1, 0, 1]))
    return draw(
        st.one_of(
            st.integers(INT64_MIN, INT64_MAX),
            st.integers(-(10**6), 10**6),
            st.just(near),
            st.sampled_from([INT64_MIN, INT64_MAX, -1, 0, 1, 1_700_000_000_000]),
        )
    )


@st.composite
def stamp_headers(draw: st.DrawFn, pids: list[str]) -> list[tuple[str, Any]] | None:
    """A message's headers: none, a valid stamp (first or later), or a malformed one."""
    kind = draw(st.sampled_from(["none", "empty", "valid", "valid_later", "malformed", "other"]))
    other = [("x-other", draw(st.binary(max_size=4)))]
    if kind == "none":
        return None
    if kind == "empty":
        return []
    if kind == "other":
        return other
    if kind in ("valid", "valid_later"):
        seq = draw(st.integers(0, 6) | sequences)  # small range: duplicates
        stamp = header(draw(st.sampled_from(pids)), seq)
        return [stamp, *other] if kind == "valid" else [*other, stamp]
    key = draw(st.sampled_from([STAMP_HEADER, STAMP_HEADER_V1]))
    bad = draw(
        st.one_of(
            st.none(),
            st.binary(max_size=SEQUENCE_BYTES + 11),
            st.builds(  # a v2 id and random varint-like bytes: valid or not, both formats decode them
                lambda raw, tail: raw + tail, st.binary(min_size=8, max_size=8), varint_tails
            ),
            st.builds(  # a stamp of the other format
                lambda pid, seq: encode(pid, seq), st.sampled_from(pids), st.integers(0, 1 << 20)
            ),
            st.builds(  # a valid id with a sequence >= 2**63
                lambda pid, seq: pid.encode() + seq.to_bytes(SEQUENCE_BYTES, "big"),
                st.sampled_from(pids),
                st.just(SEQUENCE_LIMIT) | st.integers(SEQUENCE_LIMIT, (1 << 64) - 1),
            ),
            st.builds(  # an id that is not UTF-8 or has characters outside the allowed set
                lambda pid, seq: pid + seq.to_bytes(SEQUENCE_BYTES, "big"),
                st.sampled_from([b"\xff\xfe", b"bad id!", b"a/b", "\u00e9".encode()]),
                st.integers(0, 6),
            ),
        )
    )
    return [(key, bad), *other] if draw(st.booleans()) else [*other, (key, bad)]


def reference_stamp(headers: list[tuple[str, Any]] | None) -> tuple[bool, bytes | None, int]:
    """``(ok, producer_id, sequence)`` by the definitions, written plainly: first stamp header, decode()."""
    stamps = [(k, v) for k, v in headers or [] if k in (STAMP_HEADER, STAMP_HEADER_V1)]
    if not stamps:
        return True, None, 0
    try:
        pid, seq = decode_stamp(*stamps[0])
    except MalformedStampError:
        return False, None, 0
    return True, pid, seq


# ---------------------------------------------------------------------------------------------- stamp
@PROPERTY
@given(v1_producer_ids, st.integers(0, (1 << 64) - 1))
def test_v1_decode_inverts_encode_below_the_sequence_limit(pid: str, seq: int) -> None:
    if seq >= SEQUENCE_LIMIT:
        try:
            encode(pid, seq)
        except OverflowError:
            pass
        else:
            raise AssertionError("a sequence >= 2**63 must not encode")
        bad = encode_prefix(pid) + seq.to_bytes(SEQUENCE_BYTES, "big")
        try:
            decode_stamp(STAMP_HEADER_V1, bad)
        except MalformedStampError:
            return
        raise AssertionError("a sequence >= 2**63 must not decode")
    assert header(pid, seq) == (STAMP_HEADER_V1, encode_prefix(pid) + seq.to_bytes(SEQUENCE_BYTES, "big"))
    assert decode_stamp(*header(pid, seq)) == (pid.encode(), seq)


@PROPERTY
@given(v2_producer_ids, sequences)
def test_v2_decode_inverts_encode_and_costs_at_most_16_bytes_below_2_42(pid: str, seq: int) -> None:
    key, value = header(pid, seq)
    assert key == STAMP_HEADER and value == bytes.fromhex(pid[1:]) + encode_varint(seq)
    assert decode_stamp(key, value) == (pid.encode(), seq)
    assert len(value) == 8 + max(1, -(-seq.bit_length() // 7))  # a minimal varint: 7 bits a byte
    if seq < 1 << 42:
        assert len(key.encode()) + len(value) <= 16


@PROPERTY
@given(v2_producer_ids, st.integers(0, SEQUENCE_LIMIT - 1), st.lists(st.integers(0, 300), max_size=30))
def test_v2_inline_encoding_agrees_with_encode(pid: str, first: int, steps: list[int]) -> None:
    """The producer's v2 packer (cached high groups) == encode(), over runs and jumps of sequences."""
    prefix = encode_prefix(pid)
    pack = stamp_packer(prefix, 2)
    seq = first
    for step in [0, *steps]:
        seq = (seq + step) % SEQUENCE_LIMIT
        for s in (seq, seq + 1 if seq + 1 < SEQUENCE_LIMIT else seq):
            assert pack(prefix, s) == encode(pid, s)
    for out_of_range in (-1, -128, SEQUENCE_LIMIT, 1 << 64):
        try:
            pack(prefix, out_of_range)
        except OverflowError:
            continue
        raise AssertionError(f"sequence {out_of_range} packed")
    assert stamp_packer(encode_prefix("app@h.1.a"), 1)(encode_prefix("app@h.1.a"), first) == encode(
        "app@h.1.a", first
    )


@PROPERTY
@given(producer_ids, sequences)
def test_stamp_blocks_agree_with_encode(pid: str, seq: int) -> None:
    """The producer's blocks of 128 stamps (indexed by sequence & 0x7F) == encode(), both formats."""
    version = 2 if pid.startswith("~") else 1
    block = stamp_blocks(encode_prefix(pid), version)(seq)
    base = seq & ~0x7F
    assert len(block) == 128
    assert all(block[i] == encode(pid, base + i) for i in range(128))


def test_stamp_blocks_refuse_sequences_out_of_range() -> None:
    block = stamp_blocks(encode_prefix("~0123456789abcdef"), 2)
    assert block(SEQUENCE_LIMIT - 1)[127] == encode("~0123456789abcdef", SEQUENCE_LIMIT - 1)
    for out_of_range in (-1, -128, SEQUENCE_LIMIT, 1 << 64):
        with pytest.raises(OverflowError):
            block(out_of_range)


@PROPERTY
@given(st.binary(min_size=8, max_size=8), varint_tails)
def test_v2_inline_decoding_agrees_with_decode(raw: bytes, tail: bytes) -> None:
    """count_batch on one v2 stamp of random bytes: counted as decode() reads it, or dead-lettered."""
    msg = Msg("t", 0, 0, 1_000, headers_=[(STAMP_HEADER, raw + tail)])
    parts = fresh_parts(1_000, 0)
    n, dead, _ = run_count_batch([msg], parts, 2_000, {})
    try:
        pid, seq = decode_stamp(STAMP_HEADER, raw + tail)
    except MalformedStampError:
        assert (n, dead) == (0, [(0, "bad_stamp")])
        return
    assert n == 1 and not dead
    assert list(parts[("t", 0)].open) == [(1_000, pid)] and pid == b"~" + raw.hex().encode()
    assert list(parts[("t", 0)].open[(1_000, pid)][counts.SEQS]) == [seq]


@PROPERTY
@given(
    st.lists(st.binary(min_size=8, max_size=8), min_size=1, max_size=3),
    sequences,
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 300), st.sampled_from(["ok", "end", "byte"])), max_size=40
    ),
)
def test_v2_inline_decoding_of_runs_sharing_varint_tails_agrees_with_decode(
    raws: list[bytes], first: int, steps: list[tuple[int, int, str]]
) -> None:
    """count_batch over runs of v2 stamps (its cache of the varint's high groups hit and missed): each
    message counted as decode() reads it, or dead-lettered; malformed ones share a valid one's tail (the
    first varint byte without its continuation bit, or any first byte)."""
    msgs, expected = [], []
    for offset, (which, step, kind) in enumerate(steps):
        seq = min(first + step, SEQUENCE_LIMIT - 1)
        value = raws[which % len(raws)] + encode_varint(seq)
        if kind == "end":  # the same tail after a byte that ends the varint: trailing bytes
            value = value[:8] + bytes([value[8] & 0x7F]) + value[9:]
        elif kind == "byte":
            value = value[:8] + bytes([step % 256]) + value[9:]
        msgs.append(Msg("t", 0, offset, 1_000, headers_=[(STAMP_HEADER, value)]))
        try:
            expected.append(decode_stamp(STAMP_HEADER, value))
        except MalformedStampError:
            expected.append(None)
    parts = fresh_parts(1_000, 0)
    n, dead, _ = run_count_batch(msgs, parts, 2_000, {})
    assert dead == [(o, "bad_stamp") for o, e in enumerate(expected) if e is None]
    assert n == sum(e is not None for e in expected)
    counted: dict[bytes, set[int]] = defaultdict(set)
    for pid, seq in (e for e in expected if e is not None):
        counted[pid.encode() if isinstance(pid, str) else pid].add(seq)
    got = {pid: set(b[counts.SEQS]) for (_, pid), b in parts[("t", 0)].open.items()}
    assert got == counted


@PROPERTY
@given(bad_producer_ids)
def test_invalid_producer_ids_are_rejected(pid: str) -> None:
    for make in (lambda: encode(pid, 1), lambda: encode_prefix(pid)):
        try:
            make()
        except MalformedStampError:
            continue
        raise AssertionError(f"{pid!r} accepted")


@PROPERTY
@given(
    st.lists(
        st.tuples(
            st.sampled_from([STAMP_HEADER, STAMP_HEADER_V1, "a", "~", "kafka-audit"]),
            st.none() | st.binary(max_size=3),
        )
    )
)
def test_stamp_of_is_the_first_stamp_header(headers: list[tuple[str, bytes | None]]) -> None:
    stamps = [(k, v) for k, v in headers if k in (STAMP_HEADER, STAMP_HEADER_V1)]
    expected = None if not stamps else (stamps[0][0], stamps[0][1] if stamps[0][1] is not None else b"")
    assert stamp_of(headers) == expected
    assert stamp_of(None) is None
    found = reference_stamp(headers)
    try:
        assert read(headers) == (None if expected is None else found[1:])
    except MalformedStampError:
        assert not found[0]


@PROPERTY
@given(window_lengths, st.data())
def test_window_bounds_hold_the_timestamp(window_ms: int, data: st.DataObject) -> None:
    ts = data.draw(timestamps(window_ms))
    start, end = window_bounds(ts, window_ms)
    assert start == window_start(ts, window_ms) and start <= ts < end == start + window_ms
    assert start % window_ms == 0


# ---------------------------------------------------------------------------------------------- producer
class _ReportedMessage:
    """The message of a fake delivery report: its partition (-1: librdkafka would not have assigned one)
    and offset (reports get increasing offsets, as a partition's log would give them)."""

    _next_offset = 0

    def __init__(self, partition: int) -> None:
        self._partition = partition
        self._offset = _ReportedMessage._next_offset
        _ReportedMessage._next_offset += 1

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


class FakeProducer:
    """Records what the audited producer hands to librdkafka; never connects.

    ``produce`` takes confluent-kafka's positional slots (topic, value, key, partition, callback,
    on_delivery, timestamp, headers) and keeps each message with its delivery callback until the test
    reports it (:meth:`report`); with ``keep=False`` (the audit producer) messages are delivered at once.
    ``full`` makes the next produce() raise ``BufferError``, as a full queue.
    """

    def __init__(self, errors_only: bool = False, keep: bool = True) -> None:
        self.produced: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []
        self.errors_only = errors_only
        self.keep = keep
        self.full = False
        self.closed = False

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        callback: Any = None,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        if self.full:
            self.full = False
            raise BufferError("Local: Queue full")
        rec = {"topic": topic, "value": value, "key": key, "timestamp": timestamp, "headers": headers}
        rec["partition"] = partition
        rec["callback"] = callback or on_delivery
        self.produced.append(rec)
        if self.keep:
            self.pending.append(rec)

    def report(self, index: int, err: Any) -> dict[str, Any]:
        """Deliver (err None) or fail one pending message, as librdkafka's delivery report would."""
        rec = self.pending.pop(index)
        if rec["callback"] is not None and (err is not None or not self.errors_only):
            # The callbacks read neither the message's timestamp nor topic; only its partition.
            rec["callback"](err, _ReportedMessage(rec["partition"]))
        return rec

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = -1) -> int:
        return len(self.pending)

    def purge(self, **kw: Any) -> None:
        raise AssertionError("every message is reported before close")

    def __len__(self) -> int:
        return len(self.pending)

    def close(self) -> None:
        self.closed = True


def audited(
    audit: ProducerAuditSettings, client_id: str = "rdkafka"
) -> tuple[AuditedProducer, FakeProducer, FakeProducer]:
    """An AuditedProducer whose librdkafka clients are fakes (the real ones are closed at once)."""
    p = AuditedProducer({"bootstrap.servers": "127.0.0.1:9", "log_level": 0, "client.id": client_id}, audit)
    p._producer.close()
    p._audit_topic.producer.close()
    data, snapshots = FakeProducer(audit.delivery_reports == "errors"), FakeProducer(keep=False)
    p._producer, p._produce, p._audit_topic.producer = data, data.produce, snapshots
    return p, data, snapshots


produce_calls = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.one_of(st.just(0), st.integers(INT64_MIN, INT64_MAX), st.integers(-(10**5), 10**5)),
        st.none() | st.binary(max_size=5),
        st.sampled_from(["none", "list", "dict"]),
        st.none() | st.booleans(),  # delivery report: None = none, True = error, False = delivered
    ),
    max_size=40,
)


@PROPERTY
@given(
    window_lengths,
    produce_calls,
    st.text(max_size=20),
    st.integers(0, SEQUENCE_LIMIT - 100) | st.integers(0, 1 << 16),
    st.sampled_from([1, 2]),
)
def test_producer_stamps_windows_and_counts_agree_with_the_reference(
    window_ms: int, calls: list, client_id: str, first_seq: int, version: int
) -> None:
    audit = ProducerAuditSettings(
        window_ms=window_ms, snapshot_interval_ms=10**9, grace_ms=10**9, stamp_version=version
    )
    gate = threading.Event()  # the background audit topic check runs until the end: no snapshot ticks
    with mock.patch.object(
        audit_topic_writer_module, "ensure_topic", side_effect=lambda *a, **k: gate.wait(10)
    ) as ensure:
        p, data, snapshots = audited(audit, client_id)
        p._seq = first_seq - 1  # as if first_seq - 1 messages had been produced before
        p._stamps = p._stamp_block(first_seq)  # the block of _seq + 1 (the producer keeps it so)
        for topic, ts, value, hdr_kind, _ in calls:
            headers = {"none": None, "list": [("h", b"1")], "dict": {"h": b"1"}}[hdr_kind]
            p.produce(topic, value, timestamp=ts, headers=headers)
        assert p.last_sequence == first_seq - 1 + len(calls)
        sent: Counter[tuple[str, int]] = Counter()
        size: Counter[tuple[str, int]] = Counter()
        seqs: dict[tuple[str, int], list[int]] = defaultdict(list)
        for seq, ((topic, ts, value, hdr_kind, _), rec) in enumerate(
            zip(calls, data.produced, strict=True), first_seq
        ):
            assert rec["headers"][0] == header(p.producer_id, seq)
            assert rec["headers"][0][0] == (STAMP_HEADER if version == 2 else STAMP_HEADER_V1)
            assert decode_stamp(*rec["headers"][0]) == (p.producer_id.encode(), seq)
            assert rec["headers"][1:] == ([] if hdr_kind == "none" else [("h", b"1")])
            if ts:
                assert rec["timestamp"] == ts
            key = (topic, window_start(rec["timestamp"], window_ms))
            sent[key] += 1
            size[key] += len(value) if value is not None else 0
            seqs[key].append(seq)
        p._flush_hot(0)  # what every tick does first
        windows = p._windows
        assert set(windows) == set(sent)
        for key, w in windows.items():
            assert (w[0], w[3], w[4], w[5]) == (sent[key], size[key], min(seqs[key]), max(seqs[key]))

        acked: Counter[tuple[str, int]] = Counter()
        failed: Counter[tuple[str, int]] = Counter()
        for (topic, _, _, _, report), rec in zip(calls, list(data.produced), strict=True):
            if report is None:
                continue
            data.report(data.pending.index(rec), KafkaError(KafkaError._MSG_TIMED_OUT) if report else None)
            key = (topic, window_start(rec["timestamp"], window_ms))
            (failed if report else acked)[key] += 1
        for key, w in windows.items():
            assert (w[1], w[2]) == (acked[key], failed[key])
        assert snapshots.produced == []  # none before the audit topic check has succeeded
        gate.set()
        if p._audit_topic.check_thread is not None:
            p._audit_topic.check_thread.join(10)
        assert ensure.call_count == (1 if calls else 0)
        p._windows.clear()  # nothing to send on close
        data.pending.clear()
        p.close(timeout_s=0)
    assert data.closed and snapshots.closed


# A plain reference for the hot path: every message counted at once, by the window of the CreateTime the
# fake librdkafka was given, and every delivery report counted in the window of its message.
class Clock:
    """The producer's wall clock (``time.time_ns`` and ``now_ms``), moved by the test."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def time_ns(self) -> int:
        return self.ms * 1_000_000 + 654_321  # ns within the ms: the producer must floor them

    def now_ms(self) -> int:
        return self.ms


produce_op = st.tuples(  # produce: topic, own timestamp (None: now), value, headers, queue full
    st.just("produce"),
    st.sampled_from(["a", "a", "a", "b"]),  # mostly one topic: the fast path's case
    st.sampled_from([None] * 5 + [-3, -1, 0, 1, 2]),  # an own timestamp: in windows around the clock's
    st.none() | st.binary(max_size=7),
    st.integers(0, 4).map(lambda n: n == 0),
    st.integers(0, 4).map(lambda n: n == 0),
)
clock_op = st.tuples(  # move the clock by whole windows and a few ms, forwards or backwards
    st.just("clock"), st.sampled_from([0, 0, 0, 1, 1, -1, 3, -3]), st.sampled_from([-1, 0, 1, 2, 5])
)
ops = st.lists(
    st.one_of(
        produce_op,
        produce_op,
        produce_op,
        clock_op,
        st.tuples(st.just("report"), st.integers(0, 10**6), st.booleans()),  # deliver (False) / fail (True)
        st.tuples(st.just("poll")),  # the caller's poll: ticks when due
        st.tuples(st.just("swap")),  # an autotune swap: new messages to a new inner producer
    ),
    max_size=80,
)


@settings(PROPERTY, max_examples=400)
@given(
    st.sampled_from([1, 3, 10, 1_000, 60_000]),
    st.sampled_from([1, 2, 4, 50]),
    st.sampled_from(["all", "errors"]),
    st.integers(10**6, 1_800_000_000_000),  # CreateTimes stay positive: snapshots have no negative windows
    ops,
)
def test_hot_path_counts_equal_counting_each_message_at_once(
    window_ms: int, interval_ms: int, mode: str, start_ms: int, steps: list
) -> None:
    """Random produce / BufferError / clock / delivery report / tick / swap sequences across windows."""
    clock = Clock(start_ms)
    audit = ProducerAuditSettings(
        window_ms=window_ms, snapshot_interval_ms=interval_ms, grace_ms=10**12, delivery_reports=mode
    )
    with (
        mock.patch.object(producer_module, "_time_ns", clock.time_ns),
        mock.patch.object(producer_module, "now_ms", clock.now_ms),
        mock.patch.object(audit_topic_writer_module, "ensure_topic", lambda *a, **k: None),
    ):
        p, data, snapshots = audited(audit)
        p.check()
        inners = [data]
        messages: list[dict[str, Any]] = []  # the reference: every message accepted, in order
        for step in steps:
            if step[0] == "produce":
                _, topic, own, value, with_headers, full = step
                ts = 0 if own is None else (clock.ms // window_ms + own) * window_ms + own % 2
                inner = inners[-1]
                inner.full = full
                before = p.last_sequence
                try:
                    p.produce(topic, value, timestamp=ts, headers=[("h", b"1")] if with_headers else None)
                except BufferError:
                    assert full and p.last_sequence == before  # no sequence number used up
                    continue
                assert not full
                rec = inner.produced[-1]
                assert rec["timestamp"] == (ts or clock.ms)  # CreateTime: own, else the clock's ms
                seq = before + 1
                assert p.last_sequence == seq
                assert rec["headers"][0] == header(p.producer_id, seq)
                assert p._next_tick_ms > clock.ms  # a produce() at or after the tick time ran the tick
                assert rec["headers"][1:] == ([("h", b"1")] if with_headers else [])
                messages.append(
                    {"rec": rec, "seq": seq, "window": (topic, window_start(rec["timestamp"], window_ms))}
                )
            elif step[0] == "clock":
                _, windows_ahead, ms = step
                clock.ms = max(clock.ms + windows_ahead * window_ms + ms, 10**6)  # backwards too
            elif step[0] == "report":
                _, pick, fail = step
                held = [(inner, i) for inner in inners for i in range(len(inner.pending))]
                if held:
                    inner, i = held[pick % len(held)]
                    rec = inner.report(i, KafkaError(KafkaError._MSG_TIMED_OUT) if fail else None)
                    next(m for m in messages if m["rec"] is rec)["report"] = "failed" if fail else "acked"
            elif step[0] == "poll":
                p.poll(0)
            else:
                new = FakeProducer(mode == "errors")
                p._reconfiguration.swap(new, p.reliability, object(), clock.ms, pinned=False)
                inners.append(new)
            # After any step: the window lists, flushed as every tick does first, hold the reference counts.
            p._flush_hot(clock.ms)
            expected: dict[tuple[str, int], list[int]] = {}
            for m in messages:
                e = expected.setdefault(m["window"], [0, 0, 0, 0, m["seq"], m["seq"]])
                e[0] += 1
                e[1] += m.get("report") == "acked"
                e[2] += m.get("report") == "failed"
                e[3] += len(m["rec"]["value"] or b"")
                e[5] = m["seq"]
            got = {k: [w[0], w[1], w[2], w[3], w[4], w[5]] for k, w in p._windows.items()}
            if mode == "errors":  # acknowledged is derived at ticks, not counted
                for k in got:
                    got[k][1] = expected[k][1] = 0
            assert got == expected

        for inner in inners:  # everything reported, then closed: the final snapshots say it all
            while inner.pending:
                rec = inner.report(0, None)
                next(m for m in messages if m["rec"] is rec).setdefault("report", "acked")
        p.close(timeout_s=0)
        final = {
            (r.topic, r.window_start_ms): r
            for r in map(decode, (m["value"] for m in snapshots.produced))
            if r.final
        }
        assert set(final) == {m["window"] for m in messages}
        for key, r in final.items():
            mine = [m for m in messages if m["window"] == key]
            failed = sum(m["report"] == "failed" for m in mine)
            assert (r.sent, r.failed, r.acknowledged) == (len(mine), failed, len(mine) - failed)
            assert r.bytes == sum(len(m["rec"]["value"] or b"") for m in mine)
            assert (r.first_sequence, r.last_sequence) == (mine[0]["seq"], mine[-1]["seq"])


# ---------------------------------------------------------------------------------------------- consumer
class Err:
    """A consumed error event (EOF or a broker error)."""


@dataclass
class Msg:
    """The methods of a consumed ``confluent_kafka.Message`` that the counting loops use."""

    topic_: str
    partition_: int
    offset_: int
    ts: int
    ts_type: int = 1
    headers_: list[tuple[str, Any]] | None = None
    value_: bytes | None = None
    error_: Err | None = None

    def error(self) -> Err | None:
        return self.error_

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def timestamp(self) -> tuple[int, int]:
        return (self.ts_type, self.ts)

    def headers(self) -> list[tuple[str, Any]] | None:
        return self.headers_

    def value(self) -> bytes | None:
        return self.value_


@st.composite
def consumed(draw: st.DrawFn, window_ms: int, non_negative: bool = False, clean: bool = False) -> list[Msg]:
    """A consumed batch over partitions t/0, t/1 and u/0 (unassigned), with errors, duplicates, bad stamps."""
    pids = draw(st.lists(producer_ids, min_size=1, max_size=3, unique=True))
    out = []
    for offset in range(draw(st.integers(0, 40))):
        topic, part = draw(
            st.sampled_from([("t", 0), ("t", 1), ("u", 0)] if not clean else [("t", 0), ("t", 1)])
        )
        ts = draw(timestamps(window_ms))
        if non_negative:
            ts = abs(ts) % (1 << 63)
        headers = draw(stamp_headers(pids))
        if clean and headers is not None and not reference_stamp(headers)[0]:
            headers = None
        m = Msg(topic, part, offset, ts, headers_=headers, value_=draw(st.none() | st.binary(max_size=4)))
        if not clean and draw(st.integers(0, 19)) == 0:
            m.ts_type = 0
        if not clean and draw(st.integers(0, 19)) == 0:
            m.error_ = Err()
        out.append(m)
    return out


def bucket_view(b: list) -> tuple:
    seqs = b[counts.SEQS]
    return (*b[: counts.SEQS], None if seqs is None else sorted(seqs), *b[counts.SEQS + 1 :])


def state_view(pc: PartitionCounts) -> tuple:
    return (
        pc.next_offset,
        pc.watermark_ms,
        pc.closed_horizon_ms,
        pc.dirty,
        {k: bucket_view(b) for k, b in pc.open.items()},
        {k: bucket_view(b) for k, b in pc.closed.items()},
    )


def fresh_parts(window_ms: int, grace_ms: int) -> dict[tuple[str, int], PartitionCounts]:
    return {("t", p): PartitionCounts("t", p, window_ms, grace_ms) for p in (0, 1)}


def reference_batch(msgs: list[Msg], parts: dict, now: int) -> tuple[int, list, list]:
    """The consumer's loop written with the reference functions, one message at a time."""
    n, dead, errors = 0, [], []
    for m in msgs:
        if m.error() is not None:
            errors.append(m.offset())
            continue
        pc = parts.get((m.topic(), m.partition()))
        if pc is None:
            continue
        pc.dirty = True
        pc.next_offset = m.offset() + 1
        ts_type, ts = m.timestamp()
        if ts_type == 0:
            dead.append((m.offset(), "no_timestamp"))
            continue
        ok, pid, seq = reference_stamp(m.headers())
        if not ok:
            dead.append((m.offset(), "bad_stamp"))
            continue
        value = m.value()
        pc.observe(ts, pid, seq, len(value) if value is not None else 0, now - ts)
        n += 1
    return n, dead, errors


def run_count_batch(msgs: list[Msg], parts: dict, now: int, valid: dict) -> tuple[int, list, list]:
    dead: list[tuple[int, str]] = []
    errors: list[int] = []
    entered: list[tuple[str, int]] = []
    n = count_batch(
        msgs,
        parts,
        now,
        valid,
        entered.append,
        lambda m: errors.append(m.offset()),
        lambda m, reason, detail: dead.append((m.offset(), reason)),
    )
    assert set(entered) <= set(parts)
    return n, dead, errors


@PROPERTY
@given(window_lengths, st.integers(0, 5_000), st.data())
def test_consumer_loop_agrees_with_decode_window_start_and_observe(
    window_ms: int, grace_ms: int, data: st.DataObject
) -> None:
    now = data.draw(st.integers(-(10**6), 1 << 62))
    fast, ref = fresh_parts(window_ms, grace_ms), fresh_parts(window_ms, grace_ms)
    valid: dict[bytes, bool] = {}
    for _ in range(data.draw(st.integers(1, 3))):
        msgs = data.draw(consumed(window_ms))
        assert run_count_batch(msgs, fast, now, valid) == reference_batch(msgs, ref, now)
        assert {k: state_view(v) for k, v in fast.items()} == {k: state_view(v) for k, v in ref.items()}
        assert all(
            ok and reference_stamp([(STAMP_HEADER_V1, pid + bytes(8))])[0] for pid, ok in valid.items()
        )
        if data.draw(st.booleans()):  # close windows: later messages of them are late
            caught_up = data.draw(st.none() | st.integers(-(10**6), 1 << 62))
            for key in fast:
                closed_fast = [(s, p, bucket_view(b)) for s, p, b in fast[key].advance(caught_up, 10_000)]
                closed_ref = [(s, p, bucket_view(b)) for s, p, b in ref[key].advance(caught_up, 10_000)]
                assert closed_fast == closed_ref
            assert {k: state_view(v) for k, v in fast.items()} == {k: state_view(v) for k, v in ref.items()}


@PROPERTY
@given(window_lengths, st.data())
def test_consumer_counts_and_duplicates_match_a_simple_count(window_ms: int, data: st.DataObject) -> None:
    msgs = data.draw(consumed(window_ms, non_negative=True, clean=True))
    parts = fresh_parts(window_ms, 0)
    n, dead, errors = run_count_batch(msgs, parts, 1 << 62, {})
    assert (n, dead, errors) == (len(msgs), [], [])
    received: Counter[tuple] = Counter()
    size: Counter[tuple] = Counter()
    sequences: dict[tuple, list[int]] = defaultdict(list)
    for m in msgs:
        _, pid, seq = reference_stamp(m.headers())
        key = (m.partition(), window_start(m.ts, window_ms), pid)
        received[key] += 1
        size[key] += len(m.value_ or b"")
        if pid is not None:
            sequences[key].append(seq)
    got = {(p, start, pid): b for (_, p), pc in parts.items() for (start, pid), b in pc.open.items()}
    assert set(got) == set(received)
    for key, b in got.items():
        unique = len(set(sequences[key])) if key[2] is not None else 0
        assert b[counts.RECEIVED] == received[key]
        assert counts.unique_of(key[2], b) == unique
        assert b[counts.DUPLICATED] == (received[key] - unique if key[2] is not None else 0)
        assert b[counts.BYTES] == size[key]
        assert b[counts.LATE] == 0


# ---------------------------------------------------------------------------------------------- verifier
@PROPERTY
@given(window_lengths, st.data())
def test_verifier_loop_agrees_with_decode_and_window_start(window_ms: int, data: st.DataObject) -> None:
    msgs = data.draw(consumed(window_ms))
    v = tally(msgs, "t", window_ms)
    received: Counter[tuple] = Counter()
    sequences: dict[tuple, set[int]] = defaultdict(set)
    malformed = 0
    for m in msgs:
        ok, pid, seq = reference_stamp(m.headers())
        if not ok:
            malformed += 1
            continue
        key = (window_start(m.ts, window_ms), pid.decode() if pid is not None else None)
        received[key] += 1
        if pid is not None:
            sequences[key].add(seq)
    assert (v.messages, v.malformed_stamps) == (len(msgs), malformed)
    assert set(v.rows) == set(received)
    for key, row in v.rows.items():
        unique = len(sequences[key]) if key[1] is not None else 0
        assert (row.window_start_ms, row.producer_id) == key
        assert (row.received, row.unique, row.duplicated) == (
            received[key],
            unique,
            received[key] - unique if key[1] is not None else 0,
        )
