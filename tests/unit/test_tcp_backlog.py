"""A producer's unacknowledged TCP bytes (audit_producer.tcp_backlog): the rule, then the real kernel."""

from __future__ import annotations

import os
import socket

import pytest

from audit_producer.tcp_backlog import TcpSocket, mark_of, open_backlog, outstanding_of, own_socket_inodes

BROKER = ("10.0.0.1", 9092)


def _sock(cookie: int, inode: int, unacked: int, acked: int, peer: tuple[str, int] = BROKER) -> TcpSocket:
    return TcpSocket(cookie=cookie, peer=peer, inode=inode, unacked_bytes=unacked, bytes_acked=acked)


def test_the_mark_holds_the_own_sockets_with_unacknowledged_bytes_and_their_orphans():
    peers: set[tuple[str, int]] = set()
    table = [
        _sock(1, 100, 500, 1_000),  # ours, 500 bytes on the wire
        _sock(2, 101, 0, 9_000),  # ours, all delivered: nothing to wait for
        _sock(3, 0, 40, 7),  # orphaned (closed with bytes unsent) to a broker of ours
        _sock(4, 0, 40, 7, peer=("10.9.9.9", 80)),  # someone else's orphan elsewhere
        _sock(5, 555, 70, 0),  # another process's socket
    ]
    mark = mark_of(table, {100, 101}, peers)
    assert mark == {1: 1_500, 3: 47}
    assert peers == {BROKER}
    assert outstanding_of(mark, table) == 540
    later = [_sock(1, 100, 900, 1_400), _sock(3, 0, 0, 47)]  # more written since: not part of the mark
    assert outstanding_of(mark, later) == 100
    assert outstanding_of(mark, [_sock(1, 100, 0, 1_500)]) == 0  # the orphan is gone: delivered or reset
    assert outstanding_of(mark, []) == 0


def test_an_orphan_counts_once_its_peer_was_seen_even_after_the_own_socket_closed():
    peers: set[tuple[str, int]] = set()
    mark_of([_sock(1, 100, 0, 10)], {100}, peers)
    assert mark_of([_sock(1, 0, 30, 10)], set(), peers) == {1: 40}


@pytest.mark.skipif(open_backlog() is None, reason="sock_diag not readable here")
def test_bytes_a_peer_has_not_read_are_outstanding_until_it_reads_them_even_after_close():
    backlog = open_backlog()
    assert backlog is not None
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    server.bind(("127.0.0.1", 0))
    server.listen()
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    try:
        assert os.fstat(client.fileno()).st_ino in own_socket_inodes()
        client.setblocking(False)
        written = 0
        with pytest.raises(BlockingIOError):
            while True:  # until the peer's receive window and our send buffer are full
                written += client.send(b"x" * 65_536)
        mark = backlog.mark_in(backlog.sockets())
        assert outstanding_of(mark, backlog.sockets()) > written // 2
        client.close()  # orphaned: the kernel still sends what it holds
        assert outstanding_of(mark, backlog.sockets()) > written // 2
        read = 0
        while chunk := peer.recv(1 << 20):
            read += len(chunk)
        assert read == written
        assert outstanding_of(mark, backlog.sockets()) == 0
    finally:
        peer.close()
        server.close()
        backlog.close()
