"""Predictor model decisions as alerts-topic events: the event, its delivery (Kafka only), the job hook."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from prometheus_client import CollectorRegistry

from alerts import AlertEvent, AlertPipeline, AlertSettings, AlertStatus, attach_to_job
from alerts.batch_listener import ALERT_STATE_FILE
from alerts.codec import decode_alert, encode_alert
from alerts.event import MODEL_PROMOTED, MODEL_REJECTED
from alerts.exceptions import AlertSinkError
from alerts.model_events import decision_event

T0 = 1_800_000_000_000


def decision(promoted: bool = True, **kw) -> dict:
    """A decision as ``predictor.promotion.Decision.to_json()`` gives it."""
    base = {
        "decided_at_ms": T0,
        "challenger_version": "v0003",
        "champion_version": "v0002",
        "promoted": promoted,
        "reasons": ["all criteria met"]
        if promoted
        else ["(a) MAE(P_l) on local test 0.0900 not < 0.0800 - 0.0050"],
        "numbers": {
            "mae_local_champion": 0.08,
            "mae_local_challenger": 0.021 if promoted else 0.09,
            "mae_paper_champion": 0.012,
            "mae_paper_challenger": 0.013,
            "coverage_local_challenger": 0.91,
            "n_local_test": 200,
            "margin": 0.005,
            "tolerance": 0.002,
        },
        "rows_by_source": {"paper": 1800, "local": 1000},
    }
    return base | kw


class RecordingSink:
    """A sink that records what it was sent (optionally failing)."""

    def __init__(self, name: str, fail: bool = False) -> None:
        self.name = name
        self.fail = fail
        self.sent: list[AlertEvent] = []
        self.calls = 0

    def send(self, events: Sequence[AlertEvent], now_ms: int) -> None:
        self.calls += 1
        if self.fail and events:
            raise AlertSinkError(self.name, "down", failed=events)
        self.sent.extend(events)

    def close(self) -> None:
        pass


def test_promoted_decision_event():
    ev = decision_event(decision(), generator_url="http://grafana/d/kafka-audit-model")
    assert (ev.alertname, ev.topic, ev.tier, ev.severity) == (MODEL_PROMOTED, "", "model:v0003", "info")
    assert ev.status is AlertStatus.RESOLVED and not ev.firing
    assert ev.starts_at_ms == ev.ends_at_ms == ev.event_at_ms == T0
    assert ev.value == pytest.approx(0.021) and ev.threshold == pytest.approx(0.075)
    assert ev.numbers["coverage_local_challenger"] == pytest.approx(0.91)
    assert ev.numbers["rows_local"] == 1000 and ev.numbers["rows_paper"] == 1800
    assert ev.summary == "model v0003 promoted over v0002: live MAE(P_l) 0.0210 vs 0.0800"
    for text in ("newest 200 local window(s)", "0.0130 vs 0.0120", "coverage 91.0%", "all criteria met"):
        assert text in ev.description, text
    assert ev.window_start_ms is None and "window_start" not in ev.annotations()
    # the same Avro record: every reader of the alerts topic decodes it
    assert decode_alert(encode_alert(ev)) == ev
    assert AlertEvent.from_dict(ev.to_dict()) == ev
    # ... also as written before the fingerprint followed the Avro specification's byte order
    value = encode_alert(ev)
    assert decode_alert(value[:2] + value[9:1:-1] + value[10:]) == ev


def test_rejected_decision_event_and_partial_numbers():
    ev = decision_event(decision(promoted=False, champion_version="shipped"))
    assert ev.alertname == MODEL_REJECTED and ev.severity == "info"
    assert ev.summary.startswith("model v0003 rejected, shipped keeps serving")
    assert "Rejected: (a) MAE(P_l) on local test" in ev.description
    # a decision without numbers still makes an event
    bare = decision_event({"decided_at_ms": T0, "challenger_version": "v0001", "promoted": False})
    assert bare.value is None and bare.threshold is None and bare.numbers == {}
    assert "?" in bare.summary
    # re-sent decisions are the same event (readers deduplicate by event_id)
    assert decision_event(decision()).event_id == decision_event(decision()).event_id
    assert decision_event(decision()).event_id != decision_event(decision(decided_at_ms=T0 + 1)).event_id


def test_unknown_severity_still_rejected():
    data = decision_event(decision()).to_dict() | {"severity": "page"}
    with pytest.raises(ValueError, match="'info', 'warning', 'critical'"):
        AlertEvent.from_dict(data)


def test_decision_goes_to_the_alerts_topic_only_and_is_counted():
    kafka, am, hook = RecordingSink("kafka"), RecordingSink("alertmanager"), RecordingSink("webhook")
    pipeline = AlertPipeline(AlertSettings(), registry=CollectorRegistry(), sinks=[kafka, am, hook])
    pipeline.on_decision(decision())
    assert [e.alertname for e in kafka.sent] == [MODEL_PROMOTED]
    assert am.calls == hook.calls == 0
    labels = {"alertname": MODEL_PROMOTED, "status": "resolved"}
    assert pipeline.metrics.registry.get_sample_value("kafka_audit_alert_events_total", labels) == 1
    # the next evaluation does not hand it to the other sinks either
    pipeline.process([], T0 + 1000)
    assert am.sent == hook.sent == [] and len(kafka.sent) == 1


def test_undelivered_decision_is_retried_and_survives_a_restart(tmp_path):
    state = tmp_path / ALERT_STATE_FILE
    down = RecordingSink("kafka", fail=True)
    pipeline = AlertPipeline(AlertSettings(), sinks=[down, RecordingSink("webhook")], state_path=state)
    pipeline.on_decision(decision(promoted=False))
    assert pipeline.dispatcher.pending() == {"kafka": 1, "webhook": 0}
    # a new driver: the decision event is still queued for the alerts topic, and only there
    up, hook = RecordingSink("kafka"), RecordingSink("webhook")
    restarted = AlertPipeline(AlertSettings(), sinks=[up, hook], state_path=state)
    restarted.process([], T0 + 5000)
    assert [e.alertname for e in up.sent] == [MODEL_REJECTED] and hook.sent == []


def test_listener_never_raises(monkeypatch, caplog):
    pipeline = AlertPipeline(AlertSettings(), sinks=[])

    def boom(*_a, **_k):
        raise RuntimeError("bug")

    monkeypatch.setattr(pipeline.dispatcher, "dispatch", boom)
    pipeline.on_decision(decision())
    assert "model decision event for 'v0003' failed" in caplog.text


def test_attach_to_job_listens_to_model_decisions(tmp_path, monkeypatch):
    from spark_streaming.job import ReconciliationJob
    from spark_streaming.settings import SparkJobSettings

    job = ReconciliationJob(
        SparkJobSettings(bootstrap_servers="127.0.0.1:9", checkpoint_dir=tmp_path / "checkpoint")
    )
    pipeline = attach_to_job(job, AlertSettings())
    assert job.decision_listeners == [pipeline.on_decision]
    sent: list[AlertEvent] = []
    monkeypatch.setattr(pipeline, "publish_decision", lambda d: sent.append(decision_event(d)))
    for listener in job.decision_listeners:  # what the driver does with a new registry decision
        listener(decision())
    assert [e.alertname for e in sent] == [MODEL_PROMOTED]
    pipeline.close()
