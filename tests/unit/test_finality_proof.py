"""Issue 37: a window is final as soon as every producer accounted for it and every tier read past it."""

import json
from types import SimpleNamespace

import pandas as pd
import pytest

from audit_consumer.counts import PartitionCounts
from audit_consumer.snapshots import read_position
from audit_producer.accounting import ACCOUNTED_CHECK_MS, is_accounted, next_tick_ms
from audit_producer.window_counts import (
    ACCOUNTED,
    ACKED,
    FAILED,
    SENT,
    new_window,
    partition_deliveries,
    window_counter,
)
from audit_record import AuditRecord, PartitionDelivery, ProducerConfig, ReadOffset
from audit_record.finality import Finality
from audit_record.tiers import TierOrder
from spark_streaming.finality_proof import GRACE, PROOF, TIMEOUT, judge
from spark_streaming.reconcile import compact
from spark_streaming.window_state import make_reconciler
from tests.unit.test_spark_state import FakeState

END = 10_000
WAIT = 305_000  # librdkafka's default message.timeout.ms (300 s) + the 5 s margin


def _config(acks="all", timeout_ms=300_000):
    return ProducerConfig(
        acks=acks,
        enable_idempotence=False,
        batch_num_messages=10,
        linger_ms=5,
        message_timeout_ms=timeout_ms,
        message_send_max_retries=2,
        retry_backoff_ms=100,
    )


def _producer(pid="p1", accounted=True, acked=(5, 3), last=(104, 52), failed=0, acks="all", **kw):
    parts = [
        PartitionDelivery(partition=i, acknowledged=n, last_offset=o)
        for i, (n, o) in enumerate(zip(acked, last, strict=True))
    ]
    if failed:
        parts.append(
            PartitionDelivery(partition=0, failed=failed, failed_by_error={"_MSG_TIMED_OUT": failed})
        )
    return AuditRecord(
        tier="producer",
        source=pid,
        producer_id=pid,
        topic="t",
        window_start_ms=0,
        window_end_ms=END,
        sent=sum(acked) + failed,
        acknowledged=sum(acked),
        failed=failed,
        producer_config=_config(acks),
        partitions=parts,
        accounted=accounted,
        **kw,
    )


def _tier(partition, position, tier="cluster:a", pid="p1", n=5, **kw):
    return AuditRecord(
        tier=tier,
        source="g",
        producer_id=pid,
        topic="t",
        partition=partition,
        window_start_ms=0,
        window_end_ms=END,
        received=n,
        unique=n,
        read_offsets=[] if position is None else [ReadOffset(partition=partition, offset=position)],
        **kw,
    )


def _judge(*records, clusters=("a",)):
    return judge(
        [compact(r, 0, i) for i, r in enumerate(records)], list(clusters), TierOrder.derive(clusters)
    )


def test_proven_once_every_producer_accounted_and_every_partition_is_read_past_its_last_offset():
    verdict = _judge(_producer(), _tier(0, 105), _tier(1, 53, n=3))
    assert (verdict.proven, verdict.rule, verdict.waiting_for) == (True, PROOF, None)
    behind = _judge(_producer(), _tier(0, 105), _tier(1, 52, n=2))  # offset 52 itself not read yet
    assert (behind.proven, behind.rule, behind.fallback) == (False, PROOF, TIMEOUT)
    assert behind.waiting_for == "cluster:a: partition 1 read to offset 52, needs past 52"
    missing = _judge(_producer(), _tier(0, 105))
    assert missing.waiting_for == "cluster:a: partition 1 not read, needs past 52"


def test_a_producer_not_accounted_for_yet_keeps_the_window_waiting_for_the_proof():
    verdict = _judge(_producer(accounted=False), _tier(0, 105), _tier(1, 53, n=3))
    assert (verdict.proven, verdict.rule) == (False, PROOF)
    assert verdict.waiting_for == "producer p1: not accounted for yet (8 of 8 reported)"


@pytest.mark.parametrize(
    ("producer", "why"),
    [
        (_producer(failed=2), "producer p1: 2 failed messages (they may still land)"),
        (_producer(acks="0"), "producer p1: acks=0 (no offsets acknowledged)"),
        (_producer(last=(None, 52)), "producer p1: no acknowledged offset for partition 0"),
    ],
)
def test_failed_messages_acks_0_or_unknown_offsets_keep_the_timeout_rule(producer, why):
    verdict = _judge(producer, _tier(0, 200), _tier(1, 200, n=3))
    assert (verdict.proven, verdict.rule, verdict.waiting_for) == (False, TIMEOUT, why)


def test_stamps_of_a_producer_that_reported_nothing_keep_the_timeout_rule():
    verdict = _judge(_producer(), _tier(0, 105), _tier(1, 53, n=3), _tier(0, 105, pid="ghost", n=1))
    assert (verdict.proven, verdict.rule) == (False, TIMEOUT)
    assert verdict.waiting_for == "cluster:a: stamps of 1 producer id(s) that reported nothing"


def test_no_producer_waits_the_grace():
    verdict = _judge(_tier(0, 105, pid=None, n=0))
    assert (verdict.proven, verdict.rule, verdict.waiting_for) == (
        False,
        GRACE,
        "no producer reported the window",
    )


def test_every_tier_must_prove_it_a_replica_by_holding_what_the_tier_before_holds():
    a = [_tier(0, 105), _tier(1, 53, n=3)]
    b_short = [_tier(0, None, tier="cluster:b", n=5), _tier(1, None, tier="cluster:b", n=2)]
    verdict = _judge(_producer(), *a, *b_short, clusters=("a", "b"))
    assert verdict.waiting_for == "cluster:b: holds 7 of cluster:a's 8 messages of p1"
    b = [_tier(0, None, tier="cluster:b", n=5), _tier(1, None, tier="cluster:b", n=3)]
    assert _judge(_producer(), *a, *b, clusters=("a", "b")).proven
    # the replica waits for its source tier, and a configured cluster without snapshots is waited for
    assert _judge(_producer(), _tier(0, 105), *b, clusters=("a", "b")).waiting_for == (
        "cluster:a: partition 1 not read, needs past 52; cluster:b: waits for cluster:a"
    )
    assert (
        _judge(_producer(), *a, clusters=("a", "b")).waiting_for == "cluster:b: no snapshot of the window yet"
    )
    # a consumer group reading the original topic proves it by its own position
    group = [_tier(0, 105, tier="consumer:app"), _tier(1, 40, tier="consumer:app", n=1)]
    assert (
        _judge(_producer(), *a, *group).waiting_for
        == "consumer:app: partition 1 read to offset 40, needs past 52"
    )


def test_a_tier_without_read_offsets_right_after_the_producers_keeps_the_timeout_rule():
    verdict = _judge(_producer(), _tier(0, None), _tier(1, None, n=3))
    assert (verdict.rule, verdict.waiting_for) == (TIMEOUT, "cluster:a: reports no read offsets")


def _frame(records, offset=0):
    return pd.DataFrame(
        [
            {"snap_key": r.key(), "payload": json.dumps(compact(r, 0, i)), "g_window_end": END}
            for i, r in enumerate(records, offset)
        ]
    )


def _run(fn, st, records=None, offset=0):
    frames = list(fn(("t", 0), iter([] if records is None else [_frame(records, offset)]), st))
    return [r for f in frames for r in f.to_dict("records") if r["kind"] == "result"]


def test_the_job_makes_a_proven_window_final_at_the_next_micro_batch():
    fn = make_reconciler(["a"], grace_ms=5_000, finality=Finality(5_000, max_wait_ms=310_000))
    st = FakeState(watermark_ms=END - 8_000)  # the watermark delay: event time lags the wall clock
    at = {"emitted_at_ms": END + 600}
    [row] = _run(
        fn,
        st,
        [_producer(accounted=False, emitted_at_ms=END - 1), _tier(0, 105, **at), _tier(1, 53, n=3, **at)],
    )
    assert (row["state"], row["final_rule"], row["final_wait_ms"]) == ("provisional", PROOF, WAIT)
    assert st.timeout == END + WAIT
    [row] = _run(fn, st, [_producer(emitted_at_ms=END + 1_250)], offset=10)  # accounted: proven
    assert (row["state"], row["final_rule"], row["waiting_for"]) == ("provisional", PROOF, None)
    assert st.timeout == END - 8_000 + 1  # the next micro-batch, whatever the watermark
    st.hasTimedOut, st.watermark_ms = True, END - 7_000
    [final] = _run(fn, st)
    assert (final["state"], final["final_rule"], final["final_wait_ms"], final["unique"]) == (
        "final",
        PROOF,
        1_250,  # the newest snapshot of the proof came 1.25 s after the window's end
        8,
    )
    st.hasTimedOut = False  # the tiers' closing snapshots, same counts: not late; a changed one is
    assert _late(fn, st, [_producer(emitted_at_ms=END + 10_000, final=True)], 20) == []
    assert _late(fn, st, [_tier(1, 60, n=4, emitted_at_ms=END + 9_000)], 30) == [1]


def _late(fn, st, records, offset):
    frames = list(fn(("t", 0), iter([_frame(records, offset)]), st))
    return [r["late"] for f in frames for r in f.to_dict("records") if r["kind"] == "late"]


def test_a_proven_window_with_new_snapshots_is_final_in_that_batch_when_the_proof_held_before():
    fn = make_reconciler(["a"], grace_ms=5_000, finality=Finality(5_000, max_wait_ms=310_000))
    st = FakeState(watermark_ms=END - 5_000)
    at = {"emitted_at_ms": END + 500}
    [row] = _run(fn, st, [_producer(**at), _tier(0, 105, **at), _tier(1, 53, n=2, **at)])
    assert row["state"] == "provisional" and st.timeout == END - 5_000 + 1  # proven: final next batch
    st.watermark_ms = END - 4_000
    # the rest of an audit consumer's transaction, seen one micro-batch later
    [final] = _run(fn, st, [_tier(1, 53, n=3, emitted_at_ms=END + 500)], offset=10)
    assert (final["state"], final["unique"], final["final_wait_ms"]) == ("final", 8, 500)


def test_a_window_with_a_failed_message_waits_for_the_timeout_and_says_why():
    fn = make_reconciler(["a"], grace_ms=5_000, finality=Finality(5_000, max_wait_ms=310_000))
    st = FakeState(watermark_ms=END + 1_000)
    [row] = _run(fn, st, [_producer(failed=1), _tier(0, 105), _tier(1, 53, n=3)])
    assert (row["final_rule"], row["waiting_for"]) == (
        TIMEOUT,
        "producer p1: 1 failed messages (they may still land)",
    )
    assert st.timeout == END + WAIT
    st.hasTimedOut, st.watermark_ms = True, END + WAIT + 1
    [final] = _run(fn, st)
    assert (final["state"], final["final_rule"], final["final_wait_ms"]) == ("final", TIMEOUT, WAIT)


def test_an_early_timeout_whose_proof_no_longer_holds_is_rearmed_for_the_timeout_rule():
    fn = make_reconciler(["a"], grace_ms=5_000, finality=Finality(5_000, max_wait_ms=310_000))
    st = FakeState(watermark_ms=END - 1_000)
    _run(fn, st, [_producer(), _tier(0, 105), _tier(1, 53, n=3)])
    assert st.timeout == END - 1_000 + 1
    _run(fn, st, [_producer(accounted=False, emitted_at_ms=1)], offset=10)  # a newer snapshot says otherwise
    assert st.timeout == END + WAIT
    st.hasTimedOut, st.watermark_ms = True, END + 1  # had Spark kept the early timeout
    assert _run(fn, st) == [] and st.timeout == END + WAIT


class _Msg(SimpleNamespace):
    def partition(self):
        return self.p

    def offset(self):
        return self.o


def test_the_producer_keeps_the_highest_acknowledged_offset_per_partition_and_accounts_once_drained():
    w = new_window(1, 0)
    w[SENT] = 4
    count = window_counter(w, 1, None, lambda *a: None)
    for p, o in ((0, 7), (0, 9), (1, 3), (0, 8)):
        count(None, _Msg(p=p, o=o))
    leaders = SimpleNamespace(during=lambda *a: (None, []))
    parts = partition_deliveries(w, leaders, "t", 0, END)
    assert [(p.partition, p.acknowledged, p.last_offset) for p in parts] == [(0, 3, 9), (1, 1, 3)]
    assert w[ACKED] == 4 and not w[FAILED]
    assert not is_accounted(w, END - 1, END, False, 0)  # the window has not ended
    assert not is_accounted(w, END, END, False, 120)  # bytes still on the wire
    assert not is_accounted(w, END, END, False, None)  # the connections are not watched
    assert not is_accounted(w, END, END, True, 0)  # delivery_reports=errors: no offsets
    assert is_accounted(w, END, END, False, 0)
    acks0 = new_window(1, 0)
    window_counter(acks0, 1, None, lambda *a: None)(None, _Msg(p=0, o=-1001))  # acks=0: no offset
    assert [p.last_offset for p in partition_deliveries(acks0, leaders, "t", 0, END)] == [None]


def test_the_producer_looks_again_just_after_a_window_ends_and_during_its_grace():
    w = new_window(1, 0)
    windows = {("t", 0): w}
    assert next_tick_ms(windows, END, 10_000, False, 6_000, 5_000) == END + ACCOUNTED_CHECK_MS
    assert next_tick_ms(windows, END, 10_000, False, END + 1_000, 5_000) == END + 1_000 + ACCOUNTED_CHECK_MS
    assert next_tick_ms(windows, END, 10_000, False, END + 20_000, 5_000) == END + 25_000  # grace over
    assert next_tick_ms(windows, END, 10_000, True, 6_000, 5_000) == 11_000  # errors only: never accounted
    w[ACCOUNTED] = 1
    assert next_tick_ms(windows, END, 10_000, False, 6_000, 5_000) == 11_000


def test_readers_report_their_position_except_in_a_replicated_copy():
    st = PartitionCounts("t", 3, window_ms=1_000, grace_ms=500)
    assert read_position(st, "t") is None  # nothing read yet
    st.next_offset = 42
    assert read_position(st, "t") == 42
    copy = PartitionCounts("A.t", 3, window_ms=1_000, grace_ms=500)
    copy.next_offset = 42
    assert read_position(copy, "t") is None  # MirrorMaker 2's offsets are not the producers'
