"""When an audited producer's window is accounted for, and when to look next (issue 37).

A window is *accounted for* once every message the producer stamped in it has a delivery report -
acknowledged, with the partition and offset the broker gave it, or failed - and the producer's TCP
connections hold nothing more of it (:class:`~audit_producer.tcp_drain.TcpDrainWait`: every byte written
when the last report came in is acknowledged by the brokers' TCP stacks, ``in_flight_bytes`` = 0), and
the window has ended on the producer's clock. A later ``produce()`` without an explicit timestamp cannot
stamp a message into it; one with an explicit timestamp in the window makes it unaccounted again until
that message is reported too, and may come after a tier declared the window final (it is then late, as
after the timeout rule). Its snapshot then says ``accounted`` with the highest acknowledged offset per
partition (``PartitionDelivery.last_offset``), and a tier that has read every partition past those
offsets holds every message of the window that will ever exist, unless one failed (a failed message
may still land: librdkafka gives up on a request, not on the bytes already sent) or acks=0 (no
offsets) - docs/DESIGN.md, invariant 8. The job declares such a window final without waiting
``message.timeout.ms`` (:mod:`spark_streaming.finality_proof`).

A producer that cannot watch its connections (``in_flight_bytes`` null: no ``sock_diag``, or the TCP
drain wait turned off) never says ``accounted``: a request that timed out may still be on the wire, and
its copy could land after a tier has read past the offsets. With ``delivery_reports="errors"`` it never
does either: successful reports, and their offsets, are not delivered.

So that the snapshot saying so goes out promptly, the producer looks at a window again
:data:`ACCOUNTED_CHECK_MS` after its end, and as often while it waits for its last reports during its
grace (:func:`next_tick_ms`), not only every ``snapshot_interval_ms``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from audit_producer.window_counts import ACCOUNTED, ACKED, FAILED, SENT

ACCOUNTED_CHECK_MS = 250
"""How long after a window's end (and how often during its grace, while not accounted) the producer looks
whether it is accounted for, ms: a healthy cluster's delivery reports come within milliseconds."""


def is_accounted(
    w: list[Any], now: int, end: int, errors_only: bool, in_flight_bytes: int | None, closing: bool = False
) -> bool:
    """Return True if window ``w`` is accounted for at ``now`` (see the module docstring).

    Args:
        w: The window's count list (:mod:`audit_producer.window_counts`), its hot counts flushed.
        now: The producer's clock, ms since the epoch UTC.
        end: The window's end (exclusive), ms since the epoch UTC.
        errors_only: Whether librdkafka reports failed deliveries only (``delivery_reports="errors"``).
        in_flight_bytes: The window's bytes not yet acknowledged by TCP, as its snapshot reports them
            (None: the connections are not watched), read after the tick's drain check.
        closing: The producer is closing (``close()``): it stamps no message after these, so a window
            that has not ended yet is complete too.
    """
    return (
        not errors_only
        and (closing or now >= end)
        and w[ACKED] + w[FAILED] >= w[SENT]
        and in_flight_bytes == 0
    )


def next_tick_ms(
    windows: Mapping[tuple[str, int], list[Any]],
    window_ms: int,
    grace_ms: int,
    errors_only: bool,
    now: int,
    interval_ms: int,
) -> int:
    """Return when the producer should next emit snapshots, ms since the epoch UTC.

    ``now + interval_ms`` (the snapshot interval), or earlier: :data:`ACCOUNTED_CHECK_MS` after the end of
    an open window not yet accounted for, and every :data:`ACCOUNTED_CHECK_MS` while such a window is
    within ``grace_ms`` of its end (its last delivery reports or TCP acknowledgements are due).

    Args:
        windows: The open windows' count lists by (topic, window start in ms).
        window_ms: Window length, ms.
        grace_ms: The producer's grace after a window's end, ms.
        errors_only: ``delivery_reports="errors"``: no window is ever accounted for, nothing earlier.
        now: The producer's clock, ms since the epoch UTC.
        interval_ms: The snapshot interval, ms.
    """
    due = now + interval_ms
    if errors_only:
        return due
    for (_, start), w in windows.items():
        if w[ACCOUNTED]:
            continue
        end = start + window_ms
        if end > now:
            due = min(due, end + ACCOUNTED_CHECK_MS)
        elif now - end < grace_ms:
            due = min(due, now + ACCOUNTED_CHECK_MS)
    return due


__all__ = ["ACCOUNTED_CHECK_MS", "is_accounted", "next_tick_ms"]
