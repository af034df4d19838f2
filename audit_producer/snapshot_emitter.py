"""Which windows of the audited producer get a snapshot at a tick, which close, and what their snapshots say.

A window gets a snapshot when its counts changed since the last one (cumulative, so a lost snapshot is
healed by the next) and a final one when it closes: ``grace_ms`` after its end, once its messages are
settled (every delivery report in, or with ``delivery_reports="errors"`` the longest message timeout
past its last message) and, with the TCP drain wait, the bytes written for it are acknowledged by the
broker's TCP stack (docs/DESIGN.md, invariant 8). Each snapshot carries the configurations the window
ran with, its own network (D, L) and its deliveries per partition with their leaders.
"""

from __future__ import annotations

import os
import socket
from importlib import metadata
from typing import Any

import confluent_kafka

from audit_producer.accounting import is_accounted, next_tick_ms
from audit_producer.audit_topic_writer import AuditTopicWriter
from audit_producer.client_statistics import ClientStatistics
from audit_producer.config_history import ConfigHistory
from audit_producer.tcp_backlog import Mark, TcpSocket
from audit_producer.tcp_drain import TcpDrainWait
from audit_producer.window_counts import (
    ACCOUNTED,
    ACKED,
    DIRTY,
    FAILED,
    FIRST_SEQ,
    LAST_PRODUCE_MS,
    LAST_SEQ,
    SENT,
    partition_deliveries,
    window_snapshots,
)
from audit_record import ProducerIdentity, now_ms
from audit_record.stamp import version_of

LIBRARY = "kafka-audit-python"
"""The audited client library's name in the snapshots' producer identity."""

SETTLE_MARGIN_MS = 2_000
"""With ``delivery_reports="errors"``: a window settles this long after its messages' timeout, ms."""

RETIRED_RETENTION_MS = 3_600_000
"""A closed window's counts are kept this long after its end for late messages, ms (the JVM's
``ProducerAuditor.RETIRED_RETENTION_MS``, the librdkafka plugin's)."""

RETIRED_MAX = 1_000
"""At most this many closed windows are kept (the oldest go first; the JVM's default ``max.windows``)."""

WindowKey = tuple[str, int]
"""A window of the audited producer: (topic, window start in ms since the epoch UTC)."""


class SnapshotEmitter:
    """The snapshots of the audited producer's open windows, sent to the audit topic at each tick.

    Args:
        windows: The open windows' count lists by (topic, start), shared with the producer (which adds
            new windows); closed windows are removed from it here.
        window_ms: Window length, ms.
        grace_ms: A window closes no earlier than this long after its end, ms.
        errors_only: Whether librdkafka reports failed deliveries only (``delivery_reports="errors"``).
        client_id: ``client.id`` of the audited producer.
        producer_id: The audited producer's instance id (of the stamp).
        history: The configurations by sequence number (autotune's).
        statistics: The network and partition leaders from librdkafka's statistics.
        tcp_drain: The TCP drain wait of the windows (its backlog None: no wait).
        audit_topic: Where the snapshots go.
    """

    def __init__(
        self,
        *,
        windows: dict[WindowKey, list[Any]],
        window_ms: int,
        grace_ms: int,
        errors_only: bool,
        client_id: str,
        producer_id: str,
        history: ConfigHistory,
        statistics: ClientStatistics,
        tcp_drain: TcpDrainWait,
        audit_topic: AuditTopicWriter,
    ) -> None:
        self.windows = windows
        self.window_ms = window_ms
        self.grace_ms = grace_ms
        self.errors_only = errors_only
        self.client_id = client_id
        self.producer_id = producer_id
        self.history = history
        self.statistics = statistics
        self.tcp_drain = tcp_drain
        self.audit_topic = audit_topic
        self.identity = process_identity(client_id, producer_id)
        self.retired: dict[WindowKey, list[Any]] = {}
        """Closed windows' count lists, kept for late messages (:meth:`reopen`)."""

    def reopen(self, key: WindowKey) -> list[Any] | None:
        """Return the count list of closed window ``key`` for a late message, or None if none is kept.

        A message whose CreateTime lies in a window already closed (a copy keeping its source's timestamp,
        a replay) continues the window's counts: a window counted again from zero would send snapshots
        under the same key with the late messages alone, and the newest snapshot per key is the one the
        verifier and the job read. The caller puts the list back into :attr:`windows`; the late
        message's count marks it changed and the next tick works out whether it is accounted for, so its
        next final snapshot counts everything.
        """
        return self.retired.pop(key, None)

    def _retire(self, key: WindowKey, w: list[Any], now: int) -> None:
        """Keep closed window ``key``'s counts; forget those past :data:`RETIRED_RETENTION_MS` or the cap."""
        self.retired[key] = w
        horizon = now - RETIRED_RETENTION_MS - self.window_ms
        for old in [k for k in self.retired if k[1] < horizon]:
            del self.retired[old]
        while len(self.retired) > RETIRED_MAX:
            del self.retired[min(self.retired, key=lambda k: k[1])]

    def settled(self, w: list[Any], now: int, held: int, timeout_ms: int) -> bool:
        """Whether window ``w``'s messages have all been reported on (or timed out), not counting TCP.

        Args:
            w: The window's count list.
            now: The caller's clock, ms since the epoch UTC.
            held: Messages the inner producers still queue or have in flight.
            timeout_ms: The longest ``message.timeout.ms`` of the inner producers, ms.
        """
        if not self.errors_only:
            return w[ACKED] + w[FAILED] >= w[SENT]
        return held == 0 or now - w[LAST_PRODUCE_MS] > timeout_ms + SETTLE_MARGIN_MS

    def emit_due(
        self, now: int, held: int, *, close_all: bool, timeout_ms: int, next_sequence: int
    ) -> list[list[Any]]:
        """Send the snapshots due at ``now``; close the windows past end + grace whose messages are settled.

        Args:
            now: The caller's clock, ms since the epoch UTC.
            held: Messages the inner producers still queue or have in flight.
            close_all: Close every window (the producer is closing): no TCP drain wait.
            timeout_ms: The longest ``message.timeout.ms`` of the inner producers, ms.
            next_sequence: The sequence number the next message will get.

        Returns:
            The count lists of the windows closed (removed from :attr:`windows`).
        """
        closed: list[list[Any]] = []
        drain = self.tcp_drain
        view: tuple[list[TcpSocket], Mark] | None = None  # the socket table and its mark, once per tick
        for (topic, start), w in list(self.windows.items()):
            end = start + self.window_ms
            settled = self.settled(w, now, held, timeout_ms)
            if settled and drain.backlog is not None and not close_all:
                if view is None:
                    view = drain.view()
                settled = drain.drained((topic, start), w, now, *view)
            closing = close_all or (now >= end + self.grace_ms and settled)
            in_flight = drain.in_flight_bytes((topic, start))
            accounted = int(is_accounted(w, now, end, self.errors_only, in_flight, close_all))
            if accounted != w[ACCOUNTED]:  # a snapshot says so now (audit_producer.accounting)
                w[ACCOUNTED], w[DIRTY] = accounted, 1
            if not (w[DIRTY] or closing):
                continue
            if self.errors_only:
                in_flight = 0 if settled else held
                w[ACKED] = max(0, w[SENT] - w[FAILED] - in_flight)
            self.emit(topic, start, end, w, final=closing)
            w[DIRTY] = 0
            if closing:
                del self.windows[(topic, start)]
                drain.forget((topic, start))
                self._retire((topic, start), w, now)
                closed.append(w)
        if len(self.history) > 1:
            oldest = min((w[FIRST_SEQ] for w in self.windows.values()), default=next_sequence)
            self.history.forget_before(oldest)
        self.statistics.forget_before(min((start for _, start in self.windows), default=now))
        self.audit_topic.poll()
        return closed

    def next_tick_ms(self, now: int, interval_ms: int) -> int:
        """Return when the next snapshots are due (:func:`audit_producer.accounting.next_tick_ms`), ms."""
        return next_tick_ms(self.windows, self.window_ms, self.grace_ms, self.errors_only, now, interval_ms)

    def emit(self, topic: str, start: int, end: int, w: list[Any], final: bool) -> None:
        """Send the snapshots of one window (:func:`~audit_producer.window_counts.window_snapshots`).

        Args:
            topic: The window's topic.
            start: The window's start, ms since the epoch UTC.
            end: The window's end (exclusive), ms since the epoch UTC.
            w: The window's count list.
            final: Whether the window closes with these snapshots.
        """
        for record in window_snapshots(
            w,
            client_id=self.client_id,
            producer_id=self.producer_id,
            topic=topic,
            start=start,
            end=end,
            final=final,
            configs=self.history.configs_between(w[FIRST_SEQ], w[LAST_SEQ]),
            network=self.statistics.network_during(start, end),
            in_flight_bytes=self.tcp_drain.in_flight_bytes((topic, start)),
            partitions=partition_deliveries(w, self.statistics.leaders, topic, start, end),
            identity=self.identity,
            accounted=bool(w[ACCOUNTED]),
        ):
            self.audit_topic.send(record)


def process_identity(client_id: str, producer_id: str) -> ProducerIdentity:
    """Return who the producer instance ``producer_id`` of this process is (its snapshots carry it).

    Args:
        client_id: The producer's ``client.id``.
        producer_id: Its instance id (:func:`audit_record.stamp.new_producer_id`), drawn now.

    Raises:
        MalformedStampError: if ``producer_id`` is not a valid id.
    """
    try:
        version = metadata.version("kafka-audit")
    except metadata.PackageNotFoundError:  # run from a source tree without an install
        version = "unknown"
    return ProducerIdentity(
        client_id=client_id,
        host=socket.gethostname(),
        process_id=os.getpid(),
        started_at_ms=now_ms(),
        library=LIBRARY,
        library_version=f"{version} (librdkafka {confluent_kafka.libversion()[0]})",
        stamp_version=version_of(producer_id),
    )


__all__ = [
    "LIBRARY",
    "RETIRED_MAX",
    "RETIRED_RETENTION_MS",
    "SETTLE_MARGIN_MS",
    "SnapshotEmitter",
    "WindowKey",
    "process_identity",
]
