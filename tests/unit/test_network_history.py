"""Each window's snapshot carries the network of its own window (D, L), not of when it was sent."""

from __future__ import annotations

import json
from typing import Any

import pytest

import audit_producer.client_statistics as client_statistics_module
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_producer.audit_topic_writer import AuditTopicWriter
from audit_producer.network_history import NetworkHistory
from audit_record import AuditRecord, NetworkStats


def _stats(rtt_ms: float, loss_pct: float | None = None, retries: int = 0) -> NetworkStats:
    return NetworkStats(
        rtt_avg_ms=rtt_ms,
        rtt_p99_ms=2 * rtt_ms,
        rtt_min_ms=rtt_ms / 4,
        tx_retries=retries,
        tcp_retransmit_pct=loss_pct,
    )


def test_each_sample_counts_for_the_window_its_interval_midpoint_is_in():
    h = NetworkHistory(5_000)
    for at, rtt, loss in [(5_000, 10, 0.0), (10_000, 20, 1.0), (15_000, 100, 5.0), (20_000, 200, 7.0)]:
        h.add(at, _stats(rtt, loss, retries=at // 1000))
    # window [0, 10 s): the samples of (0, 5] and (5, 10] s; [10, 20 s): (10, 15] and (15, 20] s
    first, second = h.during(0, 10_000), h.during(10_000, 20_000)
    assert first is not None and second is not None
    assert (first.rtt_avg_ms, first.rtt_p99_ms, first.tcp_retransmit_pct, first.tx_retries) == (
        15,
        40,
        0.5,
        10,
    )
    assert (second.rtt_avg_ms, second.rtt_p99_ms, second.tcp_retransmit_pct, second.tx_retries) == (
        150,
        400,
        6,
        20,
    )
    assert (first.rtt_min_ms, second.rtt_min_ms) == (2.5, 25)  # the window's best round trip
    assert h.during(20_000, 30_000) is None  # nothing taken after its start yet: the caller falls back
    h.forget_before(10_000)
    assert len(h) == 2 and h.during(10_000, 20_000) == second  # what the open windows need is kept


def test_a_window_shorter_than_the_interval_gets_the_first_sample_after_its_start():
    h = NetworkHistory(5_000)
    h.add(5_000, _stats(10))
    h.add(10_000, _stats(30))
    only = h.during(6_000, 7_000)  # no midpoint (2.5 s, 7.5 s) lies in it
    assert only is not None and only.rtt_avg_ms == 30


def test_unknown_values_are_left_out_of_the_means():
    h = NetworkHistory(1_000)
    h.add(1_500, NetworkStats())
    h.add(2_500, _stats(8, None))
    s = h.during(1_000, 3_000)
    assert s is not None and (s.rtt_avg_ms, s.tcp_retransmit_pct) == (8, None)
    with pytest.raises(ValueError, match=r"statistics\.interval\.ms=0"):
        NetworkHistory(0)


def _statistics(rtt_ms: float) -> str:
    return json.dumps({"brokers": {"b1": {"nodeid": 1, "rtt": {"avg": rtt_ms * 1000, "p99": 0, "cnt": 3}}}})


def test_a_final_snapshot_sent_after_a_network_change_describes_its_own_window(monkeypatch):
    """The stage after the window (RTT 400 ms) must not leak into the window's final snapshot (RTT 20 ms)."""
    clock = {"now": 0}
    monkeypatch.setattr(client_statistics_module, "now_ms", lambda: clock["now"])
    sent: list[AuditRecord] = []
    monkeypatch.setattr(AuditTopicWriter, "send", lambda self, record: sent.append(record))
    p = AuditedProducer(
        {"bootstrap.servers": "127.0.0.1:9", "statistics.interval.ms": 1_000},
        audit=ProducerAuditSettings(window_ms=10_000),
    )
    try:
        for t in range(1_000, 31_000, 1_000):  # the window [10 s, 20 s) ran at 20 ms, what came after at 400
            clock["now"] = t
            p._statistics.observe(_statistics(20 if t <= 20_000 else 400))
        window: list[Any] = [5, 5, 0, 500, 1, 5, 10_000, 0, None, None, None, {}, {}, {}, 0]
        p._snapshots.emit("t", 10_000, 20_000, window, final=True)
        [record] = sent
        assert record.network is not None and record.network.rtt_avg_ms == 20
        assert p._statistics.latest.rtt_avg_ms == 400  # the newest sample, which the snapshot used to carry
    finally:
        p._producer.flush(0)


def test_the_window_carries_the_mean_retransmission_timeout_rate_of_its_samples():
    h = NetworkHistory(5_000)
    for at, rto in [(5_000, 0.5), (10_000, 2.5), (15_000, None), (20_000, None)]:
        h.add(at, NetworkStats(rtt_avg_ms=10.0, tcp_timeout_pct=rto))
    first, second = h.during(0, 10_000), h.during(10_000, 20_000)
    assert first is not None and first.tcp_timeout_pct == 1.5
    assert second is not None and second.tcp_timeout_pct is None  # no sample knew it
