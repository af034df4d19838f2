"""Alert event codec, sinks and dispatcher (in-process HTTP receivers; no external process)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import pytest
from prometheus_client import CollectorRegistry

from alerts import AlertEvent, AlertMetrics, AlertPipeline, AlertSettings, AlertStatus, Dispatcher
from alerts.codec import decode_alert, encode_alert, schema
from alerts.dispatch import sinks_from_settings
from alerts.exceptions import AlertSinkError
from alerts.sinks import AlertmanagerSink, KafkaAlertSink, WebhookSink
from audit_record.record import MalformedRecordError
from kafka_plumbing.cluster_ports import free_port
from tests.integration.alertmanager import WebhookReceiver

T0 = 1_800_000_000_000


def firing(topic: str = "t", starts_at_ms: int = T0, **kw) -> AlertEvent:
    base = {
        "alertname": "KafkaAuditGammaBelowTarget",
        "topic": topic,
        "tier": "cluster:a",
        "severity": "warning",
        "status": AlertStatus.FIRING,
        "starts_at_ms": starts_at_ms,
        "event_at_ms": starts_at_ms,
        "summary": "t (cluster:a): gamma 0.710 below target 0.900",
        "description": "window ...",
        "window_start_ms": T0 - 20_000,
        "window_end_ms": T0 - 10_000,
        "value": 0.71,
        "threshold": 0.9,
        "numbers": {"gamma_actual": 0.71, "p_loss": 0.6},
        "suggestion": "raise batch.num.messages 1 -> 4",
    }
    base.update(kw)
    return AlertEvent(**base)


def registry_value(registry: CollectorRegistry, sink: str) -> float | None:
    return registry.get_sample_value("kafka_audit_alert_sink_errors_total", {"sink": sink})


# ---------------------------------------------------------------------------------------------- codec
def test_codec_round_trip_firing_and_resolved():
    ev = firing(generator_url="http://grafana/d/x")
    for e in (ev, ev.resolved(T0 + 5000)):
        data = encode_alert(e)
        assert data[:2] == b"\xc3\x01"
        assert decode_alert(data) == e


def test_schema_fields_match_the_event():
    avro = {f["name"] for f in schema()["fields"]}
    assert avro == {f.name for f in dataclasses.fields(AlertEvent)} | {"fingerprint"}


@pytest.mark.parametrize(
    ("value", "reason"),
    [(b"", "empty"), (b"{}" * 8, "bad_magic"), (b"\xc3\x01" + b"\x00" * 8 + b"\x02", "wrong_schema")],
)
def test_codec_rejects_foreign_bytes(value, reason):
    with pytest.raises(MalformedRecordError) as info:
        decode_alert(value)
    assert info.value.reason == reason


def test_codec_rejects_truncated_body():
    with pytest.raises(MalformedRecordError) as info:
        decode_alert(encode_alert(firing())[:-5])
    assert info.value.reason == "undecodable"


def test_fingerprint_is_the_label_identity():
    assert firing().fingerprint == firing(starts_at_ms=T0 + 1).fingerprint
    assert firing().fingerprint != firing(topic="u").fingerprint
    assert firing().event_id != firing().resolved(T0 + 1).event_id


# --------------------------------------------------------------------------------------- alertmanager
def test_alertmanager_payload_firing_and_resolved():
    sink = AlertmanagerSink("http://am:9093/", resend_ms=60_000, ttl_ms=300_000)
    assert sink.url == "http://am:9093/api/v2/alerts"
    ev = firing(generator_url="http://grafana/d/x")
    p = sink.payload(ev, T0 + 1000)
    assert p["labels"] == {
        "alertname": "KafkaAuditGammaBelowTarget",
        "topic": "t",
        "tier": "cluster:a",
        "severity": "warning",
    }
    assert p["annotations"]["suggestion"] == "raise batch.num.messages 1 -> 4"
    assert p["annotations"]["window_start"] == "2027-01-15T07:59:40.000Z"
    assert p["startsAt"] == "2027-01-15T08:00:00.000Z"
    assert p["endsAt"] == "2027-01-15T08:05:01.000Z"  # now + ttl
    assert p["generatorURL"] == "http://grafana/d/x"
    r = sink.payload(ev.resolved(T0 + 7000), T0 + 9000)
    assert r["endsAt"] == "2027-01-15T08:00:07.000Z"
    assert "generatorURL" not in sink.payload(firing(), T0)


def test_alertmanager_sink_reposts_firing_alerts_and_stops_after_resolve():
    with WebhookReceiver() as rx:
        sink = AlertmanagerSink(rx.url, resend_ms=10_000, ttl_ms=40_000)
        ev = firing()
        sink.send([ev], T0)
        sink.send([], T0 + 5_000)  # not due yet
        sink.send([], T0 + 10_000)  # keep-alive
        sink.send([ev.resolved(T0 + 12_000)], T0 + 12_000)
        sink.send([], T0 + 30_000)  # nothing firing: no post
    bodies = rx.bodies
    assert len(bodies) == 3
    assert [b[0]["endsAt"] for b in bodies] == [
        "2027-01-15T08:00:40.000Z",
        "2027-01-15T08:00:50.000Z",
        "2027-01-15T08:00:12.000Z",
    ]
    assert {b[0]["startsAt"] for b in bodies} == {"2027-01-15T08:00:00.000Z"}


def test_alertmanager_sink_sends_newest_event_per_alert():
    with WebhookReceiver() as rx:
        ev = firing()
        AlertmanagerSink(rx.url).send([ev, ev.resolved(T0 + 1), firing(topic="u")], T0 + 1)
    (body,) = rx.bodies
    assert [(a["labels"]["topic"], a["endsAt"]) for a in body] == [
        ("t", "2027-01-15T08:00:00.001Z"),
        ("u", "2027-01-15T08:05:00.001Z"),
    ]


# ------------------------------------------------------------------------------ webhook + dispatcher
def test_webhook_body_and_bearer_token():
    with WebhookReceiver() as rx:
        WebhookSink(rx.url, bearer_token="s3cret").send([firing()], T0)
        WebhookSink(rx.url).send([], T0)  # nothing to send: no request
    (body,) = rx.bodies
    assert body["source"] == "kafka-audit" and body["version"] == 1
    (alert,) = body["alerts"]
    assert alert["status"] == "firing"
    assert alert["suggestion"] == "raise batch.num.messages 1 -> 4"
    assert alert["numbers"] == {"gamma_actual": 0.71, "p_loss": 0.6}
    assert alert["event_id"] == firing().event_id
    assert alert["labels"]["alertname"] == "KafkaAuditGammaBelowTarget"
    assert rx.headers[0]["Authorization"] == "Bearer s3cret"
    assert "s3cret" not in repr(WebhookSink(rx.url, bearer_token="s3cret"))


def test_dispatcher_counts_failures_and_retries_on_next_dispatch():
    registry = CollectorRegistry()
    with WebhookReceiver() as rx:
        dispatcher = Dispatcher([WebhookSink(rx.url, timeout_s=2)], AlertMetrics(registry))
        rx.fail_with = 503
        ev = firing()
        assert dispatcher.dispatch([ev], T0) == {"webhook": False}
        assert registry_value(registry, "webhook") == 1
        assert dispatcher.pending() == {"webhook": 1}
        rx.fail_with = None
        resolved = ev.resolved(T0 + 1000)
        assert dispatcher.dispatch([resolved], T0 + 1000) == {"webhook": True}
        assert dispatcher.pending() == {"webhook": 0}
        assert dispatcher.dispatch([resolved], T0 + 2000) == {"webhook": True}  # a re-send: delivered again
    assert registry_value(registry, "webhook") == 1
    assert [a["status"] for a in rx.alerts()] == ["firing", "resolved", "resolved"]


def test_dispatcher_survives_unreachable_sinks_and_bounds_the_queue():
    registry = CollectorRegistry()
    url = f"http://127.0.0.1:{free_port()}/nobody"
    dispatcher = Dispatcher([WebhookSink(url, timeout_s=2)], AlertMetrics(registry), max_pending=2)
    for i in range(3):
        assert dispatcher.dispatch([firing(starts_at_ms=T0 + i)], T0 + i) == {"webhook": False}
    assert registry_value(registry, "webhook") == 3
    assert dispatcher.pending() == {"webhook": 2}


class BrokenSink:
    name = "broken"

    def __init__(self) -> None:
        self.calls = 0

    def send(self, events: Sequence[AlertEvent], now_ms: int) -> None:
        self.calls += 1
        raise RuntimeError("bug")

    def close(self) -> None:
        raise RuntimeError("bug at close")


def test_a_buggy_sink_never_reaches_the_caller_or_the_other_sinks():
    with WebhookReceiver() as rx:
        broken = BrokenSink()
        dispatcher = Dispatcher([broken, WebhookSink(rx.url)])
        assert dispatcher.dispatch([firing()], T0) == {"broken": False, "webhook": True}
        dispatcher.close()
    assert broken.calls == 1
    assert len(rx.alerts()) == 1


def test_dispatcher_rejects_duplicate_sink_names():
    with pytest.raises(ValueError, match="unique"):
        Dispatcher([WebhookSink("http://a"), WebhookSink("http://b")])


def test_kafka_sink_reports_delivery_failures():
    dead = f"127.0.0.1:{free_port()}"
    sink = KafkaAlertSink(
        {"bootstrap.servers": dead, "log_level": 0},
        "alerts",
        message_timeout_ms=300,
        flush_timeout_ms=5000,
        create_topic=False,
    )
    ev = firing()
    with pytest.raises(AlertSinkError, match="not delivered") as info:
        sink.send([ev], T0)
    assert info.value.failed == [ev]
    assert info.value.sink == "kafka"
    sink.close()


def test_sinks_from_settings_and_pipeline_without_sinks():
    assert sinks_from_settings(AlertSettings()) == []
    sinks = sinks_from_settings(
        AlertSettings(alertmanager_url="http://127.0.0.1:9093", webhook_url="http://127.0.0.1:1/x")
    )
    assert [s.name for s in sinks] == ["alertmanager", "webhook"]
    pipeline = AlertPipeline(AlertSettings(gamma_for_windows=1), sinks=[])
    row = {
        "topic": "t",
        "tier": "cluster:a",
        "state": "final",
        "window_start_ms": T0,
        "window_end_ms": T0 + 10_000,
        "gamma_actual": 0.5,
        "gamma_target": 0.9,
    }
    pipeline.on_batch(0, [row])
    assert [e.alertname for e in pipeline.engine.firing()] == ["KafkaAuditGammaBelowTarget"]
    labels = {"alertname": "KafkaAuditGammaBelowTarget", "topic": "t", "severity": "warning"}
    assert pipeline.metrics.registry.get_sample_value("kafka_audit_alerts_firing", labels) == 1
    json.dumps([e.to_dict() for e in pipeline.engine.firing()])  # JSON-serialisable


def test_urls_in_errors_carry_no_credentials():
    url = f"http://user:pw@127.0.0.1:{free_port()}/hook?token=abc"
    with pytest.raises(AlertSinkError) as info:
        WebhookSink(url, timeout_s=2).send([firing()], T0)
    text = str(info.value)
    assert "127.0.0.1" in text and "pw" not in text and "abc" not in text
    assert "pw" not in repr(WebhookSink(url))


def test_pipeline_listener_never_raises(monkeypatch, caplog):
    pipeline = AlertPipeline(AlertSettings(), sinks=[])

    def boom(*_a, **_k):
        raise RuntimeError("engine bug")

    monkeypatch.setattr(pipeline.engine, "observe", boom)
    pipeline.on_batch(7, [])
    assert "alert evaluation of micro-batch 7 failed" in caplog.text
