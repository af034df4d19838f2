"""Control-loop decisions as events: the event, its delivery (alerts topic + Alertmanager), the job hook."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from alerts import AlertPipeline, AlertSettings, AlertStatus
from alerts import attach_to_job as attach_alerts
from alerts.codec import decode_alert, encode_alert
from alerts.control_events import alertmanager_copy, control_event
from alerts.event import (
    CONFIG_ADVICE,
    CONFIG_CHANGED,
    CONFIG_KEPT,
    CONFIG_NOT_APPLIED,
    CONFIG_ROLLED_BACK,
    rfc3339,
)
from alerts.sinks.alertmanager import AlertmanagerSink
from control_loop.decide import Controller
from control_loop.loop import ControlLoop
from control_loop.settings import KILL_ENV, ControlSettings
from tests.unit.control_rows import now_after, row
from tests.unit.test_alert_model_events import RecordingSink

TTL = 600_000


def decisions_of_a_rollback() -> dict[str, dict]:
    """change, held (evaluating), rollback, held (rolled_back) as ``to_json()`` dicts by kind."""
    c = Controller(ControlSettings(mode="apply", dwell_ms=0))
    out = {}
    for i, kw in [
        (0, {}),
        (1, {}),
        (2, {"batch": 4, "gamma_actual": 0.5, "gamma_predicted": 0.93, "changes": {}}),
        (3, {"batch": 4, "gamma_actual": 0.5, "gamma_predicted": 0.93, "changes": {}}),
        (4, {"batch": 4, "gamma_actual": 0.5, "gamma_predicted": 0.93, "changes": {}}),
    ]:
        for d in c.decide([row(i, **kw)], now_after(i)):
            out.setdefault(d.kind, d.to_json())
    return out


def test_change_event_carries_gamma_before_after_L_D_and_version():
    change = decisions_of_a_rollback()["change"]
    ev = control_event(change, generator_url="http://grafana/d/kafka-audit-completeness")
    assert (ev.alertname, ev.topic, ev.tier, ev.severity) == (
        CONFIG_CHANGED,
        "orders",
        "control:orders",
        "info",
    )
    assert (
        ev.status is AlertStatus.RESOLVED
        and ev.starts_at_ms == ev.ends_at_ms == ev.event_at_ms == now_after(0)
    )
    assert (ev.value, ev.threshold) == (0.93, 0.72)  # predicted gamma after, before
    n = ev.numbers
    assert (n["packet_loss_pct"], n["delay_ms"], n["version"]) == (10.0, 50.0, 1)
    assert n["measured_gamma_before"] == pytest.approx(0.7) and "measured_gamma_after" not in n
    assert (n["from_batch_num_messages"], n["to_batch_num_messages"], n["to_acks"]) == (1, 4, 1)
    assert ev.suggestion == "batch.num.messages 1→4"
    assert ev.summary == (
        "group orders: configuration v1 written (batch.num.messages 1→4); predicted gamma 0.720 → 0.930"
    )
    assert "L 10.00% packet loss, D 50.0 ms delay" in ev.description and "mode apply" in ev.description
    assert ev.annotations()["window_start"] == rfc3339(change["window_start_ms"])
    assert decode_alert(encode_alert(ev)) == ev  # the same Avro record as every alert
    assert control_event(change).event_id == ev.event_id  # re-sent: the same event


def test_each_kind_its_alertname_and_held_is_no_event():
    by_kind = decisions_of_a_rollback()
    rollback = control_event(by_kind["rollback"])
    assert rollback.alertname == CONFIG_ROLLED_BACK
    assert (rollback.value, rollback.threshold) == (pytest.approx(0.5), pytest.approx(0.7))  # measured
    assert rollback.summary.startswith("group orders: rolled back to the previous configuration (v2)")
    assert control_event(by_kind["held"]) is None  # a guardrail held a suggestion back: metrics only
    kept = {**by_kind["rollback"], "kind": "kept", "reason": "not_worse"}
    assert control_event(kept).alertname == CONFIG_KEPT
    advice = {**by_kind["change"], "kind": "advice", "reason": "advise_mode", "mode": "advise"}
    assert control_event(advice).alertname == CONFIG_ADVICE
    assert "change advised, not written" in control_event(advice).summary
    not_applied = {**by_kind["change"], "kind": "held", "reason": "not_applied"}
    assert control_event(not_applied).alertname == CONFIG_NOT_APPLIED
    bare = control_event({"kind": "change", "group": "g", "decided_at_ms": 5})
    assert bare is not None and bare.numbers == {} and "?" in bare.summary


def test_event_goes_to_the_alerts_topic_and_alertmanager_as_an_info_alert():
    kafka, am, hook = RecordingSink("kafka"), RecordingSink("alertmanager"), RecordingSink("webhook")
    settings = AlertSettings(control_alert_ttl_ms=TTL)
    pipeline = AlertPipeline(settings, registry=CollectorRegistry(), sinks=[kafka, am, hook])
    change = decisions_of_a_rollback()["change"]
    pipeline.on_control(change)
    (topic_event,) = kafka.sent
    (am_event,) = am.sent
    assert topic_event.alertname == am_event.alertname == CONFIG_CHANGED
    assert topic_event.ends_at_ms == change["decided_at_ms"]
    assert am_event.ends_at_ms == change["decided_at_ms"] + TTL
    assert hook.calls == 0
    labels = {"alertname": CONFIG_CHANGED, "status": "resolved"}
    assert pipeline.metrics.registry.get_sample_value("kafka_audit_alert_events_total", labels) == 1
    # a held decision sends nothing
    pipeline.on_control(decisions_of_a_rollback()["held"])
    assert len(kafka.sent) == len(am.sent) == 1


def test_alertmanager_shows_the_info_alert_until_the_ttl_and_never_reposts_it():
    ev = alertmanager_copy(control_event(decisions_of_a_rollback()["change"]), TTL)
    sink = AlertmanagerSink("http://127.0.0.1:9", resend_ms=1_000, ttl_ms=5_000)
    payload = sink.payload(ev, now_ms=ev.starts_at_ms + 10)
    assert payload["labels"]["severity"] == "info" and payload["labels"]["tier"] == "control:orders"
    assert payload["endsAt"] == rfc3339(ev.starts_at_ms + TTL) and payload["startsAt"] == rfc3339(
        ev.starts_at_ms
    )
    assert not ev.firing  # so the sink keeps no re-post for it


def test_control_loop_decisions_reach_the_alerts_topic(tmp_path, monkeypatch):
    """The hook as the job wires it: ControlLoop -> job.control_listeners -> AlertPipeline.on_control."""
    monkeypatch.delenv(KILL_ENV, raising=False)
    from spark_streaming.job import ReconciliationJob
    from spark_streaming.settings import SparkJobSettings

    job = ReconciliationJob(SparkJobSettings(bootstrap_servers="127.0.0.1:9", checkpoint_dir=tmp_path / "c"))
    pipeline = attach_alerts(job, AlertSettings())
    assert job.control_listeners == [pipeline.on_control]
    sent: list = []
    monkeypatch.setattr(pipeline, "publish_control", lambda d: sent.append(control_event(d)))
    loop = ControlLoop(
        ControlSettings(mode="advise", dwell_ms=0), {}, tmp_path, listeners=job.control_listeners
    )
    loop.process([row(0)], now_after(0))
    assert [e.alertname for e in sent] == [CONFIG_ADVICE]
    pipeline.close()


def test_advice_says_how_sure_the_suggestion_is():
    """Issue 39 item 5: advise mode shows the suggestion's counterfactual score, and "uncalibrated"."""
    c = Controller(ControlSettings(mode="advise", dwell_ms=0))
    sure = {"suggestion_loco_mae_p_loss": 0.031, "suggestion_calibrated": False}
    (d,) = c.decide([{**row(0), **sure}], now_after(0))
    assert (d.kind, d.suggestion_loco_mae_p_loss, d.suggestion_calibrated) == ("advice", 0.031, False)
    assert "uncalibrated: counterfactual MAE(P_l) 0.031 on other configurations" in d.detail
    ev = control_event(d.to_json())
    assert ev.alertname == CONFIG_ADVICE
    assert (ev.numbers["suggestion_loco_mae_p_loss"], ev.numbers["suggestion_calibrated"]) == (0.031, 0.0)
    assert ev.suggestion == (
        "batch.num.messages 1→4 (uncalibrated: counterfactual MAE(P_l) 0.031 on other configurations)"
    )
    assert "uncalibrated" in ev.description and "uncalibrated" not in ev.summary
