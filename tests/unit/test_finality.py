"""Issue 15 item 6: a window is final only once none of its messages can still arrive."""

import json

import pandas as pd
import pytest

from audit_consumer import counts
from audit_consumer.counts import PartitionCounts
from audit_consumer.discovery import select_topics
from audit_consumer.producer_timeouts import ProducerTimeouts
from audit_consumer.settings import AuditConsumerSettings
from audit_record import AuditRecord, ProducerConfig
from audit_record.finality import Finality
from spark_streaming.reconcile import compact, message_timeout_ms
from spark_streaming.settings import SparkJobSettings
from spark_streaming.window_state import make_reconciler
from tests.unit.test_spark_state import FakeState


def test_the_wait_is_the_grace_or_the_largest_timeout_plus_margin_bounded():
    f = Finality(grace_ms=10_000, delivery_margin_ms=5_000, max_wait_ms=100_000)
    assert f.wait_ms(None) == 10_000  # no producer report: the grace
    assert f.wait_ms(2_000) == 10_000  # a short timeout never shortens the grace
    assert f.wait_ms(70_000) == 75_000
    assert f.wait_ms(300_000) == 100_000  # bounded
    assert f.wait_ms(0) == 100_000  # librdkafka's 0 = no timeout: the bound
    settled = Finality(grace_ms=30_000, delivery_margin_ms=5_000, max_wait_ms=100_000, settle_ms=20_000)
    assert settled.wait_ms(70_000) == 95_000 and settled.wait_ms(1_000) == 30_000
    assert settled.longest_wait_ms == 120_000
    off = Finality(grace_ms=10_000, max_wait_ms=0)
    assert not off.adaptive and off.wait_ms(70_000) == 10_000 and off.delivery_bound_ms(70_000) is None


def _pc():
    return PartitionCounts("t", 0, window_ms=1_000, grace_ms=500)


def test_a_window_whose_producers_may_still_deliver_stays_open_and_holds_later_ones():
    pc = _pc()
    pc.observe(1_100, b"p", 1, 1, 0)
    pc.observe(2_100, b"p", 2, 1, 0)
    waits = {1_000: 2_000}  # window 1000's producers may deliver until 2 s after its end
    wait = lambda start: waits.get(start, 0)  # noqa: E731
    assert pc.advance(now_ms=3_000, late_retention_ms=60_000, wait_ms=wait, max_wait_ms=2_000) == []
    pc.observe(1_900, b"p", 3, 1, 0)  # a retried message of window 1000, arriving 1 s after its end: counted
    assert pc.open[(1_000, b"p")][counts.RECEIVED] == 2 and not pc.closed
    closed = pc.advance(now_ms=4_100, late_retention_ms=60_000, wait_ms=wait, max_wait_ms=2_000)
    assert [s for s, _, _ in closed] == [1_000, 2_000]  # in order, once the bound has passed
    pc.observe(1_950, b"p", 4, 1, 0)  # after the bound: late, as before
    assert pc.closed[(1_000, b"p")][counts.LATE] == 1


def test_an_empty_window_is_held_too_and_old_windows_close_whatever_the_answer():
    pc = _pc()
    pc.observe(1_100, b"p", 1, 1, 0)
    pc.advance(now_ms=1_200, late_retention_ms=60_000)
    asked: list[int] = []

    def wait(start: int) -> int:
        asked.append(start)
        return 2_000

    assert pc.advance(now_ms=3_600, late_retention_ms=60_000, wait_ms=wait, max_wait_ms=2_000) == []
    assert pc.first_open_start_ms == 1_000
    pc.observe(2_500, b"p", 9, 1, 0)
    asked.clear()
    assert [s for s, _, _ in pc.advance(10_000, 60_000, wait, 2_000)] == [1_000, 2_000]
    assert asked == [7_000, 8_000]  # windows that ended > 2 s before the watermark close unasked


def test_producer_timeouts_answer_per_topic_and_window_and_the_maximum_until_read():
    t = ProducerTimeouts(
        {"bootstrap.servers": "127.0.0.1:9"}, "a", 10_000, Finality(10_000, 5_000, 100_000), "g"
    )
    assert t.wait_ms("orders", 0) == 100_000  # not read to the end yet: the bound
    t.covered_from_ms = 0
    t.ready.set()
    t.observe("orders", "p1", 100_000, 70_000)
    t.observe("orders", "p2", 100_000, 2_000)
    assert t.wait_ms("orders", 100_000) == 75_000
    assert t.wait_ms("orders", 120_000) == 75_000  # its snapshot of a later window may come late
    assert t.wait_ms("orders", 200_000) == 0  # long after: no producer around, the grace alone
    assert t.wait_ms("unaudited-only", 100_000) == 0
    t.observe("orders", "p3", 100_000, 0)  # no timeout at all
    assert t.wait_ms("orders", 100_000) == 100_000
    t.covered_from_ms = 500_000
    assert t.wait_ms("orders", 100_000) == 100_000  # before what was read: unknown, the bound
    t._prune(10_000_000)
    assert t.message_timeout_ms("orders", 100_000) is None


def test_discovery_matches_whole_names_and_never_internal_or_own_topics():
    available = [
        "orders",
        "orders.eu",
        "ordersX",
        "__consumer_offsets",
        "__kafka_audit",
        "mm2-offset-syncs.B.internal",
        "A.checkpoints.internal",
        "heartbeats",
        "A.heartbeats",
        "A.orders",
        "my.audit",
    ]
    assert select_topics(available, [], [r"orders(\..*)?"]) == ["orders", "orders.eu"]
    assert select_topics(available, ["named"], [".*"], own=["my.audit"]) == [
        "A.orders",
        "named",
        "orders",
        "orders.eu",
        "ordersX",
    ]
    with pytest.raises(ValueError, match="not a regular expression"):
        AuditConsumerSettings(topic_patterns=["orders("])


def _snap(tier: str, timeout_ms: int | None, **kw) -> AuditRecord:
    config = (
        ProducerConfig(
            acks="1",
            enable_idempotence=False,
            batch_num_messages=1,
            linger_ms=0,
            message_timeout_ms=timeout_ms,
            message_send_max_retries=2,
            retry_backoff_ms=100,
        )
        if timeout_ms is not None
        else None
    )
    base = dict(
        tier=tier, source="s", topic="t", window_start_ms=0, window_end_ms=10_000, producer_config=config
    )
    return AuditRecord(**{**base, **kw})


def test_the_job_keeps_a_window_provisional_until_its_producers_cannot_deliver_any_more():
    finality = Finality(grace_ms=5_000, delivery_margin_ms=5_000, max_wait_ms=300_000, settle_ms=3_000)
    fn = make_reconciler(["a"], grace_ms=5_000, finality=finality)
    records = [
        _snap("producer", 70_000, producer_id="p1", sent=10),
        _snap("producer", 2_000, producer_id="p2", source="s2", sent=5),
        _snap("cluster:a", None, producer_id="p1", source="g", received=9, unique=9),
    ]
    assert message_timeout_ms(compact(r, 0, i) for i, r in enumerate(records)) == 70_000
    frame = pd.DataFrame(
        [
            {"snap_key": r.key(), "payload": json.dumps(compact(r, 0, i)), "g_window_end": 10_000}
            for i, r in enumerate(records)
        ]
    )
    st = FakeState()
    rows = [r for r in pd.concat(list(fn(("t", 0), iter([frame]), st))).to_dict("records")]
    result = next(r for r in rows if r["kind"] == "result")
    assert (result["state"], result["final_wait_ms"]) == ("provisional", 78_000)
    assert st.timeout == 10_000 + 78_000  # not end + grace (15 s)
    st.hasTimedOut = True
    st.watermark_ms = 10_000 + 78_000 + 1  # Spark times a state out once the watermark passes its timeout
    final = next(r for r in pd.concat(list(fn(("t", 0), iter([]), st))).to_dict("records"))
    assert (final["state"], final["final_wait_ms"], final["unique"]) == ("final", 78_000, 9)


def test_settings_carry_the_same_rule_to_the_consumer_and_the_job():
    consumer = AuditConsumerSettings(grace_ms=10_000, delivery_margin_ms=4_000, max_final_wait_ms=90_000)
    job = SparkJobSettings(grace_ms=30_000, delivery_margin_ms=4_000, max_final_wait_ms=90_000)
    assert consumer.finality == Finality(10_000, 4_000, 90_000, 0)
    assert job.finality.wait_ms(70_000) == 74_000 + job.final_settle_ms
    assert consumer.finality.wait_ms(70_000) == 74_000


def test_a_result_written_with_schema_v3_decodes_with_no_final_wait():
    import io

    import fastavro

    from audit_record import codec, window_result

    v3 = codec.schema("window_result.v3")
    row = window_result.blank(
        topic="t", window_start_ms=0, window_end_ms=10, tier="cluster:a", state="final", result_at_ms=5
    )
    row.update(dict.fromkeys(("sent", "acknowledged", "failed", "received", "unique", "duplicated"), 0))
    row.update(late=0, stale=0, unaudited=0, producers=0, unaudited_producers=0, tx_retries=0)
    row.update(request_timeouts=0)
    buf = io.BytesIO()
    buf.write(codec.SINGLE_OBJECT_MAGIC + codec.fingerprint("window_result.v3"))
    fastavro.schemaless_writer(buf, v3, {f["name"]: row.get(f["name"]) for f in v3["fields"]})
    out = codec.decode_object("window_result", buf.getvalue())
    assert out["final_wait_ms"] is None and out["topic"] == "t"
    assert (
        codec.decode_object(
            "window_result", codec.encode_object("window_result", {**row, "final_wait_ms": 75_000})
        )["final_wait_ms"]
        == 75_000
    )


def test_a_window_waits_for_the_final_snapshot_of_a_producer_that_watches_tcp():
    """A watching producer (in_flight_bytes not null) holds its windows until its final snapshot is read."""
    t = ProducerTimeouts(
        {"bootstrap.servers": "127.0.0.1:9"},
        "a",
        10_000,
        Finality(10_000, 5_000, 310_000),
        "g",
        producer_final_wait_ms=75_000,
    )
    t.covered_from_ms = 0
    t.ready.set()
    t.observe("orders", "p1", 100_000, 3_000)
    assert t.wait_ms("orders", 100_000) == 8_000  # message.timeout.ms + margin
    t.observe_final("orders", "p1", 100_000, final=False, at_ms=111_000)
    t.observe_final("orders", "p2", 100_000, final=False, at_ms=111_000)
    assert t.wait_ms("orders", 100_000) == 8_000 + 75_000  # held, at most this long past the bound
    assert t.wait_ms("orders", 110_000) == 8_000  # other windows are not held
    t.observe_final("orders", "p1", 100_000, final=True, at_ms=130_000)
    assert t.wait_ms("orders", 100_000) == 83_000  # p2 still has not sent its final snapshot
    t.observe_final("orders", "p2", 100_000, final=True, at_ms=140_000)
    assert t.wait_ms("orders", 100_000) == 140_000 + 2_000 - 110_000  # read, then the data fetch settles
    t.observe_final("orders", "p1", 120_000, final=True, at_ms=131_000)  # closed early: the bound rules
    assert t.wait_ms("orders", 120_000) == 8_000
    t._prune(10_000_000)
    assert t.wait_ms("orders", 100_000) == 0


def test_a_consumer_that_does_not_wait_for_producers_ignores_their_tcp_state():
    t = ProducerTimeouts(
        {"bootstrap.servers": "127.0.0.1:9"}, "a", 10_000, Finality(10_000), "g", producer_final_wait_ms=0
    )
    t.covered_from_ms = 0
    t.ready.set()
    t.observe_final("orders", "p1", 100_000, final=False, at_ms=111_000)
    assert t.wait_ms("orders", 100_000) == 0
