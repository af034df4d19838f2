"""From per-partition counts to audit snapshots: shared by the audit consumer and the AuditedConsumer.

Both count with :mod:`audit_consumer.counts` (:func:`~audit_consumer.counts.count_batch` into
:class:`~audit_consumer.counts.PartitionCounts`) and emit, for every bucket that changed since the last
emission, one cumulative :class:`~audit_record.AuditRecord` (``docs/DESIGN.md``, invariant 2). Only
the tier, the source and where the records go differ: ``cluster:<name>`` / the audit consumer's group
(:mod:`audit_consumer.consumer`), ``consumer:<group>`` / the application's group
(:mod:`audit_consumer.audited`).

A replicated topic (MirrorMaker 2's ``A.orders``) is reported under its source topic (``orders``): the
``topic`` of :func:`snapshot_record` is the name after :class:`kafka_plumbing.replication.ReplicationNaming`.

Each snapshot carries the reader's position in its partition (``read_offsets``: the next offset to read,
every message below it counted), so the job can prove a window final as soon as the tier has read past
the producers' acknowledged offsets (docs/DESIGN.md, invariant 8). A replicated copy's offsets are not
the producers' (MirrorMaker 2 does not keep offsets): its snapshots carry none (:func:`read_position`).

Each snapshot also carries the tier's freshness histogram of the window (``freshness_counts``,
:mod:`audit_record.freshness`): per message, the reader's consume time (the poll that returned it) minus
its CreateTime, the same latency as ``latency_p50_ms``. That is when the tier held the message: the
audit consumer's read (cluster tier; a MirrorMaker 2 target cluster's audit consumer for a replica
tier) or the application's poll (``consumer:<group>``). The broker's append time is not used: a Kafka
record carries one timestamp, and with ``message.timestamp.type=LogAppendTime`` the broker's append time
replaces CreateTime, so there is nothing to subtract from; such partitions report freshness as not
measured (empty).
"""

from __future__ import annotations

from collections.abc import Iterator

from audit_consumer import counts
from audit_consumer.counts import PartitionCounts, fold_latencies, unique_of
from audit_consumer.latency import percentile
from audit_record import AuditRecord, ReadOffset


def dirty_buckets(
    st: PartitionCounts,
    closed_now: set[tuple[int, bytes | None]],
    stale_after_ms: int | None,
) -> Iterator[tuple[int, bytes | None, list, bool]]:
    """Yield ``(window_start_ms, producer_id, bucket, final)`` of every changed bucket of a partition.

    Pending latencies are folded first (those above ``stale_after_ms`` count as stale; freshness is
    dropped, not measured, in a partition with LogAppendTime timestamps); the bucket's
    dirty flag is cleared once the caller resumes the generator (emit before asking for the next).
    ``final`` is True for closed windows and for those in ``closed_now`` (just closed by ``advance``).

    Args:
        st: The partition's counts.
        closed_now: ``(window_start_ms, producer_id)`` of the windows ``st.advance`` closed now.
        stale_after_ms: Timeliness S of the topic, ms (None: no stale counting).
    """
    for table, final in ((st.open, False), (st.closed, True)):
        for (start, pid), b in table.items():
            if not b[counts.DIRTY]:
                continue
            if st.log_append_time:
                b[counts.FRESH] = None  # CreateTime replaced by the broker: freshness not measured
            fold_latencies(b, stale_after_ms)
            yield start, pid, b, final or (start, pid) in closed_now
            b[counts.DIRTY] = 0


def read_position(st: PartitionCounts, counted_topic: str) -> int | None:
    """Return the reader's position in ``st``'s partition for a snapshot's ``read_offsets`` (None: none).

    Args:
        st: The partition's counts; ``next_offset`` is the next offset to read (-1: nothing read yet).
        counted_topic: The topic the counts are reported under: a name other than ``st.topic`` (a
            MirrorMaker 2 copy under its source topic) means the offsets are the copy's, not those the
            producers were acknowledged with, so none is reported.
    """
    if counted_topic != st.topic or st.next_offset < 0:
        return None
    return st.next_offset


def snapshot_record(
    tier: str,
    source: str,
    topic: str,
    partition: int,
    window_ms: int,
    start: int,
    pid: bytes | None,
    bucket: list,
    final: bool,
    position: int | None = None,
) -> AuditRecord:
    """Return the cumulative snapshot of one bucket (one (topic, partition, window, producer id)).

    Args:
        tier: ``cluster:<name>`` or ``consumer:<group>``.
        source: The counting group (snapshots are keyed by it, so counts follow a partition that moves).
        topic: The topic the counts are reported under (the source topic of a replicated copy).
        partition: The partition counted.
        window_ms: Window length, ms.
        start: Window start, ms since epoch UTC.
        pid: The stamp's producer id bytes, None for unaudited messages.
        bucket: The bucket (:func:`audit_consumer.counts.new_bucket` layout), latencies folded.
        final: Whether the window is closed at this tier.
        position: The reader's position in the partition now (:func:`read_position`; None: not said).
    """
    hist = bucket[counts.HIST]
    received = bucket[counts.RECEIVED]
    return AuditRecord(
        tier=tier,
        source=source,
        producer_id=pid.decode() if pid is not None else None,
        topic=topic,
        partition=partition,
        window_start_ms=start,
        window_end_ms=start + window_ms,
        final=final,
        received=received,
        unique=unique_of(pid, bucket),
        duplicated=bucket[counts.DUPLICATED],
        late=bucket[counts.LATE],
        stale=bucket[counts.STALE],
        unaudited=received if pid is None else 0,
        bytes=bucket[counts.BYTES],
        latency_p50_ms=percentile(hist, 0.5),
        latency_p99_ms=percentile(hist, 0.99),
        latency_max_ms=float(bucket[counts.LAT_MAX]) if received else None,
        read_offsets=[] if position is None else [ReadOffset(partition=partition, offset=position)],
        freshness_counts=list(fresh) if (fresh := bucket[counts.FRESH]) is not None else [],
    )
