"""Issue 15 items 1-2 without a broker: unaudited traffic visible, monitor settings, instance registry."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

from alerts import AlertEngine, AlertSettings, AlertStatus
from alerts.event import AUDIT_LAG, UNACCOUNTED_MESSAGES, UNAUDITED_PRODUCERS, UNAUDITED_TRAFFIC
from dashboards.report import render
from dashboards.report_tables import summary_table, unaudited_table
from kafka_audit import instances
from kafka_audit.cli import app
from kafka_audit.results_table import results_table
from kafka_audit.up_settings import load_up_settings
from spark_streaming.metrics import ResultMetrics

W = 10_000
T0 = 1_800_000_000_000


def window(i: int, state: str = "final", topic: str = "orders", **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "kind": "result",
        "topic": topic,
        "tier": "cluster:local",
        "state": state,
        "window_start_ms": T0 + i * W,
        "window_end_ms": T0 + (i + 1) * W,
        "sent": 1000,
        "received": 1000,
        "unique": 1000,
        "duplicated": 0,
        "unaudited": 0,
        "producers": 1,
        "unaudited_producers": 0,
        "completeness": 1.0,
        "loss_rate": 0.0,
        "duplicate_rate": 0.0,
    }
    row.update(kw)
    return row


def kcat_only(i: int, **kw: Any) -> dict[str, Any]:
    """A window of a topic only kcat writes to: nothing audited, 8,000 unaudited messages."""
    base = dict(
        sent=0, unique=0, received=8000, unaudited=8000, producers=0, completeness=None, loss_rate=None
    )
    return window(i, **{"topic": "legacy", **base, "duplicate_rate": None, **kw})


def only(events, name):
    return [e for e in events if e.alertname == name]


def test_unaudited_traffic_beside_audited_producers_fires_and_resolves():
    engine = AlertEngine(AlertSettings())
    mixed = window(0, received=1200, unaudited=200)  # kcat wrote 200 beside an audited producer's 1000
    (ev,) = only(engine.observe([mixed], T0), UNAUDITED_TRAFFIC)
    assert ev.status is AlertStatus.FIRING and ev.severity == "warning"
    assert ev.value == pytest.approx(200 / 1200) and ev.numbers["unaudited"] == 200
    assert "200 unaudited message(s)" in ev.summary and "AuditedProducer" in (ev.suggestion or "")
    assert "not counted as lost" in ev.description
    assert only(engine.observe([window(1)], T0 + 1), UNAUDITED_TRAFFIC) == []  # keep firing: 2 windows
    (res,) = only(engine.observe([window(2)], T0 + 2), UNAUDITED_TRAFFIC)
    assert res.status is AlertStatus.RESOLVED


def test_a_kcat_burst_in_a_window_of_its_own_still_alerts_on_an_audited_topic():
    engine = AlertEngine(AlertSettings())
    burst = kcat_only(0, topic="orders")  # before any audited producer was seen: not yet an audited topic
    assert only(engine.observe([burst], T0), UNAUDITED_TRAFFIC) == []
    engine.observe([window(1)], T0 + 1)  # the audited producer's window
    restored = AlertEngine(AlertSettings())
    restored.restore(engine.to_state())  # what the engine knows of the topic survives a restart
    (ev,) = only(restored.observe([kcat_only(2, topic="orders")], T0 + 2), UNAUDITED_TRAFFIC)
    assert ev.status is AlertStatus.FIRING and "0 in this window" in ev.description
    forgetful = AlertEngine(AlertSettings(audited_producers_memory_ms=0))
    forgetful.observe([window(1)], T0)
    assert only(forgetful.observe([kcat_only(3, topic="orders")], T0 + 1), UNAUDITED_TRAFFIC) == []


def test_an_uninstrumented_topic_does_not_alert_unless_asked_and_the_threshold_applies():
    assert only(AlertEngine(AlertSettings()).observe([kcat_only(0)], T0), UNAUDITED_TRAFFIC) == []
    strict = AlertEngine(AlertSettings(unaudited_traffic_needs_audited=False))
    assert len(only(strict.observe([kcat_only(0)], T0), UNAUDITED_TRAFFIC)) == 1
    lenient = AlertEngine(AlertSettings(unaudited_share_threshold=0.2))
    assert only(lenient.observe([window(0, received=1200, unaudited=200)], T0), UNAUDITED_TRAFFIC) == []
    assert len(only(lenient.observe([window(1, received=2000, unaudited=1000)], T0), UNAUDITED_TRAFFIC)) == 1


def test_unaudited_messages_are_never_loss_for_the_completeness_rule():
    rows = [kcat_only(0), window(0, received=9000, unaudited=8000)]
    events = AlertEngine(AlertSettings()).observe(rows, T0)
    assert [e.alertname for e in events if e.alertname.startswith("KafkaAuditCompleteness")] == []


def test_audit_lag_waits_for_a_window_whose_producers_may_still_deliver():
    settings = AlertSettings(grace_ms=20_000, audit_lag_margin_ms=10_000)
    engine = AlertEngine(settings)
    slow = window(0, state="provisional", final_wait_ms=75_000)
    end = slow["window_end_ms"]
    assert only(engine.observe([slow], end + 1000), AUDIT_LAG) == []
    assert only(engine.observe([], end + 60_000), AUDIT_LAG) == []  # past grace + margin, within its wait
    restored = AlertEngine(settings)
    restored.restore(engine.to_state())  # the window's wait survives a restart
    assert only(restored.observe([], end + 84_000), AUDIT_LAG) == []
    (ev,) = only(restored.observe([], end + 86_000), AUDIT_LAG)
    assert ev.threshold == pytest.approx(85.0) and "wait 75 s" in ev.description
    old = engine.to_state()
    del old["open_waits"]  # a state saved before final_wait_ms existed still restores
    AlertEngine(settings).restore(old)


def test_metrics_count_unaudited_messages_and_their_share_and_the_final_wait():
    m = ResultMetrics()
    m.observe([window(0, received=1200, unaudited=200, final_wait_ms=75_000), kcat_only(0)], [], [])
    value = m.registry.get_sample_value
    labels = {"topic": "orders", "tier": "cluster:local"}
    assert value("kafka_audit_messages_unaudited_total", labels) == 200
    assert value("kafka_audit_messages_received_total", labels) == 1200
    assert value("kafka_audit_unaudited_ratio", labels) == pytest.approx(200 / 1200)
    assert value("kafka_audit_producers", labels) == 1
    assert value("kafka_audit_final_wait_seconds", labels) == 75
    legacy = {"topic": "legacy", "tier": "cluster:local"}
    assert value("kafka_audit_unaudited_ratio", legacy) == 1.0
    assert value("kafka_audit_messages_lost_total", legacy) == 0  # unaudited is never loss
    assert value("kafka_audit_windows_total", {**legacy, "state": "final"}) == 1  # dashboards' $topic


def _render(table: Any) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(table)
    return console.export_text()


def test_live_table_shows_unaudited_counts_and_explains_a_kcat_only_topic():
    rows = {(r["topic"], r["window_start_ms"], r["tier"]): r for r in (window(0), kcat_only(0))}
    text = _render(results_table(rows, {}))
    assert "unaudited" in text.splitlines()[2]  # a column of its own
    legacy = next(line for line in text.splitlines() if "legacy" in line)
    assert "8,000 (100%)" in legacy and "n/a" in legacy
    caption = " ".join(text.split())
    assert "never counted as lost" in caption and "no audited producer" in caption
    demo = _render(results_table({("orders", T0, "cluster:local"): window(0)}, {}))
    assert "unaudited" not in demo  # `make demo`'s table is unchanged


def test_report_shows_unaudited_per_topic_and_window():
    results = pd.DataFrame([window(0, received=1200, unaudited=200), kcat_only(0)])
    summary = summary_table(results)
    assert "unaudited (share)" in summary and "200 (16.667%)" in summary
    assert "8,000 (100.000%)" in summary and "n/a (unaudited only)" in summary
    per_window = unaudited_table(results)
    assert per_window.count("<tr>") == 3 and "never counted as lost" in per_window
    assert "No unaudited traffic" in unaudited_table(pd.DataFrame([window(0)]))
    html = render(results, pd.DataFrame(), None, datetime(2027, 1, 1, tzinfo=UTC))
    assert "Unaudited traffic (per topic and window)" in html


def test_up_settings_take_topic_patterns_and_the_finality_rule(tmp_path: Path):
    config = tmp_path / "up.toml"
    config.write_text('topics = ["orders"]\ntopic_patterns = ["clicks\\\\..*"]\nmax_final_wait_ms = 90000\n')
    s = load_up_settings(config, bootstrap_servers="127.0.0.1:9092")
    assert s.monitor and s.topic_patterns == [r"clicks\..*"] and s.all_topics == ["orders"]
    assert s.consumer_finality.wait_ms(70_000) == 75_000
    assert s.spark_finality.wait_ms(70_000) == 75_000 + s.spark_grace_ms - s.consumer_grace_ms
    assert load_up_settings(None, topic_patterns=["a.*"]).topic_patterns == ["a.*"]
    with pytest.raises(ValueError, match="not a regular expression"):
        load_up_settings(None, topic_patterns=["a("])


def test_the_instance_registry_finds_running_instances_and_forgets_dead_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_AUDIT_STATE_DIR", str(tmp_path / "state"))
    assert instances.running() == []
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    dead_pid = int(dead.stdout)
    instances.register({"pid": dead_pid, "started_at": 1.0, "bootstrap_servers": "x:1"})
    me = {
        "pid": os.getpid(),
        "started_at": 2.0,
        "mode": "monitor",
        "bootstrap_servers": "127.0.0.1:9092",
        "cluster": "local",
        "topics": [],
        "topic_patterns": ["orders.*"],
        "metrics_port": 9464,
        "data_dir": str(tmp_path / "far-away"),
    }
    instances.register(me)
    assert [r["pid"] for r in instances.running()] == [os.getpid()]
    assert not (instances.instances_dir() / f"{dead_pid}.json").exists()  # cleaned
    result = CliRunner().invoke(app, ["status"])
    assert result.exit_code == 0, result.output
    assert f"pid {os.getpid()}, monitor" in result.output and "/orders.*/" in result.output
    assert str(tmp_path / "far-away") in result.output
    instances.unregister(os.getpid())
    result = CliRunner().invoke(app, ["status"])
    assert result.exit_code == 1 and "--data-dir" in result.output
    instances.write_data_dir_record(tmp_path / "far-away", "up.json", me)
    result = CliRunner().invoke(app, ["status", "--data-dir", str(tmp_path / "far-away")])
    assert result.exit_code == 0 and "cluster:local" in result.output


def test_quiet_librdkafka_silences_fd_2_inside_the_block_only(capfd):
    from kafka_audit.up import quiet_librdkafka

    with quiet_librdkafka():
        os.write(2, b"%3|FAIL|rdkafka#producer-1| Connection refused\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def forged(i: int, **kw: Any) -> dict[str, Any]:
    """Issue 36's kcat case: 500 copies of one forged stamp beside an audited producer's 1,592 messages."""
    base = dict(
        sent=1_592,
        received=2_092,
        unique=1_592,
        unaccounted=500,
        unaccounted_unique=1,
        unaudited_producers=1,
    )
    return window(i, **{**base, **kw})


def test_unaccounted_messages_fire_their_own_alert_and_are_never_loss():
    engine = AlertEngine(AlertSettings())
    events = engine.observe([forged(0)], T0)
    (ev,) = only(events, UNACCOUNTED_MESSAGES)
    assert ev.status is AlertStatus.FIRING and ev.severity == "warning"
    assert ev.value == 500 and ev.numbers["unaccounted"] == 500
    assert "500 message(s) stamped by 1 producer id(s) that never reported" in ev.summary
    assert "1 distinct stamp(s)" in ev.description and "never as sent, lost or duplicated" in ev.description
    assert [e for e in events if e.alertname.startswith("KafkaAuditCompleteness")] == []
    (ids,) = only(events, UNAUDITED_PRODUCERS)  # the producer id, as before, naming its messages
    assert "(500 messages carry their stamps: unaccounted)" in ids.description
    assert only(engine.observe([window(1, unaccounted=0)], T0 + 1), UNACCOUNTED_MESSAGES) == []
    (res,) = only(engine.observe([window(2, unaccounted=0)], T0 + 2), UNACCOUNTED_MESSAGES)
    assert res.status is AlertStatus.RESOLVED
    # results written before the field: unknown, no alert; a threshold tolerates a few
    assert only(AlertEngine(AlertSettings()).observe([window(0)], T0), UNACCOUNTED_MESSAGES) == []
    tolerant = AlertEngine(AlertSettings(unaccounted_threshold=500))
    assert only(tolerant.observe([forged(0)], T0), UNACCOUNTED_MESSAGES) == []
    disabled = AlertEngine(AlertSettings(disabled_rules=[UNACCOUNTED_MESSAGES]))
    assert only(disabled.observe([forged(0)], T0), UNACCOUNTED_MESSAGES) == []


def test_metrics_table_and_report_show_unaccounted_beside_unaudited():
    m = ResultMetrics()
    m.observe([forged(0), forged(1, state="provisional", unaccounted=7)], [], [])
    value = m.registry.get_sample_value
    labels = {"topic": "orders", "tier": "cluster:local"}
    assert value("kafka_audit_messages_unaccounted_total", labels) == 500  # final windows only
    assert value("kafka_audit_unaccounted_messages", labels) == 500
    assert value("kafka_audit_messages_lost_total", labels) == 0
    assert value("kafka_audit_messages_duplicated_total", labels) == 0
    rows = {(r["topic"], r["window_start_ms"], r["tier"]): r for r in (forged(0), kcat_only(0))}
    text = _render(results_table(rows, {}))
    header = text.splitlines()[2]
    assert header.index("unaudited") < header.index("unaccounted") < header.index("R_l")
    orders = next(line for line in text.splitlines() if "orders" in line)
    assert "500 (1 stamp)" in orders
    assert "never reported" in " ".join(text.split())
    assert "unaccounted" not in _render(results_table({("orders", T0, "cluster:local"): window(0)}, {}))
    results = pd.DataFrame([forged(0), kcat_only(0)])
    summary = summary_table(results)
    assert "<th>unaccounted</th>" in summary and "<td>500</td>" in summary
    per_window = unaudited_table(results)
    assert per_window.count("<tr>") == 3 and "500 (1 producer id)" in per_window
    assert "never counted as sent, lost or duplicated" in per_window
    only_forged = unaudited_table(pd.DataFrame([forged(0)]))  # no unaudited message, still listed
    assert only_forged.count("<tr>") == 2 and "<td>0</td>" in only_forged
