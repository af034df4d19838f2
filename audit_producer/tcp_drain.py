"""Final producer snapshots wait until the window's bytes reached the brokers' TCP stacks.

docs/DESIGN.md, invariant 8: a settled window (every message has a delivery report) is closed only once
every byte the process had written when it settled is acknowledged by TCP, or after
``tcp_drain_wait_ms``; until then its snapshots say how many bytes are still unacknowledged
(``in_flight_bytes``). :class:`TcpDrainWait` keeps, per settled window, the mark of every byte written
when it settled (:mod:`audit_producer.tcp_backlog` reads the socket table), when that was and the bytes
still unacknowledged at the last look.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from audit_producer.tcp_backlog import Mark, TcpBacklog, TcpSocket, outstanding_of
from audit_producer.window_counts import DIRTY
from audit_record import now_ms

log = logging.getLogger(__name__)

WindowKey = tuple[str, int]
"""A window of a producer: (topic, window start in ms since the epoch UTC)."""


class TcpDrainWait:
    """Whether each settled window's bytes have reached the brokers; stops watching on a netlink error.

    Args:
        backlog: The socket table reader (None: the producer does not watch its connections).
        wait_ms: The longest a settled window waits for TCP, ms.
    """

    def __init__(self, backlog: TcpBacklog | None, wait_ms: int) -> None:
        self.backlog = backlog
        self.wait_ms = wait_ms
        self._drain: dict[WindowKey, tuple[Mark, int, int]] = {}

    def in_flight_bytes(self, key: WindowKey) -> int | None:
        """Return a window's ``in_flight_bytes`` (None: this producer does not watch its connections)."""
        if self.backlog is None:
            return None
        entry = self._drain.get(key)
        return 0 if entry is None else entry[2]

    def forget(self, key: WindowKey) -> None:
        """Forget a closed window."""
        self._drain.pop(key, None)

    def sockets(self) -> list[TcpSocket]:
        """Return the namespace's TCP sockets; on a netlink error stop watching them (logged)."""
        assert self.backlog is not None
        try:
            return self.backlog.sockets()
        except OSError as exc:
            log.warning("reading the TCP socket table failed (%s): final snapshots stop waiting for TCP", exc)
            self.close()
            return []

    def view(self) -> tuple[list[TcpSocket], Mark]:
        """Return the TCP sockets (:meth:`sockets`) and the mark of every byte the process wrote to them."""
        sockets = self.sockets()
        return sockets, ({} if self.backlog is None else self.backlog.mark_in(sockets))

    def drained(self, key: WindowKey, w: list[Any], now: int, sockets: list[TcpSocket], mark: Mark) -> bool:
        """Return True once a settled window's bytes have reached the brokers (or the wait is over).

        The first call keeps ``mark``, every byte the process has written by now (:meth:`view` reads it
        once per tick): the window's messages all have delivery reports, so each was written before, or
        never will be. A window whose bytes are not all acknowledged yet is marked dirty (and again
        whenever that number changes), so a snapshot with its ``in_flight_bytes`` goes out at this tick.

        Args:
            key: The window.
            w: Its count list (:mod:`audit_producer.window_counts`).
            now: The caller's clock, ms since the epoch UTC.
            sockets: The TCP sockets now.
            mark: Every byte written to them by now.
        """
        if self.backlog is None:
            return True
        entry = self._drain.get(key)
        if entry is None:
            entry = (mark, now, outstanding_of(mark, sockets))
            if entry[2]:
                w[DIRTY] = 1
        else:
            left = outstanding_of(entry[0], sockets)
            if left != entry[2]:
                w[DIRTY] = 1
            entry = (entry[0], entry[1], left)
        self._drain[key] = entry
        if entry[2] and now - entry[1] >= self.wait_ms:
            log.warning(
                "window %s of %s: %d bytes still unacknowledged by TCP after %d ms; final snapshot sent",
                key[1],
                key[0],
                entry[2],
                now - entry[1],
            )
            return True
        return entry[2] == 0

    def await_all(self, keys: Iterable[WindowKey], timeout_s: float) -> None:
        """Wait until every byte written so far is acknowledged by TCP, at most ``timeout_s`` s (close).

        Args:
            keys: The windows still open; each gets the bytes left unacknowledged.
            timeout_s: The longest wait, s (never longer than ``wait_ms``).
        """
        keys = list(keys)
        if self.backlog is None or not keys:
            return
        sockets, mark = self.view()
        if self.backlog is None:
            return
        deadline = now_ms() + min(int(1000 * timeout_s), self.wait_ms)
        left = outstanding_of(mark, sockets)
        while left and now_ms() < deadline:
            time.sleep(0.05)
            left = outstanding_of(mark, self.sockets())
        for key in keys:
            self._drain[key] = (mark, 0, left)

    def close(self) -> None:
        """Stop watching: close the socket table reader and forget every window (idempotent)."""
        if self.backlog is not None:
            self.backlog.close()
        self.backlog = None
        self._drain.clear()
