"""Per-partition audit counts: the audit consumer's state, free of Kafka so it can be unit-tested.

A partition's state holds, per (window, producer id), a bucket of counters and the set of sequence
numbers seen (a 64-bit Roaring bitmap: compact for runs, exact). A message whose (producer id, sequence)
is already in the set is a duplicate. A window closes when the partition's event-time watermark passes
its end plus its wait (the grace, or longer while its producers may still deliver: docs/DESIGN.md,
invariant 8); then its sequence set is dropped (memory stays bounded) and only its counters are kept,
for ``late_retention_ms``, to count late messages.

The watermark is the largest CreateTime seen in the partition; while the consumer is caught up
(partition EOF, its end confirmed when that closes a window: ``audit_consumer.consumer``) it also follows
the wall clock, so an idle partition's windows close too.

:meth:`PartitionCounts.observe` is the reference rule for counting one message; :func:`count_batch` is
the consumer's hot path, which inlines it (and stamp decoding, and the window start) for speed with the
shared constants of :mod:`audit_record.stamp` and the bucket layout below. A property test checks that
the two agree on random input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pyroaring import BitMap64

from audit_consumer import latency
from audit_record import freshness
from audit_record.stamp import (
    PRODUCER_ID_BYTES,
    SEQUENCE_BYTEORDER,
    SEQUENCE_BYTES,
    SEQUENCE_LIMIT,
    STAMP_HEADER,
    STAMP_HEADER_V1,
    MalformedStampError,
    decode_varint,
    is_v1_id,
    stamp_of,
    v2_id_bytes,
)
from audit_record.windows import window_start

# Bucket layout (a list: this is the per-message hot path). FRESH: the freshness histogram
# (audit_record.freshness), None when not measured (restored from a state that lacked it).
RECEIVED, DUPLICATED, BYTES, LATE, DIRTY, SEQS, LATS, HIST, STALE, LAT_MAX, UNIQUE, FRESH = range(12)


def new_bucket() -> list:
    """Return an empty open bucket: counters, sequence set, pending latencies, histograms."""
    return [0, 0, 0, 0, 1, BitMap64(), [], [0] * latency.N_BUCKETS, 0, 0, 0, freshness.empty()]


@dataclass
class PartitionCounts:
    """Audit state of one (topic, partition).

    Attributes:
        topic, partition: Which partition.
        window_ms, grace_ms: Window length and grace, ms.
        next_offset: Offset of the next message to read (committed with the state).
        watermark_ms: Largest CreateTime seen, ms since epoch UTC (-1 before the first message).
        closed_horizon_ms: Windows with ``end <= closed_horizon_ms`` are closed.
        open: ``{(window_start_ms, producer_id_bytes_or_None): bucket}`` for open windows.
        closed: Same for closed windows (sequence set dropped; counters kept for late messages).
        log_append_time: A message of the partition had a LogAppendTime timestamp (``message.timestamp.type``
            of the topic): the broker replaced its CreateTime, so freshness is not measured (the snapshots'
            ``freshness_counts`` are empty); latencies are then consume time - append time.
    """

    topic: str
    partition: int
    window_ms: int
    grace_ms: int
    next_offset: int = -1
    watermark_ms: int = -1
    closed_horizon_ms: int = -1
    open: dict[tuple[int, bytes | None], list] = field(default_factory=dict)
    closed: dict[tuple[int, bytes | None], list] = field(default_factory=dict)
    dirty: bool = False
    log_append_time: bool = False

    @property
    def first_open_start_ms(self) -> int:
        """Smallest window start that is still open; messages of earlier windows are late."""
        h = self.closed_horizon_ms
        return window_start(h, self.window_ms) if h >= 0 else -1

    def observe(
        self, timestamp_ms: int, producer_id: bytes | None, sequence: int, size: int, latency_ms: int
    ) -> None:
        """Count one message: the reference version of the loop :func:`count_batch` inlines.

        Args:
            timestamp_ms: CreateTime, ms since epoch UTC.
            producer_id: Stamp's producer id bytes, or None for an unaudited message.
            sequence: Stamp's sequence number (ignored when unaudited).
            size: Value bytes.
            latency_ms: Consume time minus CreateTime, ms (a late message's goes to the freshness
                histogram at once: the latency percentiles are of the window's own messages).
        """
        start = window_start(timestamp_ms, self.window_ms)
        self.dirty = True
        if timestamp_ms > self.watermark_ms:
            self.watermark_ms = timestamp_ms
        if start < self.first_open_start_ms:
            b = self.closed.get((start, producer_id))
            if b is None:
                b = self.closed[(start, producer_id)] = new_bucket()
                b[SEQS] = None
            b[LATE] += 1
            if b[FRESH] is not None:  # held, however late: it counts in the tier's freshness
                b[FRESH][freshness.bucket_of(latency_ms)] += 1
            b[DIRTY] = 1
            return
        b = self.open.get((start, producer_id))
        if b is None:
            b = self.open[(start, producer_id)] = new_bucket()
        b[RECEIVED] += 1
        b[BYTES] += size
        b[LATS].append(latency_ms)
        b[DIRTY] = 1
        if producer_id is not None:
            seqs = b[SEQS]
            if sequence in seqs:
                b[DUPLICATED] += 1
            else:
                seqs.add(sequence)

    def advance(
        self,
        now_ms: int | None,
        late_retention_ms: int,
        wait_ms: Callable[[int], int] | None = None,
        max_wait_ms: int = 0,
    ) -> list[tuple[int, bytes | None, list]]:
        """Close every open window whose end + its wait <= watermark; expire old closed counters.

        The wait is the grace, or longer for a window whose producers may still deliver
        (``wait_ms``; docs/DESIGN.md, invariant 8). Windows close in order: one that must still wait
        keeps every later window open too.

        Args:
            now_ms: Wall-clock time if the consumer is caught up on this partition (EOF), else None.
            late_retention_ms: How long closed counters are kept, ms after the window's end.
            wait_ms: ``wait_ms(window_start_ms)``: how long after its end a window's messages may still
                be appended (the delivery bound of :class:`audit_record.finality.Finality`), ms; 0 or
                less: the grace alone. None: every window waits the grace.
            max_wait_ms: The largest value ``wait_ms`` returns, ms (windows older than that are not asked).

        Returns:
            ``(window_start_ms, producer_id, bucket)`` of each window closed now (emit them as final).
        """
        wm = self.watermark_ms if now_ms is None else max(self.watermark_ms, now_ms)
        if wm < 0:
            return []
        horizon = self._horizon(wm, wait_ms, max_wait_ms)
        if horizon <= self.closed_horizon_ms:
            return []
        before = self.first_open_start_ms
        self.closed_horizon_ms = horizon
        first_open = self.first_open_start_ms
        if first_open == before:
            return []  # no window boundary crossed: nothing closes, late classification unchanged
        closed_now = []
        for key in [k for k in self.open if k[0] < first_open]:
            b = self.open.pop(key)
            b[UNIQUE] = len(b[SEQS]) if key[1] is not None else 0
            b[SEQS] = None
            b[DIRTY] = 1
            self.closed[key] = b
            closed_now.append((key[0], key[1], b))
        for key in [k for k in self.closed if k[0] + self.window_ms + late_retention_ms < horizon]:
            del self.closed[key]
        self.dirty = True  # the new horizon must be committed with the state
        return closed_now

    def crosses_window(
        self, wm_ms: int, wait_ms: Callable[[int], int] | None = None, max_wait_ms: int = 0
    ) -> bool:
        """Return True if :meth:`advance` with watermark ``wm_ms`` would move the first open window.

        Side-effect free. Such a move closes windows and makes their messages read afterwards late, so
        the audit consumer lets the wall clock make it only once it has confirmed it holds the
        partition's end (``audit_consumer.consumer``, ``_caught_up``). Arguments as :meth:`advance`.
        """
        if wm_ms < 0:
            return False
        horizon = self._horizon(wm_ms, wait_ms, max_wait_ms)
        if horizon <= self.closed_horizon_ms:
            return False
        after = window_start(horizon, self.window_ms) if horizon >= 0 else -1
        return after != self.first_open_start_ms

    def _horizon(self, wm: int, wait_ms: Callable[[int], int] | None, max_wait_ms: int) -> int:
        """Return the closing horizon for watermark ``wm``: ``wm`` - grace, held by ``wait_ms``, ms."""
        horizon = wm - self.grace_ms
        if wait_ms is not None and horizon > self.closed_horizon_ms:
            horizon = self._held_horizon(horizon, wm, wait_ms, max_wait_ms)
        return horizon

    def _held_horizon(self, horizon: int, wm: int, wait_ms: Callable[[int], int], max_wait_ms: int) -> int:
        """Return ``horizon``, or the start of the first window that may still receive messages.

        Checks the windows the grace alone would close, oldest first (empty ones too: a window whose
        every message of this partition is still being retried has no bucket yet); windows that ended
        ``max(grace, max_wait_ms)`` before ``wm`` or earlier close whatever ``wait_ms`` says.
        """
        w = self.window_ms
        first = self.first_open_start_ms
        if first < 0:  # first advance of this partition: from its oldest window
            first = min((k[0] for k in self.open), default=window_start(horizon, w))
        start = max(first, window_start(wm - max(max_wait_ms, self.grace_ms), w) - w)
        while start + w <= horizon:  # the grace alone would close this window
            if start + w + wait_ms(start) > wm:
                return start
            start += w
        return horizon


def unique_of(producer_id: bytes | None, bucket: list) -> int:
    """Distinct (producer id, sequence) pairs in a bucket; 0 for the unaudited bucket."""
    if producer_id is None:
        return 0
    seqs = bucket[SEQS]
    return len(seqs) if seqs is not None else bucket[UNIQUE]


def fold_latencies(bucket: list, stale_after_ms: int | None) -> None:
    """Move pending latencies into the histograms; count those above timeliness S as stale.

    A pending latency (consume time - CreateTime, ms, appended by :func:`count_batch`) is the one
    measurement both histograms reduce: the log-linear one (:mod:`audit_consumer.latency`, the
    ``latency_p50_ms``/``latency_p99_ms`` percentiles) and the fixed-bound freshness one
    (:mod:`audit_record.freshness`, ``freshness_counts``), unless the latter is not measured (None).
    """
    lats = bucket[LATS]
    if not lats:
        return
    arr = np.fromiter(lats, np.int64, len(lats))
    latency.add_all(bucket[HIST], arr)
    if bucket[FRESH] is not None:
        freshness.add_all(bucket[FRESH], arr)
    top = int(arr.max())
    if top > bucket[LAT_MAX]:
        bucket[LAT_MAX] = top
    if stale_after_ms is not None:
        bucket[STALE] += int(np.count_nonzero(arr > stale_after_ms))
    bucket[LATS] = []


VALID_PID_CACHE_SIZE = 100_000
"""At most this many valid producer ids are remembered by :func:`count_batch` (then it re-validates)."""


def check_pid(valid_pids: dict[bytes, bool], pid: bytes) -> bool:
    """Return whether ``pid`` is a valid v1 producer id (:func:`audit_record.stamp.is_v1_id`).

    Valid ids are remembered in ``valid_pids`` (up to :data:`VALID_PID_CACHE_SIZE`), so the hot path
    validates each id once; invalid ones are never remembered.
    """
    if not is_v1_id(pid):
        return False
    if len(valid_pids) < VALID_PID_CACHE_SIZE:
        valid_pids[pid] = True
    return True


_V2_IDS: dict[bytes, bytes] = {}
"""v2 ids seen by :func:`count_batch`: 8 raw bytes -> text form bytes (up to VALID_PID_CACHE_SIZE)."""

# A v2 stamp of n <= _STAMP_FAST bytes (a varint of n - 8 <= 6 bytes) whose varint, read as a
# little-endian int, is x is valid when x & _HI[n] == _CONT[n] (continuation bit on every byte but the
# last; _CONT[n] = -1 below 9 bytes: no varint) and x >= _MIN[n] (a last byte > 0: minimal); its value
# is x's 7-bit groups packed together. Longer (or invalid) varints take decode_varint.
_VARINT_FAST = 6
_STAMP_FAST = PRODUCER_ID_BYTES + _VARINT_FAST
_HI = tuple(sum(0x80 << 8 * i for i in range(max(0, n - PRODUCER_ID_BYTES))) for n in range(_STAMP_FAST + 1))
_CONT = tuple(
    -1 if n <= PRODUCER_ID_BYTES else sum(0x80 << 8 * i for i in range(n - PRODUCER_ID_BYTES - 1))
    for n in range(_STAMP_FAST + 1)
)
_MIN = tuple(
    0 if n <= PRODUCER_ID_BYTES + 1 else 1 << 8 * (n - PRODUCER_ID_BYTES - 1) for n in range(_STAMP_FAST + 1)
)


def v2_sequence(tail: bytes) -> int:
    """Return a v2 stamp's sequence (:func:`audit_record.stamp.decode_varint`); -1 if invalid."""
    try:
        return decode_varint(tail)
    except MalformedStampError:
        return -1


def v2_pid(ids: dict[bytes, bytes], raw: bytes) -> bytes:
    """Return the text form bytes of a v2 id from its 8 raw bytes, remembered in ``ids`` (bounded)."""
    pid = v2_id_bytes(raw)
    if len(ids) < VALID_PID_CACHE_SIZE:
        ids[raw] = pid
    return pid


def count_batch(
    msgs: Iterable[Any],
    parts: Mapping[tuple[str, int], PartitionCounts],
    now_ms: int,
    valid_pids: dict[bytes, bool],
    on_partition: Callable[[tuple[str, int]], object],
    on_error: Callable[[Any], object],
    dead_letter: Callable[[Any, str, str], object],
) -> int:
    """Count a batch of consumed messages into their partitions' state: the audit consumer's hot path.

    Per message it does what :func:`audit_record.stamp.read` and :meth:`PartitionCounts.observe` define
    (the stamp's producer id and sequence, v1 or v2, the window ``ts - ts % window_ms``, counters and
    duplicate detection), inlined, with the shared constants bound to locals. Late messages go through
    ``observe``.

    Args:
        msgs: Consumed messages (``confluent_kafka.Message`` or anything with its methods ``error``,
            ``topic``, ``partition``, ``offset``, ``timestamp``, ``headers``, ``value``).
        parts: State of each assigned ``(topic, partition)``; messages of other partitions are skipped.
        now_ms: Consume time, ms since epoch UTC (latency = ``now_ms`` - CreateTime).
        valid_pids: Producer ids known to be valid (see :func:`check_pid`); updated.
        on_partition: Called with ``(topic, partition)`` before the first message of each run of an
            assigned partition is counted (the consumer begins its transaction there).
        on_error: Called with each message whose ``error()`` is set (EOF included); may raise.
        dead_letter: Called as ``dead_letter(message, reason, detail)`` for a message that cannot be
            counted: reason ``no_timestamp`` or ``bad_stamp`` (a stamp that ``read`` rejects).

    Returns:
        Messages counted (late ones included; errors, dead letters and skipped messages excluded).
    """
    header, nbytes, order, limit = STAMP_HEADER_V1, SEQUENCE_BYTES, SEQUENCE_BYTEORDER, SEQUENCE_LIMIT
    cut = -nbytes  # a v1 stamp is producer_id || sequence (SEQUENCE_BYTES bytes)
    header2, idb, fast, hi_t, cont_t, min_t = STAMP_HEADER, PRODUCER_ID_BYTES, _STAMP_FAST, _HI, _CONT, _MIN
    from_le = int.from_bytes
    v2_raw: bytes | None = None  # the last v2 id's 8 bytes, and its text form v2_pid_
    v2_pid_ = b""
    # The previous valid v2 stamp's varint after its first byte (sequence >> 7, shared by 128 consecutive
    # sequences) and its value << 7: a stamp with the same tail only needs its first varint byte read.
    idb1 = idb + 1
    v2_tail: bytes | None = None
    v2_high = 0
    valid, ids = valid_pids, _V2_IDS
    received, duplicated, size, dirty, seqs_at, lats_at = RECEIVED, DUPLICATED, BYTES, DIRTY, SEQS, LATS
    last_topic: str | None = None
    last_part = -1
    st: PartitionCounts | None = None
    last: Any = None  # the run's last message of an assigned partition: its offset is committed
    wm = 1
    first_open = 0
    buckets: dict[tuple[int, bytes | None], list] = {}
    max_ts = -1
    n = 0
    # The previous message's open bucket: producers write record batches, so consecutive messages of a
    # partition mostly share (window, producer id); the bucket, its latency list's append and its sequence
    # set are then reused without a dict lookup (c_lo <= ts < c_hi is ts's window being c_lo).
    c_pid: bytes | None = None
    v1_pid: bytes | None = None  # the last v1 id validated
    c_lo = c_hi = 0  # empty range: no bucket yet
    b: list = []
    lats_append: Callable[[int], None] = b.append
    seqs: Any = None
    for m in msgs:
        if m.error() is not None:
            on_error(m)
            continue
        topic, part = m.topic(), m.partition()
        if part != last_part or topic != last_topic:
            if st is not None:
                st.watermark_ms = max(st.watermark_ms, max_ts)
                st.next_offset = last.offset() + 1
            last_topic, last_part = topic, part
            st = parts.get((topic, part))
            c_lo = c_hi = 0
            if st is None:  # not assigned any more (rebalance inside this batch)
                continue
            on_partition((topic, part))
            st.dirty = True
            wm = st.window_ms
            first_open = st.first_open_start_ms
            buckets = st.open
            max_ts = st.watermark_ms
        elif st is None:
            continue
        last = m
        ts_type, ts = m.timestamp()
        if ts_type != 1:  # not TIMESTAMP_CREATE_TIME
            if ts_type == 0:  # TIMESTAMP_NOT_AVAILABLE
                dead_letter(m, "no_timestamp", "message has no timestamp")
                continue
            st.log_append_time = True  # TIMESTAMP_LOG_APPEND_TIME: CreateTime is gone
        hdrs = m.headers()
        if hdrs:
            k0, stamp = hdrs[0]
            if k0 != header2 and k0 != header:
                found = stamp_of(hdrs)
                k0, stamp = found if found is not None else (None, None)
        else:
            k0 = stamp = None
        if k0 is None:
            pid = None
            seq = 0
        elif k0 == header2:  # v2: 8 id bytes || varint(sequence)
            if stamp is None:
                stamp = b""
            tail = stamp[idb1:]
            if tail == v2_tail:  # the varint's high groups of the previous stamp: valid, value v2_high
                b0 = stamp[idb]
                seq = v2_high | b0 & 0x7F if b0 & 0x80 else -1  # no continuation: tail is trailing bytes
            else:
                slen = len(stamp)
                x = from_le(stamp, "little") >> 64  # the varint's bytes as a little-endian int
                if slen <= fast and x & hi_t[slen] == cont_t[slen] and x >= min_t[slen]:
                    seq = x & 0x7F | x >> 1 & 0x3F80 | x >> 2 & 0x1FC000 | x >> 3 & 0xFE00000
                    if slen > 12:
                        seq |= x >> 4 & 0x7F0000000 | x >> 5 & 0x3F800000000
                else:
                    seq = v2_sequence(stamp[idb:]) if slen > idb else -1
                if seq > 0x7F:  # a valid varint of 2 or more bytes: its high groups are the next ones'
                    v2_tail, v2_high = tail, seq & ~0x7F
            if seq < 0:
                dead_letter(m, "bad_stamp", f"audit stamp header of {len(stamp)} bytes is malformed")
                continue
            raw = stamp[:idb]
            if raw != v2_raw:
                v2_raw, v2_pid_ = raw, ids.get(raw) or v2_pid(ids, raw)
            pid = v2_pid_
        else:  # v1: producer id || 8-byte sequence
            stamp = stamp or b""
            pid = stamp[:cut]
            seq = int.from_bytes(stamp[cut:], order)
            # v1_pid, when not None, is a valid v1 id, so a stamp that starts with it is longer than nbytes
            if seq >= limit or (
                pid != v1_pid and (len(stamp) <= nbytes or not (valid.get(pid) or check_pid(valid, pid)))
            ):
                dead_letter(m, "bad_stamp", f"audit stamp header of {len(stamp)} bytes is malformed")
                continue
            v1_pid = pid
        n += 1
        if ts > max_ts:
            max_ts = ts
        if not (c_lo <= ts < c_hi and pid == c_pid):
            start = ts - ts % wm
            if start < first_open:
                st.observe(ts, pid, seq, 0, now_ms - ts)  # late: on the closed window's counters
                continue
            b = buckets.get((start, pid))
            if b is None:
                b = buckets[(start, pid)] = new_bucket()
            b[dirty] = 1
            c_pid, c_lo, c_hi = pid, start, start + wm
            lats_append = b[lats_at].append
            seqs = b[seqs_at]
        b[received] += 1
        v = m.value()
        if v is not None:
            b[size] += len(v)
        lats_append(now_ms - ts)
        if pid is not None:
            if seq in seqs:
                b[duplicated] += 1
            else:
                seqs.add(seq)
    if st is not None:
        st.watermark_ms = max(st.watermark_ms, max_ts)
        st.next_offset = last.offset() + 1
    return n
