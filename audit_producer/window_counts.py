"""An audited producer's counts of one (topic, window): their layout, delivery callbacks and snapshots.

The counts live in a plain list (:func:`new_window`), not an object, because the per-message hot path of
:class:`~audit_producer.AuditedProducer` adds to them; the constants below index it. Each (window, inner
producer) has its own delivery-report callback (:func:`window_counter`) bound to the window's list, so a
report needs no lookup. When the producer emits, :func:`window_snapshots` turns the list into the
window's audit records (tier ``producer``), one per configuration the window ran with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, Message

from audit_producer.leaders import LeaderHistory
from audit_record import (
    PRODUCER_TIER,
    AuditRecord,
    NetworkStats,
    PartitionDelivery,
    ProducerConfig,
    ProducerIdentity,
)

# Indices into the per-window count list. The callbacks' three hold the window's delivery-report
# callbacks for the running inner producer (see "The hot path" in AuditedProducer).
(
    SENT,  # messages produced
    ACKED,  # successful delivery reports
    FAILED,  # failed delivery reports
    BYTES,  # value bytes produced
    FIRST_SEQ,  # sequence number of the window's first message
    LAST_SEQ,  # sequence number of its last message
    LAST_PRODUCE_MS,  # when a message was last produced into it, ms since the epoch UTC
    DIRTY,  # 1: changed since the last snapshot
    COUNT_CB,  # the callback that only counts
    REPORT_CB,  # the callback given with each message (counts, then the config's on_delivery)
    CB_GENERATION,  # the inner producer the callbacks are for (its first sequence number)
    ACKED_BY,  # partition -> successful reports
    FAILED_BY,  # (partition, librdkafka error name) -> failed reports (docs/DESIGN.md, "Attribution")
    LAST_OFFSET_BY,  # partition -> highest offset a successful report gave (issue 37: finality by proof)
    ACCOUNTED,  # 1: the last snapshot said the window is accounted for (audit_producer.accounting)
) = range(15)

CONFIG_MARKER = "#config-"
"""Source suffix of a window's extra configuration snapshots (``<client.id>#config-<n>``, n = 1, 2, ...)."""

DeliveryCallback = Callable[[KafkaError | None, Message], None]
"""A librdkafka delivery-report callback: ``(error or None, message)``."""


def new_window(seq: int, now: int) -> list[Any]:
    """Return the count list of a window whose first message gets sequence number ``seq`` at ``now`` (ms)."""
    return [0, 0, 0, 0, seq, seq, now, 0, None, None, None, {}, {}, {}, 0]


def chain(count: DeliveryCallback, callback: Callable[..., None]) -> DeliveryCallback:
    """Return a delivery callback that counts the report, then calls the caller's per-call callback."""

    def report(err: KafkaError | None, msg: Message) -> None:
        count(err, msg)
        callback(err, msg)

    return report


def count_failure(w: list[Any], err: KafkaError, msg: Message) -> None:
    """Count a failed delivery in window ``w``, by partition and error.

    The report names the partition (-1 when the message failed before librdkafka assigned it one:
    confluent-kafka's ``Message.partition()`` gives None then, as for a message that timed out or was
    purged before the topic's metadata arrived) and the error (``KafkaError.name()``).
    """
    w[FAILED] += 1
    w[DIRTY] = 1
    by: dict[tuple[int, str], int] = w[FAILED_BY]
    partition = msg.partition()
    key = (-1 if partition is None else partition, err.name())
    by[key] = by.get(key, 0) + 1


def window_counter(
    w: list[Any],
    generation: int,
    then: DeliveryCallback | None,
    failed: Callable[[list[Any], int, KafkaError, Message], None],
) -> DeliveryCallback:
    """Return the delivery callback of window ``w``'s messages: count the report in ``w``, then ``then``.

    Args:
        w: The window's count list.
        generation: First sequence number of the inner producer the messages are given to.
        then: The application's callback to call after counting (None: none).
        failed: Called as ``failed(w, generation, err, msg)`` for a failed report (it counts it).
    """
    acked_by: dict[int, int] = w[ACKED_BY]
    last_by: dict[int, int] = w[LAST_OFFSET_BY]
    if then is None:

        def count(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                w[ACKED] += 1
                w[DIRTY] = 1
                p = msg.partition()
                acked_by[p] = acked_by.get(p, 0) + 1
                o = msg.offset()  # acks=0: librdkafka gives no offset (-1001 or None)
                if o is not None and o > last_by.get(p, -1):
                    last_by[p] = o
            else:
                failed(w, generation, err, msg)

        return count

    def count_then(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            w[ACKED] += 1
            w[DIRTY] = 1
            p = msg.partition()
            acked_by[p] = acked_by.get(p, 0) + 1
            o = msg.offset()
            if o is not None and o > last_by.get(p, -1):
                last_by[p] = o
        else:
            failed(w, generation, err, msg)
        then(err, msg)

    return count_then


def partition_deliveries(
    w: list[Any], leaders: LeaderHistory, topic: str, start: int, end: int
) -> list[PartitionDelivery]:
    """Return window ``w``'s delivery reports per partition (by partition), with each one's leader(s).

    Each entry's ``last_offset`` is the highest offset a successful report of the window gave in the
    partition (None: none acknowledged, or acks=0, whose reports carry no offset).

    Args:
        w: The window's count list.
        leaders: The partition leaders seen in the statistics.
        topic: The window's topic.
        start: The window's start, ms since the epoch UTC.
        end: The window's end (exclusive), ms since the epoch UTC.
    """
    acked_by: dict[int, int] = w[ACKED_BY]
    failed_by: dict[tuple[int, str], int] = w[FAILED_BY]
    out: dict[int, PartitionDelivery] = {}
    for (partition, error), n in list(failed_by.items()):
        p = out.get(partition) or out.setdefault(partition, PartitionDelivery(partition=partition))
        p.failed += n
        p.failed_by_error[error] = p.failed_by_error.get(error, 0) + n
    for partition, n in list(acked_by.items()):
        p = out.get(partition) or out.setdefault(partition, PartitionDelivery(partition=partition))
        p.acknowledged = n
    for partition, offset in list(w[LAST_OFFSET_BY].items()):
        p = out.get(partition) or out.setdefault(partition, PartitionDelivery(partition=partition))
        p.last_offset = offset
    for partition, p in out.items():
        p.leader, p.leaders = leaders.during(topic, partition, start, end)
    return [out[k] for k in sorted(out)]


def window_snapshots(
    w: list[Any],
    *,
    client_id: str,
    producer_id: str,
    topic: str,
    start: int,
    end: int,
    final: bool,
    configs: Sequence[ProducerConfig],
    network: NetworkStats,
    in_flight_bytes: int | None,
    partitions: list[PartitionDelivery],
    identity: ProducerIdentity | None = None,
    accounted: bool = False,
) -> list[AuditRecord]:
    """Return the snapshots of one window: its counts, and one more per extra configuration it ran with.

    The window's configurations are those of its sequence numbers ``first_sequence..last_sequence``
    (:class:`~audit_producer.config_history.ConfigHistory`); its snapshot (key
    ``producer|<client.id>|...``) carries the first, the one it started with, and all its counts.
    A window that ran with more (an autotune swap while it was open) gets one more snapshot per
    extra configuration, source ``<client.id>#config-<n>``, with that configuration and every count
    0, final when the window's is. Reconciliation counts distinct configurations over a window's
    producer snapshots (``producer_configs`` in the window result, ``spark_streaming.reconcile``),
    so it sees > 1, while sums over snapshots (sent, acknowledged, failed, bytes) and the producer
    count (distinct producer ids) stay exact. This needs no schema change: records stay readable
    by every reader, and a producer that never changes configuration writes exactly what it wrote
    before. Readers that take one snapshot per (producer id, window) must add the snapshots of a
    producer id instead (their extras add 0).

    Args:
        w: The window's count list.
        client_id: The producer's ``client.id`` (the snapshots' source).
        producer_id: The producer instance id.
        topic: The window's topic.
        start: The window's start, ms since the epoch UTC.
        end: The window's end (exclusive), ms since the epoch UTC.
        final: Whether the window is closed (no snapshot follows).
        configs: The configurations the window ran with, first the one it started with (at least one).
        network: The window's network statistics.
        in_flight_bytes: Bytes not yet acknowledged by TCP (None: not watched).
        partitions: :func:`partition_deliveries` of the window.
        identity: Who the producer instance is (on the window's snapshot; None: not sent).
        accounted: Every message of the window has a delivery report and the TCP connections hold
            nothing more of it (:mod:`audit_producer.accounting`); on the window's snapshot only.
    """
    records = [
        AuditRecord(
            tier=PRODUCER_TIER,
            source=client_id,
            producer_id=producer_id,
            topic=topic,
            window_start_ms=start,
            window_end_ms=end,
            final=final,
            sent=w[SENT],
            acknowledged=min(w[ACKED], w[SENT] - w[FAILED]),
            failed=w[FAILED],
            bytes=w[BYTES],
            in_flight_bytes=in_flight_bytes,
            first_sequence=w[FIRST_SEQ],
            last_sequence=w[LAST_SEQ],
            producer_config=configs[0],
            network=network,
            partitions=partitions,
            producer_identity=identity,
            accounted=accounted,
        )
    ]
    for n, config in enumerate(configs[1:], 1):
        records.append(
            AuditRecord(
                tier=PRODUCER_TIER,
                source=f"{client_id}{CONFIG_MARKER}{n}",
                producer_id=producer_id,
                topic=topic,
                window_start_ms=start,
                window_end_ms=end,
                final=final,
                producer_config=config,
                network=network,
            )
        )
    return records
