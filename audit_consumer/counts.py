"""Per-partition audit counts: the audit consumer's state, free of Kafka so it can be unit-tested.

A partition's state holds, per (window, producer id), a bucket of counters and the set of sequence
numbers seen (a 64-bit Roaring bitmap: compact for runs, exact). A message whose (producer id, sequence)
is already in the set is a duplicate. A window closes when the partition's event-time watermark passes
its end plus the grace; then its sequence set is dropped (memory stays bounded) and only its counters
are kept, for ``late_retention_ms``, to count late messages.

The watermark is the largest CreateTime seen in the partition; while the consumer is caught up
(partition EOF) it also follows the wall clock, so an idle partition's windows close too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyroaring import BitMap64

from audit_consumer import latency

# Bucket layout (a list: this is the per-message hot path).
RECEIVED, DUPLICATED, BYTES, LATE, DIRTY, SEQS, LATS, HIST, STALE, LAT_MAX, UNIQUE = range(11)


def new_bucket() -> list:
    """Return an empty open bucket: counters, sequence set, pending latencies, histogram."""
    return [0, 0, 0, 0, 1, BitMap64(), [], [0] * latency.N_BUCKETS, 0, 0, 0]


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

    @property
    def first_open_start_ms(self) -> int:
        """Smallest window start that is still open; messages of earlier windows are late."""
        h = self.closed_horizon_ms
        return h - h % self.window_ms if h >= 0 else -1

    def observe(
        self, timestamp_ms: int, producer_id: bytes | None, sequence: int, size: int, latency_ms: int
    ) -> None:
        """Count one message (the audit consumer inlines this loop; this is the reference version).

        Args:
            timestamp_ms: CreateTime, ms since epoch UTC.
            producer_id: Stamp's producer id bytes, or None for an unaudited message.
            sequence: Stamp's sequence number (ignored when unaudited).
            size: Value bytes.
            latency_ms: Consume time minus CreateTime, ms.
        """
        start = timestamp_ms - timestamp_ms % self.window_ms
        self.dirty = True
        if timestamp_ms > self.watermark_ms:
            self.watermark_ms = timestamp_ms
        if start < self.first_open_start_ms:
            b = self.closed.get((start, producer_id))
            if b is None:
                b = self.closed[(start, producer_id)] = new_bucket()
                b[SEQS] = None
            b[LATE] += 1
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

    def advance(self, now_ms: int | None, late_retention_ms: int) -> list[tuple[int, bytes | None, list]]:
        """Close every open window whose end + grace <= watermark; expire old closed counters.

        Args:
            now_ms: Wall-clock time if the consumer is caught up on this partition (EOF), else None.
            late_retention_ms: How long closed counters are kept, ms after the window's end.

        Returns:
            ``(window_start_ms, producer_id, bucket)`` of each window closed now (emit them as final).
        """
        wm = self.watermark_ms if now_ms is None else max(self.watermark_ms, now_ms)
        if wm < 0:
            return []
        horizon = wm - self.grace_ms
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


def unique_of(producer_id: bytes | None, bucket: list) -> int:
    """Distinct (producer id, sequence) pairs in a bucket; 0 for the unaudited bucket."""
    if producer_id is None:
        return 0
    seqs = bucket[SEQS]
    return len(seqs) if seqs is not None else bucket[UNIQUE]


def fold_latencies(bucket: list, stale_after_ms: int | None) -> None:
    """Move pending latencies into the histogram; count those above timeliness S as stale."""
    lats = bucket[LATS]
    if not lats:
        return
    latency.add_all(bucket[HIST], lats)
    top = max(lats)
    if top > bucket[LAT_MAX]:
        bucket[LAT_MAX] = top
    if stale_after_ms is not None:
        bucket[STALE] += sum(1 for x in lats if x > stale_after_ms)
    bucket[LATS] = []
