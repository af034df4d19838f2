"""Autotuned producer, pure logic with fake librdkafka clients: the swap, exactness, rollback, follower.

The real-broker counterpart is tests/integration/test_autotune.py.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError, KafkaException

import audit_producer.audit_topic_writer as audit_topic_writer_module
import audit_producer.autotune as autotune_module
import audit_producer.load as load_module
import audit_producer.reconfiguration as reconfiguration_module
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_producer.autotune import Candidate, ControlFollower, inner_config
from audit_producer.config_history import ConfigHistory
from audit_producer.draining import Draining
from audit_producer.librdkafka_config import controlled_properties, reliability_config
from audit_producer.load import run_load
from audit_producer.probation import Probation, is_rejection
from audit_record import ProducerConfig, decode, now_ms
from audit_record.codec import encode_object
from audit_record.control_record import ControlRecord, encode_control
from audit_record.dead_letter import COMPONENT_HEADER, REASON_HEADER
from audit_record.stamp import read as read_stamp
from kafka_plumbing.errors import ConfigError
from spark_streaming.reconcile import compact, reconcile

WINDOW_MS = 10_000
T0 = 1_700_000_000_000 - 1_700_000_000_000 % WINDOW_MS  # a window start


# ---------------------------------------------------------------------------------------------- fakes
class Delivered:
    """A delivered message as librdkafka hands it to a delivery callback."""

    def __init__(self, topic: str, value: Any, ts: int, headers: list) -> None:
        self._topic, self._value, self._ts, self._headers = topic, value, ts, headers

    def topic(self) -> str:
        return self._topic

    def value(self) -> Any:
        return self._value

    def key(self) -> Any:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, self._ts)

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return -1001  # librdkafka's RD_KAFKA_OFFSET_INVALID: this fake broker gives no offsets

    def headers(self) -> list:
        return self._headers

    def sequence(self) -> int:
        found = read_stamp(self._headers)
        assert found is not None
        return found[1]


class FakeInner:
    """An inner ``confluent_kafka.Producer``: keeps messages until the test delivers them."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.config = dict(config or {})
        self.on_delivery = self.config.get("on_delivery")
        self.errors_only = bool(self.config.get("delivery.report.only.error"))
        self.pending: list[tuple[Delivered, Any]] = []
        self.sent: list[Delivered] = []
        self.closed = self.purged = False

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        callback: Any = None,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        """confluent-kafka's positional slots; a per-message callback replaces the config's."""
        msg = Delivered(topic, value, timestamp, headers or [])
        self.pending.append((msg, callback or on_delivery or self.on_delivery))
        self.sent.append(msg)

    def deliver(self, n: int | None = None, err: Any = None) -> None:
        """Deliver (err None) or fail the oldest ``n`` pending messages, calling their callbacks."""
        n = len(self.pending) if n is None else n
        done, self.pending = self.pending[:n], self.pending[n:]
        for msg, callback in done:
            if callback is not None and (err is not None or not self.errors_only):
                callback(err, msg)

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = -1) -> int:
        return len(self.pending)

    def purge(self, **kw: Any) -> None:
        self.purged = True
        self.deliver(err=KafkaError(KafkaError._PURGE_QUEUE))

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> None:
        return None

    def __len__(self) -> int:
        return len(self.pending)

    def close(self) -> None:
        self.closed = True


class Snapshots(FakeInner):
    """The audit producer: decodes what it is handed."""

    def records(self) -> list:
        return [decode(m.value()) for m in self.sent]


def control(version: int = 1, **kw: Any) -> ControlRecord:
    base = {
        "group": "g",
        "version": version,
        "acks": "1",
        "batch_num_messages": 100,
        "linger_ms": 50.0,
        "message_timeout_ms": 20_000,
        "reason": "forced",
        "issued_at_ms": now_ms(),
    }
    return ControlRecord(**{**base, **kw})


def config(version: int) -> ProducerConfig:
    return reliability_config(control(version, batch_num_messages=version).librdkafka_config())


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit_topic_writer_module, "ensure_topic", lambda *a, **k: None)
    monkeypatch.setattr(autotune_module, "ensure_topic", lambda *a, **k: None)


def audited(delivery_reports: str = "all", **kw: Any) -> tuple[AuditedProducer, FakeInner, Snapshots]:
    """An AuditedProducer with fake clients, its audit topic already checked, nothing due on its own."""
    settings = ProducerAuditSettings(
        window_ms=WINDOW_MS,
        snapshot_interval_ms=10**9,
        grace_ms=0,
        delivery_reports=delivery_reports,
        autotune_probation_reports=3,
    )
    p = AuditedProducer(
        {"bootstrap.servers": "127.0.0.1:9", "log_level": 0, "client.id": "app", "acks": "all"},
        settings,
        **kw,
    )
    p._producer.close()
    p._audit_topic.producer.close()
    data, snapshots = FakeInner(p._base_config), Snapshots()
    p._producer, p._produce, p._audit_topic.producer = data, data.produce, snapshots
    p._audit_topic.checked = True
    p._next_snapshot_ms = p._next_tick_ms = 1 << 62  # snapshots only when the test ticks
    return p, data, snapshots


def candidate(p: AuditedProducer, record: ControlRecord) -> Candidate:
    """What the follower hands over: the built config and a prepared (fake) inner producer."""
    c = p._reconfiguration.build_candidate(record)
    c.producer = FakeInner(c.config)
    return c


def produce(p: AuditedProducer, n: int, ts: int = T0 + 1) -> None:
    for i in range(n):
        p.produce("t", b"v%d" % i, timestamp=ts)


def spark_view(records: list, topic: str = "t") -> dict:
    """What reconciliation makes of the producer snapshots of one window (no cluster tier data)."""
    snaps = [compact(r, 0, i) for i, r in enumerate(records) if r.topic == topic]
    start, end = records[0].window_start_ms, records[0].window_end_ms
    (row,) = reconcile(topic, start, end, snaps, ["c"], "final")
    return row


# ---------------------------------------------------------------------------------------------- history
def test_history_gives_each_sequence_range_its_configurations() -> None:
    a, b, c = config(1), config(2), config(3)
    h = ConfigHistory(a)
    assert h.configs_between(1, 10**6) == [a]
    h.change(11, b)
    h.change(21, c)
    h.change(31, a)
    assert h.configs_between(1, 10) == [a]
    assert h.configs_between(5, 11) == [a, b]
    assert h.configs_between(12, 25) == [b, c]
    assert h.configs_between(15, 40) == [b, c, a]
    assert h.configs_between(1, 40) == [a, b, c]  # distinct, in order of first use
    h.forget_before(22)
    assert h.configs_between(22, 40) == [c, a] and len(h) == 2


def test_history_change_before_any_message_replaces_the_newest() -> None:
    a, b = config(1), config(2)
    h = ConfigHistory(a)
    h.change(5, b)
    h.change(5, a)  # changed back before sequence 5 was produced: no change at all
    assert len(h) == 1 and h.configs_between(1, 9) == [a]
    h.change(5, b)
    h.change(5, b)
    assert h.configs_between(1, 9) == [a, b]
    with pytest.raises(ValueError, match="before"):
        h.change(4, a)


# ---------------------------------------------------------------------------------------------- probation
def test_probation_fails_only_on_rejections_with_nothing_delivered() -> None:
    reject = KafkaError(KafkaError.INVALID_CONFIG)
    timeout = KafkaError(KafkaError._MSG_TIMED_OUT)
    assert is_rejection(reject) and not is_rejection(timeout) and not is_rejection(None)

    p = Probation(first_sequence=100, reports=3, deadline_ms=1_000)
    p.on_failure(99, reject)  # the replaced producer's message
    p.on_failure(None, reject)  # unknown sequence
    assert (p.failed, p.rejected) == (0, 0)
    for seq in (100, 101):
        p.on_failure(seq, reject)
    assert p.verdict(handed=5, held=3, now_ms=0) is None
    p.on_failure(102, reject)
    assert p.verdict(handed=5, held=2, now_ms=0) == "fail"
    assert p.verdict(handed=6, held=2, now_ms=0) == "pass"  # one delivered: the cluster accepts it

    net = Probation(first_sequence=1, reports=3, deadline_ms=1_000)
    for seq in (1, 2, 3):
        net.on_failure(seq, timeout)
    assert net.verdict(handed=3, held=0, now_ms=0) == "pass"  # the network's fault, not the config's
    assert Probation(1, 3, 1_000).verdict(handed=0, held=0, now_ms=1_000) == "pass"  # deadline


# ---------------------------------------------------------------------------------------------- draining
def test_draining_closes_empty_producers_purges_late_ones_and_keeps_pinned_ones() -> None:
    d = Draining()
    empty, busy, late, pinned = FakeInner(), FakeInner(), FakeInner(), FakeInner()
    for f in (busy, late):
        f.produce("t", b"x", timestamp=1, headers=[])
    d.add(empty, deadline_ms=10_000, label="e", message_timeout_ms=1_000)
    d.add(busy, deadline_ms=10_000, label="b", message_timeout_ms=2_000)
    d.add(late, deadline_ms=5_000, label="l", message_timeout_ms=3_000)
    d.add(pinned, deadline_ms=0, label="p", pinned=True)
    assert d.in_flight() == 2 and d.max_message_timeout_ms() == 3_000
    assert d.reap(now_ms=6_000) == 2  # empty (at once) and late (past its deadline, purged)
    assert d.join(5.0)  # closed on threads of their own
    assert empty.closed and late.closed and late.purged and not late.pending
    assert not busy.closed and not pinned.closed
    d.unpin()
    busy.deliver()
    assert d.reap(now_ms=6_000) == 2 and not d


def test_draining_never_blocks_the_caller_on_a_close_or_an_unfinished_purge() -> None:
    d = Draining()
    slow, stuck = FakeInner(), FakeInner()
    release = threading.Event()
    slow.close = lambda: release.wait(10)  # type: ignore[method-assign]  # close() through a lossy link
    stuck.produce("t", b"x", timestamp=1, headers=[])
    stuck.purge = lambda **kw: setattr(stuck, "purged", True)  # type: ignore[method-assign]  # reports later
    d.add(slow, deadline_ms=0, label="slow")
    d.add(stuck, deadline_ms=0, label="stuck")
    started = time.monotonic()
    assert d.reap(now_ms=1_000) == 1 and time.monotonic() - started < 1.0  # slow's close runs elsewhere
    assert stuck.purged and not stuck.closed and d.in_flight() == 1  # purged, its report still to come
    assert d.reap(now_ms=2_000) == 0  # not purged twice, not closed while it holds a message
    stuck.deliver(err=KafkaError(KafkaError._PURGE_QUEUE))  # the purge's report, served by a poll
    assert d.reap(now_ms=3_000) == 1 and not d
    assert not d.join(0.05)  # slow is still closing
    release.set()
    assert d.join(5.0) and stuck.closed


# ---------------------------------------------------------------------------------------------- the swap
def test_constructor_does_not_start_the_follower_the_first_produce_does(monkeypatch, no_network) -> None:
    started: list[Any] = []

    class Follower:
        def __init__(self, **kw: Any) -> None:
            self.dead_lettered = 0

        def start(self) -> None:
            started.append(self)

        def stop(self, timeout_s: float = 5.0) -> None:
            pass

    monkeypatch.setattr(reconfiguration_module, "ControlFollower", Follower)
    p, _, _ = audited(autotune=True)
    p._next_tick_ms = 0  # as after construction
    assert started == [] and p._reconfiguration.follower is None
    p.produce("t", b"x")
    assert len(started) == 1
    p.poll(0)
    p.check()
    assert len(started) == 1  # once
    p.close(timeout_s=0)


def test_autotune_with_a_transactional_id_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"transactional\.id"):
        AuditedProducer({"bootstrap.servers": "127.0.0.1:9", "transactional.id": "x"}, autotune=True)


def test_swap_sends_new_messages_to_the_new_producer_and_counts_both_exactly(no_network) -> None:
    events: list[dict] = []
    hints: list[dict] = []
    p, old, snapshots = audited(on_reconfigure=events.append, on_hints=hints.append)
    before = p.current_config
    produce(p, 4)
    c = candidate(p, control(1, poll_interval_ms=2.0))
    new = c.producer
    p._reconfiguration.offer(c)
    p.poll(0)  # the caller's next tick swaps
    produce(p, 6)
    assert [m.sequence() for m in old.sent] == [1, 2, 3, 4]
    assert [m.sequence() for m in new.sent] == [5, 6, 7, 8, 9, 10]  # the sequence goes on
    assert p.active_control_version == 1
    assert p.current_config == {
        **before,
        "acks": "1",
        "batch.num.messages": 100,
        "linger.ms": 50.0,
        "message.timeout.ms": 20_000,
    }
    assert new.config["acks"] == "1" and new.config["on_delivery"] == p._reports.on_delivery
    assert events[-1]["kind"] == "applied" and events[-1]["from"] == before
    assert events[-1]["to"] == p.current_config and events[-1]["version"] == 1
    assert hints == [{"poll_interval_ms": 2.0, "producers": None}] and p.hints == hints[0]
    assert p.config_events == {"applied": 1}
    assert len(p) == 10  # both producers' messages
    old.deliver()
    new.deliver()
    assert len(p) == 0
    p.poll(0)
    p._reconfiguration.judge(now_ms())  # one delivered: probation passes, the old producer may close
    p._draining.reap(now_ms())
    assert old.closed and not p._draining
    p._tick(now_ms(), close_all=True)
    records = snapshots.records()
    main = [r for r in records if r.source == "app"]
    extra = [r for r in records if r.source == "app#config-1"]
    assert len(main) == len(extra) == 1 and main[0].final and extra[0].final
    assert (main[0].sent, main[0].acknowledged, main[0].failed) == (10, 10, 0)
    assert (main[0].first_sequence, main[0].last_sequence) == (1, 10)
    assert main[0].producer_config.batch_num_messages == 10000  # the one the window started with
    assert extra[0].producer_config == p.reliability and extra[0].sent == 0
    row = spark_view(records)
    assert row["producer_configs"] == 2  # the window ran with two configurations
    assert (row["sent"], row["acknowledged"], row["producers"]) == (10, 10, 1)  # and counts exactly


def test_a_window_with_one_configuration_gets_one_snapshot(no_network) -> None:
    p, _, snapshots = audited()
    produce(p, 3, ts=T0 + 1)
    p._reconfiguration.offer(candidate(p, control(1)))
    p.poll(0)
    produce(p, 2, ts=T0 + WINDOW_MS + 1)  # the next window, all with the new configuration
    p._tick(now_ms(), close_all=True)
    by_window: dict[int, list] = {}
    for r in snapshots.records():
        by_window.setdefault(r.window_start_ms, []).append(r)
    assert [len(v) for _, v in sorted(by_window.items())] == [1, 1]
    assert by_window[T0 + WINDOW_MS][0].producer_config == p.reliability


def test_hints_only_record_keeps_the_producer(no_network) -> None:
    p, old, _ = audited()
    same = control(1, acks="all", batch_num_messages=10_000, linger_ms=5.0, message_timeout_ms=300_000)
    assert same.librdkafka_config() == p.current_config
    # producer None: nothing to swap
    c = p._reconfiguration.build_candidate(dataclasses.replace(same, producers=3))
    p._reconfiguration.offer(c)
    p.poll(0)
    assert p._producer is old and p.active_control_version == 1
    assert p.hints == {"poll_interval_ms": None, "producers": 3} and not p._draining


def test_rejected_broker_side_rolls_back_and_reports(no_network, caplog) -> None:
    events: list[dict] = []
    hints: list[dict] = []
    p, old, snapshots = audited(on_reconfigure=events.append, on_hints=hints.append)
    before = p.current_config
    produce(p, 2)
    c = candidate(p, control(7, poll_interval_ms=5.0))
    new = c.producer
    p._reconfiguration.offer(c)
    p.poll(0)
    produce(p, 3)
    new.deliver(err=KafkaError(KafkaError.INVALID_REQUIRED_ACKS))  # 3 rejections, nothing delivered
    p.poll(0)  # the failure woke the tick: judged and rolled back here
    assert p._producer is old and p.current_config == before and p.active_control_version is None
    assert [e["kind"] for e in events] == ["applied", "rolled_back"]
    assert events[-1]["version"] == 7 and events[-1]["to"] == before
    assert "rejected" in events[-1]["reason"]
    assert hints[-1] == {"poll_interval_ms": None, "producers": None} and p.hints is None
    assert p.config_events == {"applied": 1, "rolled_back": 1}
    assert "rolled back" in caplog.text
    produce(p, 2)
    assert [m.sequence() for m in old.sent] == [1, 2, 6, 7]  # back on the old producer, same sequence
    old.deliver()
    p._reconfigure_tick(now_ms())
    assert new.closed  # empty: closed
    p._tick(now_ms(), close_all=True)
    records = snapshots.records()
    main = next(r for r in records if r.source == "app")
    assert (main.sent, main.acknowledged, main.failed) == (7, 4, 3)
    assert spark_view(records)["producer_configs"] == 2


def test_follower_rejection_and_expiry_change_nothing(no_network) -> None:
    events: list[dict] = []
    p, old, _ = audited(on_reconfigure=events.append)
    before = p.current_config
    p._reconfiguration.follower_rejected(control(2), "librdkafka rejected the configuration: bad")
    expired = candidate(p, control(3, expires_at_ms=now_ms() - 1))
    p._reconfiguration.offer(expired)
    p.poll(0)
    assert [e["kind"] for e in events] == ["rejected", "rejected"]
    assert events[0]["to"]["acks"] == "1" and events[0]["from"] == before
    assert p._producer is old and p.current_config == before and p.active_control_version is None
    assert expired.producer.closed


def test_errors_only_windows_wait_for_the_draining_producer(no_network) -> None:
    p, old, snapshots = audited("errors")
    produce(p, 3)
    c = candidate(p, control(1))
    new = c.producer
    p._reconfiguration.offer(c)
    p.poll(0)
    produce(p, 2)
    new.deliver()
    late = T0 + WINDOW_MS + 1  # the window has ended; grace 0
    p._tick(late)
    assert (("t", T0)) in p._windows  # not settled: the old producer still holds 3
    old.deliver()
    p._tick(late)
    assert ("t", T0) not in p._windows
    final = [r for r in snapshots.records() if r.final and r.source == "app"]
    assert (final[0].sent, final[0].acknowledged, final[0].failed) == (5, 5, 0)


def test_close_flushes_and_closes_draining_producers(no_network) -> None:
    p, old, snapshots = audited()
    produce(p, 2)
    c = candidate(p, control(1))
    p._reconfiguration.offer(c)
    p.poll(0)
    produce(p, 1)
    old.deliver()
    c.producer.deliver()
    p.close(timeout_s=0)
    assert old.closed and c.producer.closed
    main = next(r for r in snapshots.records() if r.source == "app")
    assert (main.sent, main.acknowledged) == (3, 3)


# ---------------------------------------------------------------------------------------------- follower
class Message:
    """A consumed control-topic message."""

    def __init__(self, key: bytes | None, value: bytes | None, offset: int = 0) -> None:
        self._key, self._value, self._offset = key, value, offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def topic(self) -> str:
        return "ctl"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


class Follower:
    """A ControlFollower wired to lists instead of a producer."""

    def __init__(self, factory: Any = FakeInner, running: dict | None = None) -> None:
        self.offered: list[Candidate] = []
        self.rejected: list[tuple[int, str]] = []
        self.dlq = FakeInner()
        base = {"bootstrap.servers": "127.0.0.1:9", "acks": "all", "request.required.acks": "all"}
        self.f = ControlFollower(
            conn={"bootstrap.servers": "127.0.0.1:9"},
            group="g",
            control_topic="ctl",
            dlq_topic="dlq",
            dead_letters=self.dlq,
            build=lambda r: Candidate(r, inner_config(base, r), reliability_config(inner_config(base, r))),
            offer=self.offered.append,
            reject=lambda r, why: self.rejected.append((r.version, why)),
            running=lambda: running or {"acks": "all"},
            producer_factory=factory,
        )


def test_follower_keeps_the_newest_valid_record_of_its_group(no_network) -> None:
    t = Follower()
    t.f.handle(Message(b"other", encode_control(dataclasses.replace(control(9), group="other"))))
    t.f.handle(Message(b"g", None))  # tombstone
    for v in (2, 5, 3):
        t.f.handle(Message(b"g", encode_control(control(v))))
    t.f.handle(Message(b"g", encode_control(control(8, expires_at_ms=now_ms() - 1))))
    t.f.try_newest()
    assert [c.record.version for c in t.offered] == [5]
    assert t.offered[0].producer.config["acks"] == "1"
    assert "request.required.acks" not in t.offered[0].producer.config  # the alias does not compete
    t.f.handle(Message(b"g", encode_control(control(4))))  # older than what was tried
    t.f.try_newest()
    assert len(t.offered) == 1 and t.f.dead_lettered == 0 and t.dlq.sent == []


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"garbage", "bad_magic"),
        (
            encode_object("control_record", dataclasses.asdict(control(3, batch_num_messages=0))),
            "bad_control",
        ),
        (encode_control(dataclasses.replace(control(3), group="h")), "bad_control"),
    ],
    ids=["garbage", "batch_num_messages_0", "another_group"],  # the values hold a time: ids must not
)
def test_malformed_record_is_dead_lettered_counted_and_changes_nothing(no_network, value, reason) -> None:
    t = Follower()
    t.f.handle(Message(b"g", value, offset=17))
    t.f.try_newest()
    assert t.offered == [] and t.f.dead_lettered == 1 and t.f.tried_version == 0
    (dl,) = t.dlq.pending
    headers = dict(dl[0].headers())
    assert headers[REASON_HEADER] == reason.encode() and headers[COMPONENT_HEADER] == b"audit-producer"
    assert dl[0].value() == value
    t.f.handle(Message(b"g", encode_control(control(3))))  # a valid one still applies
    t.f.try_newest()
    assert [c.record.version for c in t.offered] == [3]


def test_follower_rejects_what_librdkafka_or_the_cluster_refuses(no_network) -> None:
    def refuse(config: dict) -> Any:
        raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "`acks` must be set to `all`"))

    t = Follower(factory=refuse)
    t.f.handle(Message(b"g", encode_control(control(1, enable_idempotence=True))))
    t.f.try_newest()
    assert t.offered == [] and t.rejected[0][0] == 1 and "librdkafka rejected" in t.rejected[0][1]
    assert t.f.tried_version == 1

    unreachable: list[FakeInner] = []

    def no_cluster(config: dict) -> FakeInner:
        f = FakeInner(config)
        f.list_topics = lambda *a, **k: (_ for _ in ()).throw(
            KafkaException(KafkaError(KafkaError._TRANSPORT))
        )
        unreachable.append(f)
        return f

    t = Follower(factory=no_cluster)
    t.f.handle(Message(b"g", encode_control(control(2))))
    t.f.try_newest()
    assert t.offered == [] and "cannot reach the cluster" in t.rejected[0][1] and unreachable[0].closed


def test_follower_offers_hints_only_records_without_a_producer(no_network) -> None:
    running = controlled_properties(reliability_config(control(1).librdkafka_config()))
    t = Follower(running=running)
    t.f.handle(Message(b"g", encode_control(control(1, poll_interval_ms=3.0))))
    t.f.try_newest()
    assert t.offered[0].producer is None


# ---------------------------------------------------------------------------------------------- run_load
class LoadProducer:
    """Stands in for AuditedProducer in run_load."""

    instances: ClassVar[list[LoadProducer]] = []
    full = False  # every produce() raises BufferError
    initial_hints: dict | None = None

    def __init__(self, config: Any, audit: Any = None, **kw: Any) -> None:
        self.produced = 0
        self.hints: dict | None = self.initial_hints
        self.intervals: list = []
        self.reliability = reliability_config({})
        self.producer_id, self.snapshots_sent = f"fake-{len(LoadProducer.instances)}", 0
        self.config_events: dict = {}
        self.active_control_version = None
        self.config, self.closed = dict(config), False
        LoadProducer.instances.append(self)

    @property
    def current_config(self) -> dict:
        return {"batch.num.messages": 7}

    def check(self) -> None:
        pass

    def produce(self, topic: str, value: Any) -> None:
        if self.full:
            raise BufferError("queue full")
        self.produced += 1

    def poll(self, timeout: float = 0) -> int:
        if timeout:
            time.sleep(timeout)
        return 0

    def set_poll_interval(self, ms: float | None) -> None:
        self.intervals.append(ms)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def load_producer(monkeypatch: pytest.MonkeyPatch) -> type[LoadProducer]:
    LoadProducer.instances = []
    monkeypatch.setattr(load_module, "AuditedProducer", LoadProducer)
    return LoadProducer


def test_messages_not_handed_over_in_time_count_as_lost(load_producer, monkeypatch) -> None:
    monkeypatch.setattr(load_producer, "full", True)
    result = run_load({}, "t", rate=0, count=3, duration_s=None, handover_timeout_ms=20)
    assert (result.produced, result.not_handed_over, result.offered) == (0, 3, 3)


def test_a_load_behind_its_schedule_offers_every_due_message_and_loses_the_late_ones(
    load_producer, monkeypatch
):
    real_produce = LoadProducer.produce

    def slow(self: LoadProducer, topic: str, value: Any) -> None:  # a busy application: 5 ms per message
        time.sleep(0.005)
        real_produce(self, topic, value)

    monkeypatch.setattr(load_producer, "produce", slow)
    result = run_load({}, "t", rate=1000, duration_s=0.5, handover_timeout_ms=50)
    assert 499 <= result.offered <= 501  # every message due in the 0.5 s, as at full speed
    assert result.produced <= 200  # at most ~100 in the run and ~50 of the last 50 ms after it
    assert result.not_handed_over == result.offered - result.produced >= 300


def test_the_poll_interval_hint_changes_the_pace_only_when_followed(load_producer, monkeypatch) -> None:
    monkeypatch.setattr(load_producer, "initial_hints", {"poll_interval_ms": 100.0, "producers": None})
    followed = run_load({}, "t", rate=1000, duration_s=0.5, follow_hints=True)
    assert load_producer.instances[-1].intervals == [100.0]  # reported with the configuration
    assert followed.offered <= 20  # 10 messages/s for 0.5 s
    unchanged = run_load({}, "t", rate=1000, duration_s=0.5)
    assert load_producer.instances[-1].intervals == []
    assert unchanged.offered >= 100  # 1000 messages/s: the offered load is the caller's


def test_the_producers_hint_spreads_the_same_offered_load_over_more_producers(load_producer, monkeypatch):
    monkeypatch.setattr(load_producer, "initial_hints", {"poll_interval_ms": None, "producers": 3})
    result = run_load({"client.id": "c"}, "t", rate=0, count=30, duration_s=None)
    extras = load_producer.instances[1:]
    assert [p.produced for p in load_producer.instances] == [10, 10, 10]  # round-robin
    assert result.offered == result.produced == 30 and result.max_producers == 3
    assert result.producer_ids == ["fake-0", "fake-1", "fake-2"] and result.producer_id == "fake-0"
    # the extras start with what the first runs, and are closed with it
    assert all(p.config == {"client.id": "c", "batch.num.messages": 7} and p.closed for p in extras)
    unchanged = run_load({}, "t", rate=0, count=30, duration_s=None, follow_producers=False)
    assert unchanged.max_producers == 1 and load_producer.instances[-1].produced == 30


def test_the_load_starts_with_the_producers_it_is_given_and_a_hint_replaces_them(load_producer, monkeypatch):
    result = run_load({}, "t", rate=0, count=30, duration_s=None, producers=3)
    assert [p.produced for p in load_producer.instances] == [10, 10, 10] and result.max_producers == 3
    load_producer.instances = []
    monkeypatch.setattr(load_producer, "initial_hints", {"poll_interval_ms": None, "producers": 2})
    hinted = run_load({}, "t", rate=0, count=30, duration_s=None, producers=3)
    assert [p.produced for p in load_producer.instances] == [15, 15] and hinted.max_producers == 2
    with pytest.raises(ValueError, match="producers=0"):
        run_load({}, "t", rate=0, count=1, duration_s=None, producers=0)


def test_a_full_producer_is_passed_over_for_one_with_room(load_producer, monkeypatch):
    monkeypatch.setattr(load_producer, "initial_hints", {"poll_interval_ms": None, "producers": 3})
    real_produce = LoadProducer.produce

    def produce(self: LoadProducer, topic: str, value: Any) -> None:
        if self is LoadProducer.instances[0]:  # jammed: its queue stays full
            raise BufferError("queue full")
        real_produce(self, topic, value)

    monkeypatch.setattr(load_producer, "produce", produce)
    result = run_load({}, "t", rate=0, count=30, duration_s=None, handover_timeout_ms=20)
    assert (result.produced, result.not_handed_over) == (30, 0)  # none waits on the jammed one
    assert [p.produced for p in load_producer.instances] == [0, 15, 15]


def test_the_load_closes_its_producers_at_once(load_producer, monkeypatch):
    """Each close may wait out its flush deadline: one after another, N producers would take N times that."""
    monkeypatch.setattr(load_producer, "initial_hints", {"poll_interval_ms": None, "producers": 3})
    together = threading.Barrier(3, timeout=5)  # passes only when all three closes run at the same time

    def close(self: LoadProducer) -> None:
        together.wait()
        self.closed = True

    monkeypatch.setattr(load_producer, "close", close)
    result = run_load({}, "t", rate=0, count=30, duration_s=None)
    assert result.max_producers == 3 and all(p.closed for p in load_producer.instances)


def test_a_withdrawn_producers_hint_retires_the_extras(load_producer, monkeypatch):
    monkeypatch.setattr(load_producer, "initial_hints", {"poll_interval_ms": None, "producers": 2})
    real_produce = LoadProducer.produce

    def produce(self: LoadProducer, topic: str, value: Any) -> None:
        real_produce(self, topic, value)
        if self is LoadProducer.instances[0] and self.produced == 5:
            self.hints = None  # rolled back: the hint is withdrawn

    monkeypatch.setattr(load_producer, "produce", produce)
    result = run_load({}, "t", rate=0, count=3000, duration_s=None)
    first, extra = load_producer.instances
    assert extra.closed and result.produced == 3000 and result.max_producers == 2
    # hints are read between steps (1,000 messages as fast as possible, else 10 ms worth of the rate)
    assert (first.produced, extra.produced) == (2500, 500)
    assert result.producer_ids == ["fake-0", "fake-1"]


def test_run_load_returns_the_configuration_events(load_producer, monkeypatch) -> None:
    event = {"kind": "applied", "version": 1}
    seen: list[dict] = []

    def check(self: LoadProducer) -> None:
        self.on_reconfigure(event)

    real_init = LoadProducer.__init__

    def init(self: LoadProducer, config: Any, audit: Any = None, **kw: Any) -> None:
        real_init(self, config, audit, **kw)
        self.on_reconfigure = kw["on_reconfigure"]

    monkeypatch.setattr(load_producer, "__init__", init)
    monkeypatch.setattr(load_producer, "check", check)
    result = run_load({}, "t", rate=0, count=1, duration_s=None, on_reconfigure=seen.append)
    assert result.config_events == [event] and seen == [event]


# ---------------------------------------------------------------------------------------------- verifier
def test_the_verifier_adds_up_the_snapshots_of_a_producer(monkeypatch, no_network) -> None:
    """audit_consumer.ground_truth takes sent from the producer snapshots: extra config snapshots add 0."""
    import audit_consumer.ground_truth as verify_module
    from audit_record.reader import SnapshotTable

    p, old, snapshots = audited()
    produce(p, 3)
    c = candidate(p, control(1))
    p._reconfiguration.offer(c)
    p.poll(0)
    produce(p, 2)
    old.deliver()
    c.producer.deliver()
    p._tick(now_ms(), close_all=True)
    records = snapshots.records()
    assert len(records) == 2
    for order in (records, records[::-1]):  # whichever the reader meets first
        table = SnapshotTable()
        for r in order:
            table.add(r)
        monkeypatch.setattr(verify_module, "read_to_end", lambda *a, **k: iter(old.sent + c.producer.sent))
        monkeypatch.setattr(verify_module, "read_audit_log", lambda *a, t=table, **k: t)
        v = verify_module.verify_topic({}, "t", WINDOW_MS, audit_topic="audit")
        (row,) = v.rows.values()
        assert (row.sent, row.unique, row.lost, row.final) == (5, 5, 0, True)
