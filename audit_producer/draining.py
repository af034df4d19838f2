"""Inner producers replaced by a configuration change, kept until their messages have delivery reports.

librdkafka cannot change ``acks``, ``batch.num.messages``, ``linger.ms`` or ``message.timeout.ms`` of a
live handle, so an autotuned producer swaps in a new inner ``confluent_kafka.Producer`` (docs/DESIGN.md,
"Autotuned producer"). The old one still holds messages in its queue or in flight; it is polled from
the audited producer's ``poll()``, ``flush()`` and ticks, so its delivery reports land in the same
per-window counts, and closed once it is empty. librdkafka reports every message within its
``message.timeout.ms``, so by its deadline (swap time + that timeout + a margin) it is empty; if it is
not (``message.timeout.ms`` = 0, infinite), what is left is purged, which delivers a failure report
(``_PURGE_QUEUE`` / ``_PURGE_INFLIGHT``) for each message before the handle is closed: every message
gets exactly one report either way.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

DRAIN_MARGIN_MS = 5_000
"""Kept this long past an old producer's ``message.timeout.ms`` before what is left is purged, ms."""
INFINITE_TIMEOUT_DRAIN_MS = 600_000
"""Drain deadline for a producer with ``message.timeout.ms`` = 0 (librdkafka: infinite), ms."""


def drain_deadline_ms(now_ms: int, message_timeout_ms: int) -> int:
    """Return when an inner producer swapped out at ``now_ms`` is purged and closed, ms since the epoch.

    Args:
        now_ms: The swap time, ms since the epoch UTC.
        message_timeout_ms: Its librdkafka ``message.timeout.ms``, ms (0 = infinite).
    """
    return now_ms + (message_timeout_ms or INFINITE_TIMEOUT_DRAIN_MS) + DRAIN_MARGIN_MS


@dataclass(slots=True)
class OldProducer:
    """One replaced inner producer.

    Attributes:
        producer: The ``confluent_kafka.Producer`` (anything with ``poll``, ``flush``, ``len``,
            ``purge``, ``close``).
        deadline_ms: Purge and close it at this time at the latest, ms since the epoch UTC.
        label: For logs (the control version it ran).
        message_timeout_ms: Its librdkafka ``message.timeout.ms``, ms (0 = infinite).
        pinned: Kept open even when empty: the configuration a new one rolls back to while that one is
            on probation.
        purged: Past its deadline, what it held was purged; its failure reports are being served.
    """

    producer: Any
    deadline_ms: int
    label: str
    message_timeout_ms: int = 0
    pinned: bool = False
    purged: bool = False


class Draining:
    """The replaced inner producers that still hold messages (or are pinned for a rollback)."""

    def __init__(self) -> None:
        self._old: list[OldProducer] = []
        self._closing: list[threading.Thread] = []

    def __bool__(self) -> bool:
        return bool(self._old)

    def add(
        self, producer: Any, deadline_ms: int, label: str, message_timeout_ms: int = 0, pinned: bool = False
    ) -> None:
        """Keep ``producer`` until it is empty (or its deadline passes) and not pinned."""
        self._old.append(OldProducer(producer, deadline_ms, label, message_timeout_ms, pinned))

    def take(self, producer: Any) -> bool:
        """Remove ``producer`` (to make it the active one again, a rollback); True if it was here."""
        for i, old in enumerate(self._old):
            if old.producer is producer:
                del self._old[i]
                return True
        return False

    def unpin(self) -> None:
        """End the probation: nothing is kept for a rollback any more."""
        for old in self._old:
            old.pinned = False

    def max_message_timeout_ms(self) -> int:
        """Return the longest ``message.timeout.ms`` of the replaced producers, ms (0: there are none)."""
        return max((old.message_timeout_ms for old in self._old), default=0)

    def in_flight(self) -> int:
        """Messages the replaced producers still hold (queued, in flight, or reports not yet served)."""
        return sum(len(old.producer) for old in self._old)

    def poll(self) -> int:
        """Serve the replaced producers' delivery reports (non-blocking); return how many were served."""
        return sum(old.producer.poll(0) for old in self._old)

    def flush(self, timeout_s: float = -1) -> int:
        """Wait for the replaced producers' messages (at most ``timeout_s`` s in all; < 0: no limit).

        Returns:
            Messages still held when the time ran out (0 when everything has a delivery report).
        """
        deadline = None if timeout_s < 0 else time.monotonic() + timeout_s
        left = 0
        for old in self._old:
            if deadline is None:
                left += old.producer.flush()
            else:
                left += old.producer.flush(max(0.0, deadline - time.monotonic()))
        return left

    def reap(self, now_ms: int) -> int:
        """Let go of the replaced producers that are done (empty, or purged after their deadline); no waits.

        A producer past its deadline that still holds messages is purged without waiting; the purge's
        failure reports are served by the following polls (the caller's thread), so they land in the window
        counts like any report. One that holds nothing is closed on a thread of its own: ``close()`` tears
        its connections down, which through a lossy link can take many seconds, and eight producers closing
        one after another on the caller's thread stalled a load for minutes; with nothing held no callback
        is left to run on that thread.

        Returns:
            How many were let go (their close started; :meth:`join` waits for it).
        """
        closed = 0
        for old in list(self._old):
            old.producer.poll(0)
            held = len(old.producer)
            if old.pinned or (held and now_ms < old.deadline_ms):
                continue  # pinned: kept for a rollback until the probation ends (bounded in time)
            if held and not old.purged:
                log.warning(
                    "inner producer of %s still holds %d messages past its message.timeout.ms: purging "
                    "them (each gets a failure delivery report)",
                    old.label,
                    held,
                )
                old.producer.purge(in_queue=True, in_flight=True, blocking=False)
                old.purged = True
                old.producer.poll(0)
                held = len(old.producer)
            if held:
                continue  # its purge's reports are still to be served
            self._old.remove(old)
            closer = threading.Thread(target=old.producer.close, name=f"close {old.label}", daemon=True)
            closer.start()
            self._closing.append(closer)
            closed += 1
        self._closing = [t for t in self._closing if t.is_alive()]
        return closed

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the closes :meth:`reap` started (at most ``timeout_s`` s in all); True if all ended."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for closer in self._closing:
            closer.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._closing = [t for t in self._closing if t.is_alive()]
        return not self._closing

    def close_all(self, timeout_s: float) -> None:
        """Flush (at most ``timeout_s`` s), purge what is left, close every replaced producer.

        Also waits (at most ``timeout_s`` s) for the closes :meth:`reap` started.
        """
        self.flush(timeout_s)
        for old in self._old:
            if len(old.producer):
                self._purge(old.producer)
            old.producer.close()
        self._old.clear()
        self.join(max(0.0, timeout_s))

    @staticmethod
    def _purge(producer: Any) -> None:
        producer.purge(in_queue=True, in_flight=True, blocking=False)
        producer.flush(1.0)  # serves the purge's failure reports into the window counts


__all__ = ["DRAIN_MARGIN_MS", "Draining", "OldProducer", "drain_deadline_ms"]
