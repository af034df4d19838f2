"""A window's final snapshot waits until the TCP connections delivered its bytes (invariant 8)."""

from __future__ import annotations

from typing import Any

from audit_producer import AuditedProducer
from audit_producer.settings import ProducerAuditSettings
from audit_producer.tcp_backlog import TcpSocket
from audit_record import AuditRecord, now_ms


class FakeBacklog:
    """One socket with 100 bytes on the wire when the window settles; ``acked`` moves it on."""

    def __init__(self) -> None:
        self.acked = 0
        self.closed = False

    def sockets(self) -> list[TcpSocket]:
        unacked = max(0, 100 - self.acked)
        peer = ("10.0.0.1", 9092)
        return [TcpSocket(cookie=1, peer=peer, inode=7, unacked_bytes=unacked, bytes_acked=self.acked)]

    def mark_in(self, sockets: list[TcpSocket]) -> dict[int, int]:
        return {s.cookie: (s.bytes_acked or 0) + s.unacked_bytes for s in sockets if s.unacked_bytes}

    def close(self) -> None:
        self.closed = True


def _producer(drain_wait_ms: int) -> tuple[AuditedProducer, list[AuditRecord], FakeBacklog]:
    settings = ProducerAuditSettings(window_ms=1_000, grace_ms=0, tcp_drain_wait_ms=drain_wait_ms)
    p = AuditedProducer({"bootstrap.servers": "127.0.0.1:9", "client.id": "drain"}, settings)
    sent: list[AuditRecord] = []
    p._audit_topic.send = sent.append  # type: ignore[method-assign]  # keep the snapshots it would send
    p._audit_topic.checked = True
    backlog = FakeBacklog()
    p._tcp_drain.backlog = backlog  # type: ignore[assignment]
    t = now_ms() - 5_000
    p.produce("orders", b"x", timestamp=t)
    p._producer.purge()  # no broker: the message fails at once, so the window is settled
    p._producer.poll(1.0)
    return p, sent, backlog


def _final(sent: list[Any]) -> list[AuditRecord]:
    return [r for r in sent if r.final]


def test_the_final_snapshot_waits_for_the_bytes_on_the_wire_and_says_how_many():
    p, sent, backlog = _producer(60_000)
    try:
        p._tick(now_ms())
        assert not _final(sent)
        assert sent[-1].in_flight_bytes == 100  # the consumer learns it must wait for this producer
        backlog.acked = 60
        p._tick(now_ms())
        assert not _final(sent) and sent[-1].in_flight_bytes == 40
        backlog.acked = 100
        p._tick(now_ms())
        final = _final(sent)
        assert len(final) == 1 and final[0].in_flight_bytes == 0 and final[0].failed == 1
    finally:
        p._tcp_drain.close()
        p.close(0)


def test_the_wait_is_bounded():
    p, sent, _ = _producer(1_000)
    try:
        now = now_ms()
        p._tick(now)
        assert not _final(sent)
        p._tick(now + 1_000)
        final = _final(sent)
        assert len(final) == 1 and final[0].in_flight_bytes == 100  # sent anyway, with what was left
    finally:
        p._tcp_drain.close()
        p.close(0)


def test_without_the_socket_table_nothing_waits_and_snapshots_say_so():
    settings = ProducerAuditSettings(window_ms=1_000, grace_ms=0, tcp_drain_wait_ms=0)
    p = AuditedProducer({"bootstrap.servers": "127.0.0.1:9", "client.id": "nodrain"}, settings)
    sent: list[AuditRecord] = []
    p._audit_topic.send = sent.append  # type: ignore[method-assign]  # keep the snapshots it would send
    p._audit_topic.checked = True
    try:
        assert p._tcp_drain.backlog is None
        p.produce("orders", b"x", timestamp=now_ms() - 5_000)
        p._producer.purge()
        p._producer.poll(1.0)
        p._tick(now_ms())
        assert [r.in_flight_bytes for r in _final(sent)] == [None]
    finally:
        p.close(0)
