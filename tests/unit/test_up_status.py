"""Issue 42: ``up``'s status names the topics it audits now, no live frames without a terminal, and the
Kafka clients of the alert and control sinks are closed (not left to the garbage collector)."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kafka_audit import instances
from kafka_audit.cli import app
from kafka_audit.up import STATUS_FILE, ComponentFailed, Platform, read_status
from kafka_audit.up_cli import topic_lines
from kafka_audit.up_settings import load_up_settings
from kafka_plumbing.clients import close_producer

T0 = 1_795_000_000_000


def _row(topic: str, start: int, state: str = "final", tier: str = "cluster:local", **kw: Any) -> dict:
    return {
        "topic": topic,
        "window_start_ms": start,
        "window_end_ms": start + 5_000,
        "tier": tier,
        "state": state,
        "sent": 100,
        "received": 100,
        "unaudited": 0,
        "loss_rate": 0.0,
        "duplicate_rate": 0.0,
        **kw,
    }


class FakeConsumer:
    def __init__(self) -> None:
        self.topics: list[str] = []


class FakeJob:
    def __init__(self) -> None:
        self.calls = 0

    def exception(self) -> None:
        return None

    def progress(self) -> dict[str, Any]:
        self.calls += 1
        return {"lag_s": 1.5}


def _monitor_platform(tmp_path: Path, console: Console | None = None) -> Platform:
    s = load_up_settings(
        None,
        bootstrap_servers="127.0.0.1:9",
        topic_patterns=[r"shop\..*"],
        data_dir=tmp_path / "up",
    )
    platform = Platform(s, console or Console(file=io.StringIO()))
    platform.bootstrap = "127.0.0.1:9"
    platform.consumer = FakeConsumer()  # type: ignore[assignment]
    return platform


def test_status_names_the_discovered_topics_and_their_last_final_window(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_AUDIT_STATE_DIR", str(tmp_path / "state"))
    platform = _monitor_platform(tmp_path)
    platform.s.data_dir.mkdir(parents=True)
    assert platform.refresh_status()  # first write: no topic discovered yet
    assert read_status(platform.s.data_dir)["topics"] == []
    assert not platform.refresh_status()  # nothing changed: not rewritten

    platform.consumer.topics = ["shop.orders", "shop.payments"]  # type: ignore[union-attr]
    platform._on_results(
        0,
        [
            _row("shop.orders", T0, loss_rate=0.25),
            _row("shop.orders", T0 + 5_000, state="provisional"),  # not final: not the last final one
            _row("shop.orders", T0, tier="cluster:other", loss_rate=0.5),  # another tier's view
        ],
    )
    assert platform.refresh_status()
    record = read_status(platform.s.data_dir)
    assert record is not None and record["mode"] == "monitor"
    assert record["topics"] == ["shop.orders", "shop.payments"]
    assert record["topic_patterns"] == [r"shop\..*"]
    last = record["last_final_windows"]
    assert set(last) == {"shop.orders"}
    assert last["shop.orders"]["window_start_ms"] == T0
    assert last["shop.orders"]["tier"] == "cluster:local" and last["shop.orders"]["loss_rate"] == 0.25
    # The registry has the same record, so `status` finds it whatever its data directory.
    registered = json.loads((instances.instances_dir() / f"{os.getpid()}.json").read_text())
    assert registered["topics"] == record["topics"] and registered["started_at"] == record["started_at"]

    result = CliRunner().invoke(app, ["status"])
    assert result.exit_code == 0, result.output
    assert "2 audited now (named, or matching /shop\\..*/)" in result.output
    assert "shop.orders: last final window" in result.output and "R_l 25.00%" in result.output
    assert "shop.payments: no final window yet" in result.output
    result = CliRunner().invoke(app, ["status", "--json"])
    assert json.loads(result.output.splitlines()[0])["topics"] == ["shop.orders", "shop.payments"]
    instances.unregister(os.getpid())
    (platform.s.data_dir / STATUS_FILE).unlink()


def test_topic_lines_show_utc_time_and_rates():
    lines = topic_lines(["a", "b"], {"a": {"window_start_ms": 0, "sent": 1234, "loss_rate": None}})
    assert lines == [
        "a: last final window 1970-01-01 00:00:00 UTC (sent 1,234, R_l -, R_d -)",
        "b: no final window yet",
    ]


def test_without_a_terminal_run_prints_progress_lines_and_no_live_table(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_AUDIT_STATE_DIR", str(tmp_path / "state"))
    out = io.StringIO()
    console = Console(file=out, width=140)
    assert not console.is_terminal
    platform = _monitor_platform(tmp_path, console)
    platform.s.data_dir.mkdir(parents=True)
    job = FakeJob()
    platform.job = job  # type: ignore[assignment]
    platform.consumer.topics = ["shop.orders"]  # type: ignore[union-attr]
    platform._on_results(0, [_row("shop.orders", T0)])
    runner = threading.Thread(target=platform.run, args=(False,))
    runner.start()
    deadline = time.monotonic() + 10
    while job.calls < 4 and time.monotonic() < deadline:  # four rounds of 0.5 s
        time.sleep(0.05)
    platform.stop_event.set()
    runner.join(10)
    assert not runner.is_alive()
    text = out.getvalue()
    assert "1 final, 0 provisional window result(s) on 1 topic(s); audit lag 1.5 s" in text
    assert text.count("\n") == 1, text  # one line: the counts did not change after it
    assert "window results" not in text and "┏" not in text  # no frame of the live table
    instances.unregister(os.getpid())


class FakeProducer:
    def __init__(self, config: dict[str, Any] | None = None, queued: int = 0) -> None:
        self.queued, self.closed, self.purged = queued, 0, False

    def __len__(self) -> int:
        return self.queued

    def flush(self, timeout: float | None = None) -> int:
        return self.queued

    def purge(self, **_kw: Any) -> None:
        self.purged = True

    def poll(self, _timeout: float) -> int:
        return 0

    def close(self) -> None:
        self.closed += 1


def test_close_producer_purges_what_the_flush_left_then_closes():
    p = FakeProducer(queued=3)
    assert close_producer(p, 0.1) == 3
    assert p.purged and p.closed == 1
    q = FakeProducer()
    assert close_producer(q) == 0
    assert not q.purged and q.closed == 1


@pytest.mark.parametrize("which", ["alerts", "control"])
def test_alert_and_control_sinks_close_their_producer_once(monkeypatch, which):
    made: list[FakeProducer] = []

    def factory(config: dict[str, Any]) -> FakeProducer:
        made.append(FakeProducer(config))
        return made[-1]

    if which == "alerts":
        import alerts.sinks.kafka

        monkeypatch.setattr(alerts.sinks.kafka, "Producer", factory)
        sink: Any = alerts.sinks.kafka.KafkaAlertSink({"bootstrap.servers": "127.0.0.1:9"}, "alerts")
    else:
        from control_loop.publish import ControlPublisher

        sink = ControlPublisher({"bootstrap.servers": "127.0.0.1:9"}, "ctl", producer_factory=factory)
    sink.close()
    sink.close()
    assert [p.closed for p in made] == [1]


def test_up_stops_with_an_error_naming_a_failed_or_stopped_audit_consumer(tmp_path):
    """A dead audit consumer is not left unnoticed: ``run`` raises ComponentFailed naming it."""
    platform = _monitor_platform(tmp_path)
    platform.job = FakeJob()  # type: ignore[assignment]

    def crash(_stop: threading.Event) -> None:
        raise ConnectionError("broker gone")

    platform._spawn("audit-consumer", crash, platform.stop_event, required=True)
    platform._threads[-1].join(10)
    with pytest.raises(ComponentFailed, match=r"audit-consumer failed: ConnectionError\('broker gone'\)"):
        platform.run(until_final=False)

    quiet = _monitor_platform(tmp_path)
    quiet.job = FakeJob()  # type: ignore[assignment]
    quiet._spawn("audit-consumer", lambda _stop: None, quiet.stop_event, required=True)
    quiet._spawn("load", lambda: None)  # the load may end: not required
    for th in quiet._threads:
        th.join(10)
    with pytest.raises(ComponentFailed, match="audit-consumer stopped while kafka-audit up ran"):
        quiet.run(until_final=False)

    healthy = _monitor_platform(tmp_path)
    healthy.job = FakeJob()  # type: ignore[assignment]
    healthy._spawn("audit-consumer", lambda stop: stop.wait(30), healthy.stop_event, required=True)
    threading.Timer(1.0, healthy.stop_event.set).start()
    healthy.run(until_final=False)  # returns once stopped: a consumer that ran until stop is fine
    healthy._threads[-1].join(10)
    assert healthy._failures == {}
    assert healthy.job.calls >= 1  # type: ignore[union-attr]
