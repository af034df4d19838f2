"""Alerts end to end on real servers: Prometheus Alertmanager (Debian binary), Kafka, a webhook receiver."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from alerts import AlertPipeline, AlertSettings
from alerts.codec import decode_alert
from kafka_plumbing.cluster_ports import free_port
from kafka_plumbing.topics import read_to_end
from tests.conftest import unique_name
from tests.integration.alertmanager import WebhookReceiver, running_alertmanager
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration

GAMMA = "KafkaAuditGammaBelowTarget"
SUGGESTION = "raise batch.num.messages 1 -> 4: predicted P_l 0.63 -> 0.04, gamma 0.71 -> 0.93"
W = 10_000


def now_ms() -> int:
    return int(time.time() * 1000)


def window(topic: str, i: int, gamma: float, base_ms: int) -> dict[str, Any]:
    start = base_ms + i * W
    return {
        "kind": "result",
        "topic": topic,
        "tier": "cluster:test",
        "state": "final",
        "window_start_ms": start,
        "window_end_ms": start + W,
        "sent": 1000,
        "unique": 1000 if gamma >= 0.9 else 370,
        "completeness": 1.0,  # completeness rule kept quiet: this test is about gamma
        "loss_rate": 0.0 if gamma >= 0.9 else 0.63,
        "unaudited_producers": 0,
        "p_loss": 0.6,
        "p_loss_lo": 0.0,
        "p_loss_hi": 0.7,
        "gamma_actual": gamma,
        "gamma_predicted": 0.72,
        "gamma_target": 0.9,
        "suggestion": SUGGESTION if gamma < 0.9 else None,
        "result_at_ms": start + W + 1000,
    }


def sink_errors(registry: CollectorRegistry) -> dict[str, float | None]:
    return {
        s: registry.get_sample_value("kafka_audit_alert_sink_errors_total", {"sink": s})
        for s in ("kafka", "alertmanager", "webhook")
    }


def test_gamma_alert_fires_and_resolves_in_alertmanager_kafka_and_webhook(tmp_path, kconfig, request):
    topic = unique_name(request)
    alerts_topic = unique_name(request, ".alerts")
    notified, hook = WebhookReceiver(), WebhookReceiver()
    with notified, hook, running_alertmanager(tmp_path / "am", receiver_url=notified.url) as am:
        settings = AlertSettings(
            gamma_for_windows=2,
            gamma_keep_firing_windows=1,
            bootstrap_servers=kconfig["bootstrap.servers"],
            alerts_topic=alerts_topic,
            alertmanager_url=am.url,
            webhook_url=hook.url,
            kafka_flush_timeout_ms=10_000,
            disabled_rules=["KafkaAuditAuditLag"],
        )
        registry = CollectorRegistry()
        pipeline = AlertPipeline(settings, registry)
        base = now_ms() - 10 * W
        gauge = {"alertname": GAMMA, "topic": topic, "severity": "warning"}

        # gamma below target for two final windows (one micro-batch each): pending, then firing
        assert pipeline.process([window(topic, 0, 0.95, base)], now_ms()) == []
        assert pipeline.process([window(topic, 1, 0.71, base)], now_ms()) == []
        (fired,) = pipeline.process([window(topic, 2, 0.70, base)], now_ms())
        assert (fired.alertname, fired.status.value) == (GAMMA, "firing")
        assert registry.get_sample_value("kafka_audit_alerts_firing", gauge) == 1

        alerts = wait_for(lambda: am.alerts(alertname=GAMMA, topic=topic), 20, "the alert in Alertmanager")
        (alert,) = alerts
        assert alert["status"]["state"] == "active"
        assert alert["labels"] == {
            "alertname": GAMMA,
            "topic": topic,
            "tier": "cluster:test",
            "severity": "warning",
        }
        assert alert["annotations"]["suggestion"] == SUGGESTION
        assert "gamma 0.700 below target 0.900" in alert["annotations"]["summary"]
        assert alert["annotations"]["window_start"].endswith("Z")

        # Alertmanager routes it to its receiver (group_wait 1 s)
        wait_for(lambda: notified.bodies, 20, "Alertmanager's firing notification")
        assert notified.bodies[0]["status"] == "firing"
        assert notified.bodies[0]["alerts"][0]["annotations"]["suggestion"] == SUGGESTION

        # re-sending the same bad window (a replayed micro-batch) and another bad one: nothing new
        assert pipeline.process([window(topic, 2, 0.70, base), window(topic, 3, 0.7, base)], now_ms()) == []
        assert len(am.alerts(alertname=GAMMA, topic=topic)) == 1

        # gamma recovers: resolved once
        (resolved,) = pipeline.process([window(topic, 4, 0.95, base)], now_ms())
        assert resolved.status.value == "resolved" and resolved.fingerprint == fired.fingerprint
        assert registry.get_sample_value("kafka_audit_alerts_firing", gauge) == 0
        wait_for(lambda: not am.alerts(alertname=GAMMA, topic=topic), 20, "the alert to leave Alertmanager")
        # Alertmanager notifies its receiver of the resolution
        wait_for(
            lambda: notified.bodies[-1]["status"] == "resolved", 20, "Alertmanager's resolved notification"
        )
        assert [b["status"] for b in notified.bodies] == ["firing", "resolved"]
        pipeline.close()

    # the webhook got both events once each
    assert [(a["alertname"], a["status"], a["starts_at_ms"]) for a in hook.alerts()] == [
        (GAMMA, "firing", fired.starts_at_ms),
        (GAMMA, "resolved", fired.starts_at_ms),
    ]
    assert hook.alerts()[0]["suggestion"] == SUGGESTION

    # the alerts topic holds both as Avro, keyed by the fingerprint
    messages = list(read_to_end(kconfig, alerts_topic, group_id=f"g.{alerts_topic}", timeout_s=30))
    events = [decode_alert(m.value()) for m in messages]
    assert [(e.alertname, e.status.value) for e in events] == [(GAMMA, "firing"), (GAMMA, "resolved")]
    assert {m.key() for m in messages} == {fired.fingerprint.encode()}
    assert events[0] == fired and events[1] == resolved
    assert events[0].numbers["gamma_actual"] == pytest.approx(0.70)
    assert events[1].ends_at_ms is not None and events[1].ends_at_ms >= events[0].starts_at_ms
    assert sink_errors(registry) == {"kafka": 0, "alertmanager": 0, "webhook": 0}


def test_alertmanager_down_then_up_gets_the_alert_on_the_next_evaluation(tmp_path, request):
    topic = unique_name(request)
    port = free_port()
    settings = AlertSettings(
        gamma_for_windows=1,
        alertmanager_url=f"http://127.0.0.1:{port}",
        http_timeout_s=2,
        disabled_rules=["KafkaAuditAuditLag"],
    )
    registry = CollectorRegistry()
    pipeline = AlertPipeline(settings, registry)
    base = now_ms() - 10 * W
    (fired,) = pipeline.process([window(topic, 0, 0.5, base)], now_ms())  # nobody listening yet
    assert sink_errors(registry)["alertmanager"] == 1
    assert pipeline.dispatcher.pending() == {"alertmanager": 1}
    with running_alertmanager(tmp_path / "am", port=port) as am:
        assert pipeline.process([], now_ms()) == []  # next evaluation: the retry delivers it
        assert pipeline.dispatcher.pending() == {"alertmanager": 0}
        (alert,) = wait_for(lambda: am.alerts(alertname=GAMMA, topic=topic), 20, "the retried alert")
        assert alert["status"]["state"] == "active"
    assert sink_errors(registry)["alertmanager"] == 1
    assert fired.status.value == "firing"


def test_cli_test_fire_against_real_alertmanager_and_kafka(tmp_path, kconfig, request, monkeypatch):
    from typer.testing import CliRunner

    from kafka_audit.cli import app

    for name in ("ALERTMANAGER_URL", "WEBHOOK_URL", "BOOTSTRAP_SERVERS"):
        monkeypatch.delenv(f"KAFKA_AUDIT_ALERTS_{name}", raising=False)
    alerts_topic = unique_name(request, ".alerts")
    notified = WebhookReceiver()
    with notified, running_alertmanager(tmp_path / "am", receiver_url=notified.url) as am:
        args = [
            "--alertmanager-url",
            am.url,
            "-b",
            kconfig["bootstrap.servers"],
            "--alerts-topic",
            alerts_topic,
        ]
        result = CliRunner().invoke(app, ["alerts", "test-fire", *args, "--hold", "2"])
        assert result.exit_code == 0, result.output
        assert "visible in Alertmanager" in result.output and "gone from Alertmanager" in result.output
        wait_for(
            lambda: notified.bodies and notified.bodies[-1]["status"] == "resolved", 20, "AM notifications"
        )
        assert notified.bodies[0]["alerts"][0]["labels"]["alertname"] == "KafkaAuditTestAlert"
    tail = CliRunner().invoke(
        app, ["alerts", "tail", "-b", kconfig["bootstrap.servers"], "--alerts-topic", alerts_topic, "--json"]
    )
    assert tail.exit_code == 0, tail.output
    events = [json.loads(line) for line in tail.output.splitlines()]
    assert [(e["alertname"], e["status"]) for e in events] == [
        ("KafkaAuditTestAlert", "firing"),
        ("KafkaAuditTestAlert", "resolved"),
    ]
