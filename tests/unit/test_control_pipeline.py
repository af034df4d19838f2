"""The control loop around the controller: advise writes nothing, apply writes records, kill switch,
state round trip and resume, metrics, listeners, forced records."""

from __future__ import annotations

import json
from typing import Any

import pytest

from audit_record.control_record import ControlRecord, decode_control
from control_loop.config import GroupConfig
from control_loop.controller_state import STATE_FILE, ControllerState, ControlStateFile
from control_loop.decide import Controller
from control_loop.loop import ControlLoop, attach_to_job
from control_loop.publish import ControlPublisher, PublishError, forced_record
from control_loop.settings import KILL_ENV, KILL_FILE, ControlSettings
from kafka_plumbing.errors import ConfigError
from tests.unit.control_rows import T0, now_after, row


class FakeError:
    def __init__(self, text: str) -> None:
        self.text = text

    def str(self) -> str:
        return self.text


class FakeProducer:
    """confluent_kafka.Producer stand-in: records what is produced, acknowledges (or fails) on flush."""

    def __init__(self, config: dict[str, Any], fail: str | None = None) -> None:
        self.config = config
        self.fail = fail
        self.sent: list[tuple[str, bytes, bytes]] = []
        self._callbacks: list[Any] = []

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any) -> None:
        self.sent.append((topic, key, value))
        self._callbacks.append(on_delivery)

    def flush(self, _timeout: float | None = None) -> int:
        for cb in self._callbacks:
            cb(FakeError(self.fail) if self.fail else None, None)
        self._callbacks = []
        return 0


class FakeReader:
    def __init__(self, latest: dict[str, ControlRecord] | None = None) -> None:
        self.latest = dict(latest or {})
        self.closed = False

    def read_to_end(self) -> dict[str, ControlRecord]:
        return self.latest

    def poll(self) -> dict[str, ControlRecord]:
        return self.latest

    def versions(self) -> dict[str, int]:
        return {g: r.version for g, r in self.latest.items()}

    def close(self) -> None:
        self.closed = True


def forced(version: int, group: str = "orders") -> ControlRecord:
    return ControlRecord(
        group=group,
        version=version,
        acks="1",
        batch_num_messages=2,
        linger_ms=5.0,
        message_timeout_ms=5_000,
        reason="forced",
        issued_at_ms=T0,
    )


@pytest.fixture(autouse=True)
def _no_kill_env(monkeypatch):
    monkeypatch.delenv(KILL_ENV, raising=False)


def make_loop(tmp_path, mode: str = "apply", fail: str | None = None, reader: FakeReader | None = None, **kw):
    """A loop whose control topic is a FakeProducer; ``loop.producers`` lists the producers created."""
    producers: list[FakeProducer] = []

    def producer_factory(config: dict[str, Any]) -> FakeProducer:
        producers.append(FakeProducer(config, fail))
        return producers[-1]

    settings = ControlSettings(mode=mode, **{"dwell_ms": 0, "expiry_ms": 60_000, **kw})
    loop = ControlLoop(
        settings,
        {"bootstrap.servers": "127.0.0.1:9"},
        tmp_path,
        publisher_factory=lambda: ControlPublisher(
            {"bootstrap.servers": "127.0.0.1:9"}, "ctl", producer_factory=producer_factory, create_topic=False
        ),
        reader_factory=lambda: reader if reader is not None else FakeReader(),
    )
    loop.producers = producers  # type: ignore[attr-defined]
    return loop


def test_advise_writes_nothing_to_the_control_topic(tmp_path):
    loop = make_loop(tmp_path, mode="advise")
    decisions = loop.process([row(0)], now_after(0))
    assert [d.kind for d in decisions] == ["advice"]
    assert loop.producers == [] and loop.publisher is None and loop.reader is None  # nothing created
    assert loop.unsent == []


def test_apply_writes_one_record_per_change(tmp_path):
    loop = make_loop(tmp_path)
    (d,) = loop.process([row(0)], now_after(0))
    assert d.kind == "change"
    (producer,) = loop.producers
    assert producer.config["acks"] == "all" and producer.config["enable.idempotence"] is True
    ((topic, key, value),) = producer.sent
    record = decode_control(value)
    assert (topic, key, record.group, record.version) == ("ctl", b"orders", "orders", 1)
    assert (record.acks, record.batch_num_messages, record.message_timeout_ms) == ("1", 4, 5_000)
    assert (record.reason, record.issued_at_ms, record.expires_at_ms) == (
        "suggestion",
        now_after(0),
        now_after(0) + 60_000,
    )
    assert (record.predicted_gamma_before, record.predicted_gamma_after) == (0.72, 0.93)
    assert (record.measured_gamma_before, record.packet_loss_pct, record.delay_ms) == (0.7, 10.0, 50.0)
    assert record.poll_interval_ms is None and record.producers is None  # hints unchanged
    assert loop.unsent == []


def test_a_control_topic_that_cannot_be_read_closes_its_reader_and_decides_nothing(tmp_path):
    class AwayReader(FakeReader):
        def read_to_end(self) -> dict[str, ControlRecord]:
            raise RuntimeError("broker away")

    away = AwayReader()
    loop = make_loop(tmp_path, reader=away)
    assert loop.process([row(0)], now_after(0)) == []
    assert away.closed and loop.reader is None and loop.producers == []


def test_versions_continue_after_a_forced_record(tmp_path):
    loop = make_loop(tmp_path, reader=FakeReader({"orders": forced(7)}))
    (d,) = loop.process([row(0)], now_after(0))
    assert d.version == 8 and decode_control(loop.producers[0].sent[0][2]).version == 8


def test_unacknowledged_records_are_kept_saved_and_written_again(tmp_path):
    loop = make_loop(tmp_path, fail="broker down")
    loop.process([row(0)], now_after(0))
    assert [r.version for r in loop.unsent] == [1]
    assert loop.metrics.write_failures._value.get() == 1
    # a restarted driver has the record still to write
    again = make_loop(tmp_path)
    assert [r.version for r in again.unsent] == [1]
    again.process([], now_after(1))
    assert [decode_control(v).version for _, _, v in again.producers[0].sent] == [1] and again.unsent == []
    # an expired one is dropped, not written
    late = make_loop(tmp_path / "other", fail="down", expiry_ms=1)
    late.process([row(0)], now_after(0))
    late.process([], now_after(0) + 5)
    assert late.unsent == []


def test_kill_switch_file_and_environment(tmp_path, monkeypatch):
    loop = make_loop(tmp_path)
    (tmp_path / KILL_FILE).write_text("stop")
    (d,) = loop.process([row(0)], now_after(0))
    assert (d.kind, d.reason) == ("advice", "kill_switch")
    assert loop.producers[0].sent == []
    assert loop.metrics.kill_switch._value.get() == 1
    (tmp_path / KILL_FILE).unlink()
    monkeypatch.setenv(KILL_ENV, "1")
    assert loop.kill_switch() == f"environment {KILL_ENV}"
    monkeypatch.delenv(KILL_ENV)
    (d,) = loop.process([row(1)], now_after(1))
    assert d.kind == "change" and len(loop.producers[0].sent) == 1
    assert loop.metrics.kill_switch._value.get() == 0


def test_metrics_count_decisions_by_group_kind_reason(tmp_path):
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    loop = ControlLoop(ControlSettings(mode="advise", dwell_ms=10**9), {}, tmp_path, registry=registry)
    get = registry.get_sample_value
    loop.process([row(0, changes={})], now_after(0))  # the group is seen: every series exported at 0
    labels = {"group": "orders", "kind": "change", "reason": "suggestion"}
    assert get("kafka_audit_control_decisions_total", labels) == 0
    loop.process([row(1)], now_after(1))
    loop.process([row(2)], now_after(2))
    assert (
        get("kafka_audit_control_decisions_total", {**labels, "kind": "advice", "reason": "advise_mode"}) == 1
    )
    assert get("kafka_audit_control_decisions_total", {**labels, "kind": "held", "reason": "dwell"}) == 1
    assert get("kafka_audit_control_kill_switch") == 0


def test_listeners_get_every_decision_and_never_break_the_loop(tmp_path, caplog):
    got: list[dict[str, Any]] = []

    def boom(_d: dict[str, Any]) -> None:
        raise RuntimeError("bug")

    loop = ControlLoop(ControlSettings(mode="advise", dwell_ms=0), {}, tmp_path, listeners=[boom, got.append])
    loop.process([row(0)], now_after(0))
    assert [d["kind"] for d in got] == ["advice"] and got[0]["changes"] == {"batch.num.messages": 4}
    json.dumps(got[0])  # JSON-ready
    assert "control listener failed" in caplog.text

    def broken(*_a, **_k):
        raise RuntimeError("controller bug")

    loop.controller.decide = broken  # type: ignore[method-assign]
    loop.on_batch(7, [row(1)])  # never raises into the job
    assert "control loop failed on micro-batch 7" in caplog.text


def test_state_round_trip_and_resume_after_a_restart(tmp_path):
    loop = make_loop(tmp_path, rollback_block_ms=10**9)
    loop.process([row(0)], now_after(0))  # change, evaluation pending
    st = loop.controller.state
    # what the file holds: the same state; a new driver resumes with the evaluation and the version
    saved = ControlStateFile(tmp_path / STATE_FILE).load()
    assert saved is not None and saved[0] == st and saved[1] == []
    resumed = make_loop(tmp_path)
    assert resumed.controller.state == st
    assert st.groups["orders"].evaluation is not None
    # everything survives JSON: versions, times, history, evaluation, blocked configurations
    copy = ControllerState.from_json(json.loads(json.dumps(st.to_json())))
    copy.groups["orders"].blocked.append(({"acks": "0"}, T0 + 5))
    assert ControllerState.from_json(json.loads(json.dumps(copy.to_json()))) == copy
    assert resumed.process([row(0)], now_after(0)) == []  # the re-run micro-batch changes nothing
    (d,) = resumed.process([row(1)], now_after(1))
    assert (d.kind, d.reason) == ("held", "evaluating")
    with pytest.raises(ValueError, match="not a controller state"):
        ControllerState.from_json({"groups": {"orders": {"config": None}}})


def test_unusable_state_file_is_set_aside(tmp_path):
    (tmp_path / STATE_FILE).write_text(json.dumps({"format": 1, "groups": {"x": {"nope": 1}}}))
    loop = ControlLoop(ControlSettings(mode="advise"), {}, tmp_path)
    assert loop.controller.state == ControllerState()
    assert list(tmp_path.glob(f"{STATE_FILE}.corrupt-*"))


def test_attach_to_job_off_attaches_nothing(tmp_path):
    from spark_streaming.job import ReconciliationJob
    from spark_streaming.settings import SparkJobSettings

    job = ReconciliationJob(SparkJobSettings(bootstrap_servers="127.0.0.1:9", checkpoint_dir=tmp_path / "c"))
    loop = attach_to_job(job, ControlSettings(mode="apply", bootstrap_servers="10.0.0.1:9092"))
    assert job.listeners == [loop.on_batch] and job.closers == [loop.close]
    assert (
        loop.listeners is job.control_listeners and loop.kafka_config["bootstrap.servers"] == "10.0.0.1:9092"
    )
    assert (
        loop.state_file.path == tmp_path / "c" / STATE_FILE and loop.kill_file == tmp_path / "c" / KILL_FILE
    )
    assert job.metrics.registry.get_sample_value("kafka_audit_control_kill_switch") == 0
    other = ReconciliationJob(
        SparkJobSettings(bootstrap_servers="127.0.0.1:9", checkpoint_dir=tmp_path / "d")
    )
    attach_to_job(other, ControlSettings(mode="off"))
    assert other.listeners == [] and other.closers == []


def test_publisher_raises_when_not_acknowledged():
    def failing(config: dict[str, Any]) -> FakeProducer:
        return FakeProducer(config, fail="Local: Message timed out")

    publisher = ControlPublisher({}, "ctl", producer_factory=failing, create_topic=False)
    with pytest.raises(PublishError, match="v3 of group 'orders' not written: Local: Message timed out"):
        publisher.publish(forced(3))


def test_forced_record_from_the_newest_or_librdkafka_defaults():
    first = forced_record("orders", None, {"batch.num.messages": 8}, T0)
    assert (first.version, first.reason, first.acks, first.batch_num_messages) == (1, "forced", "all", 8)
    assert (first.linger_ms, first.message_timeout_ms, first.expires_at_ms) == (5.0, 300_000, None)
    nxt = forced_record("orders", forced(4), {"acks": "0", "producers": 3}, T0, expiry_ms=1_000)
    assert (nxt.version, nxt.acks, nxt.batch_num_messages, nxt.producers) == (5, "0", 2, 3)
    assert nxt.expires_at_ms == T0 + 1_000 and nxt.poll_interval_ms is None
    with pytest.raises(ConfigError, match="acks"):
        forced_record("orders", None, {"acks": "2"}, T0)
    with pytest.raises(ConfigError, match="batch_num_messages=0: allowed values are 1-1000000"):
        forced_record("orders", None, {"batch.num.messages": 0}, T0)
    with pytest.raises(ConfigError, match=r"enable\.idempotence=true needs acks=all"):
        forced_record("orders", None, {"acks": "1", "enable.idempotence": True}, T0)
    with pytest.raises(ConfigError, match="not a controllable property"):
        forced_record("orders", None, {"compression.type": "lz4"}, T0)


def test_group_config_from_a_row():
    c = GroupConfig.from_row(row(0, acks="-1"))
    assert c is not None and (c.acks, c.batch_num_messages, c.linger_ms) == ("all", 1, 5.0)
    assert GroupConfig.from_row({"acks": None}) is None
    assert Controller(ControlSettings()).bounds_problems(c) == []
