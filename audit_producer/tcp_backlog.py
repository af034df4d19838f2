"""What this process wrote to its TCP connections that the peers have not acknowledged yet.

A delivery report does not always mean the broker has the message or never will: librdkafka reports an
``acks=0`` message delivered once it is written to the socket, and gives an ``acks>=1`` message up after
``message.timeout.ms`` even when its request is already on the wire. In both cases the kernel keeps
sending the bytes, through retransmission timeouts that back off to seconds on a lossy path, and keeps
sending them after librdkafka closed the connection (an orphaned socket in FIN-WAIT-1). Found on the
closed-loop testbed: 481 messages of an ``acks=0`` window and 6 of an ``acks=1`` window were appended
after their windows were final (docs/DESIGN.md, invariant 8).

:class:`TcpBacklog` answers "has every byte written so far reached its peer?" for the producer: a
:meth:`~TcpBacklog.mark` records, per socket with unacknowledged bytes, the byte position the peer must
acknowledge (``tcpi_bytes_acked`` + ``idiag_wqueue``: acknowledged plus written-not-acknowledged; Linux
``sock_diag(7)``, ``tcp_info``), and :meth:`~TcpBacklog.outstanding` how many of those bytes are still
unacknowledged. A socket that is gone (closed after delivering everything, or reset: its bytes never
arrive) has nothing outstanding. The process's sockets are the inodes of ``/proc/self/fd``; an orphaned
one (inode 0) counts when it leads to a peer (address, port) one of the process's sockets led to.

The socket table comes from the kernel's ``NETLINK_SOCK_DIAG`` through pyroute2's ``DiagSocket``. Where
that is not available (not Linux, no pyroute2), :func:`open_backlog` returns None and the producer
does not wait for its connections.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

TCP_LISTEN = 10
"""``TCP_LISTEN`` of ``include/net/tcp_states.h``: listening sockets are never asked for."""

TCP_TIME_WAIT = 6
"""``TCP_TIME_WAIT``: every byte and the FIN were acknowledged; the socket has nothing outstanding."""

_STATES = 0xFFF & ~(1 << TCP_LISTEN) & ~(1 << TCP_TIME_WAIT)
"""``idiag_states`` bit mask of the sockets asked for: every state that can hold unacknowledged bytes."""

_INET_DIAG_INFO = 2
"""``INET_DIAG_INFO`` (``include/uapi/linux/inet_diag.h``): ask for ``struct tcp_info`` with each socket."""

_EXTENSIONS = 1 << (_INET_DIAG_INFO - 1)
"""``idiag_ext``: the extensions asked for, one bit per attribute (bit n - 1 for attribute n)."""

MAX_PEERS = 1_024
"""At most this many peers of the process's sockets are remembered (for orphaned sockets)."""


@dataclass(frozen=True, slots=True)
class TcpSocket:
    """One TCP socket of the network namespace, as ``sock_diag`` reports it.

    Attributes:
        cookie: The kernel's socket cookie (``idiag_cookie``): unique while the socket exists, kept when
            it is orphaned.
        peer: Remote (address, port).
        inode: Socket inode (0: orphaned, closed by its process while the kernel still sends).
        unacked_bytes: Written but not acknowledged by the peer (``idiag_wqueue`` = ``write_seq -
            snd_una``; a FIN counts one), bytes.
        bytes_acked: Acknowledged by the peer since the connection started (``tcpi_bytes_acked``), bytes;
            None when the kernel gives no ``tcp_info`` (a closed socket in FIN-WAIT-2 is a mini socket).
    """

    cookie: int
    peer: tuple[str, int]
    inode: int
    unacked_bytes: int
    bytes_acked: int | None


Mark = dict[int, int]
"""Per socket cookie, the ``bytes_acked`` the peer must reach for every byte written before the mark."""


def mark_of(sockets: Iterable[TcpSocket], own_inodes: set[int], peers: set[tuple[str, int]]) -> Mark:
    """Return the mark of the process's sockets with unacknowledged bytes.

    Args:
        sockets: The namespace's TCP sockets.
        own_inodes: Inodes of the process's open sockets (``/proc/self/fd``).
        peers: Peers the process's sockets lead or led to; updated with those of ``own_inodes``. An
            orphaned socket (inode 0) to one of them counts as the process's.
    """
    sockets = list(sockets)
    peers.update(s.peer for s in sockets if s.inode in own_inodes)
    return {
        s.cookie: (s.bytes_acked or 0) + s.unacked_bytes
        for s in sockets
        if s.unacked_bytes > 0 and (s.inode in own_inodes or (s.inode == 0 and s.peer in peers))
    }


def outstanding_of(mark: Mapping[int, int], sockets: Iterable[TcpSocket]) -> int:
    """Return the bytes of ``mark`` the peers have not acknowledged yet (0: all delivered, or gone), bytes."""
    now = {s.cookie: s for s in sockets}
    total = 0
    for cookie, target in mark.items():
        s = now.get(cookie)
        if s is not None and s.unacked_bytes > 0:  # none: every byte written was acknowledged
            total += max(0, target - s.bytes_acked) if s.bytes_acked is not None else s.unacked_bytes
    return total


def own_socket_inodes(fd_dir: str = "/proc/self/fd") -> set[int]:
    """Return the inodes of the sockets this process has open (``socket:[<inode>]`` links of ``fd_dir``)."""
    inodes: set[int] = set()
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


class TcpBacklog:
    """The process's unacknowledged TCP bytes, read from ``sock_diag``. Use it from one thread.

    Args:
        diag: An open, bound ``pyroute2.DiagSocket`` (:func:`open_backlog` makes one).
    """

    def __init__(self, diag: Any) -> None:
        self._diag = diag
        self._peers: set[tuple[str, int]] = set()

    def sockets(self) -> list[TcpSocket]:
        """Return the namespace's TCP sockets (IPv4 and IPv6) that can hold unacknowledged bytes.

        Raises:
            OSError: the netlink request failed.
        """
        out: list[TcpSocket] = []
        for family in (socket.AF_INET, socket.AF_INET6):
            table = self._diag.get_sock_stats(family=family, states=_STATES, extensions=_EXTENSIONS)
            for m in table:
                info = m.get_attr("INET_DIAG_INFO")
                acked = info.get("tcpi_bytes_acked") if info is not None else None
                out.append(
                    TcpSocket(
                        cookie=int(m["idiag_cookie"]),
                        peer=(str(m["idiag_dst"]), int(m["idiag_dport"])),
                        inode=int(m["idiag_inode"]),
                        unacked_bytes=int(m["idiag_wqueue"]),
                        bytes_acked=None if acked is None else int(acked),
                    )
                )
        return out

    def mark_in(self, sockets: Iterable[TcpSocket]) -> Mark:
        """Return the mark of ``sockets`` (read just now): every byte the process wrote (:func:`mark_of`)."""
        if len(self._peers) > MAX_PEERS:
            self._peers.clear()
        return mark_of(sockets, own_socket_inodes(), self._peers)

    def close(self) -> None:
        """Close the netlink socket."""
        self._diag.close()


def open_backlog() -> TcpBacklog | None:
    """Return a :class:`TcpBacklog`, or None where ``sock_diag`` cannot be read (logged once at info)."""
    diag = None
    try:
        from pyroute2 import DiagSocket

        diag = DiagSocket()
        diag.bind()
        backlog = TcpBacklog(diag)
        backlog.sockets()
    except Exception as exc:  # ImportError, OSError, NotImplementedError: no such facility here
        log.info("cannot read the TCP socket table (%s): final snapshots do not wait for TCP", exc)
        if diag is not None:
            diag.close()
        return None
    return backlog
