"""Live comparison in the real job (broker + Spark local[2], no network impairment).

Loss comes from the broker: the topic's ``max.message.bytes`` rejects every other (300-byte)
message, so half of each window is lost for real (mean message size M = 155 bytes, where the paper's
data has heavy loss at L = 15% with batch.num.messages = 1). The producer's packet-loss estimate L is
pinned to 15% (the TCP retransmission meter is replaced), as if its link lost packets. The final
windows must then carry the prediction for that configuration and network, gamma actual / predicted
vs target, a suggestion, the Prometheus gauges, and a gamma alert with the suggestion in the alerts
topic.
"""

from __future__ import annotations

import time

import pytest

import audit_producer.producer as producer_module
from alerts import AlertEngine, AlertSettings, attach_to_job
from alerts.batch_listener import ALERT_STATE_FILE
from alerts.codec import decode_alert
from alerts.state_file import AlertStateFile
from audit_producer import AuditedProducer, ProducerAuditSettings
from kafka_plumbing.topics import ensure_topic, read_to_end
from predictor.kpi import Weights, gamma
from spark_streaming.job import ReconciliationJob
from spark_streaming.results import final_results, read_results

from .helpers import (
    CLUSTER,
    PINNED_LOSS_PCT,
    PinnedLoss,
    consumer_settings,
    running_consumer,
    wait_for,
    windows_state,
)
from .test_spark_reconciliation import job_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]
WINDOW_MS = 5_000


def test_final_windows_carry_prediction_gamma_suggestion_metrics_and_alert(
    tmp_path, kconfig, bootstrap, audit_topics, monkeypatch
):
    monkeypatch.setattr(producer_module, "TcpRetransmitMeter", PinnedLoss)
    topic = f"pytest_live_{audit_topics['audit_topic'][-12:]}"
    ensure_topic(kconfig, topic, 1, topic_config={"max.message.bytes": "200"})
    alerts_topic = f"{audit_topics['audit_topic']}.alerts"
    settings = job_settings(
        bootstrap, audit_topics, tmp_path, "live", topic_kpi={topic: {"stream_type": "weblog"}}
    )
    job = ReconciliationJob(settings)
    attach_to_job(job, AlertSettings(gamma_target=0.9, gamma_for_windows=1, alerts_topic=alerts_topic))
    assert job.gamma_target == 0.9  # from the alert settings: the job names none
    job.start()
    try:
        with running_consumer(consumer_settings(bootstrap, [topic], audit_topics, window_ms=WINDOW_MS)):
            audit = ProducerAuditSettings(
                window_ms=WINDOW_MS,
                grace_ms=1_000,
                snapshot_interval_ms=1_000,
                audit_topic=audit_topics["audit_topic"],
            )
            config = {
                **kconfig,
                "client.id": "live",
                "acks": "1",
                "batch.num.messages": 1,
                "linger.ms": 0,
                "message.timeout.ms": 500,
                "statistics.interval.ms": 500,
            }
            with AuditedProducer(config, audit) as producer:
                # after the producer started (1-2 s): taken before it, a window boundary in between made the
                # test wait for a window no message was in
                first_ms = time.time_ns() // 1_000_000
                stop_at = time.monotonic() + 2.2 * WINDOW_MS / 1000
                i = 0
                while time.monotonic() < stop_at:
                    producer.produce(topic, b"x" * (300 if i % 2 else 10))  # the 300-byte ones are lost
                    i += 1
                    producer.poll(0.004)
                last_ms = time.time_ns() // 1_000_000
            sent_windows = set(range(first_ms - first_ms % WINDOW_MS, last_ms + 1, WINDOW_MS))

            def all_final() -> bool:
                if job.exception() is not None:
                    raise AssertionError(f"the Spark query failed: {job.exception()}")
                finals = final_results(read_results(kconfig, settings.results_topic))
                return sent_windows <= {w for (t, w, _) in finals if t == topic}

            try:
                wait_for(all_final, 120, "final results of the load's windows")
            except AssertionError as exc:  # say which windows are missing and what each tier reported
                rows = [r for r in read_results(kconfig, settings.results_topic) if r["topic"] == topic]
                got = sorted((r["window_start_ms"], r["state"], r["sent"], r.get("received")) for r in rows)
                state = windows_state(kconfig, topic, audit_topics["audit_topic"])
                windows = sorted(sent_windows)
                raise AssertionError(f"{exc}; windows {windows}; results {got}; snapshots {state}") from exc
    finally:
        job.stop()

    rows = read_results(kconfig, settings.results_topic)
    finals = [r for r in rows if r["topic"] == topic and r["state"] == "final" and r["sent"] > 0]
    assert finals
    provisional = [r for r in rows if r["topic"] == topic and r["state"] == "provisional"]
    assert provisional and all(r["p_loss"] is None and r["gamma_actual"] is None for r in provisional)
    weights = Weights.preset("weblog")
    suggested = []
    for r in finals:
        assert r["packet_loss_pct_est"] == PINNED_LOSS_PCT
        # D: the window's smallest broker round trip, at most the mean one (reconcile.delay_estimate_ms)
        assert 0 < r["delay_ms_est"] <= r["rtt_avg_ms"]
        assert 10 <= r["message_size_bytes"] <= 300
        assert r["p_loss_lo"] <= r["p_loss"] <= r["p_loss_hi"]
        assert r["p_dup_lo"] <= r["p_dup"] <= r["p_dup_hi"]
        assert r["gamma_target"] == 0.9
        assert 0.0 <= r["gamma_predicted"] <= 1.0
        # gamma_actual is Eq. 2 with the measured R_l, R_d; mu <= 1 (the producer's predicted service rate)
        full = gamma(1.0 - r["loss_rate"], 1.0, r["loss_rate"], min(1.0, r["duplicate_rate"]), weights)
        assert r["gamma_actual"] <= full + 1e-9
        if r["gamma_actual"] < 0.9:
            suggested.append(r)
    big = [r for r in finals if r["sent"] > 200]
    assert big and all(r["loss_rate"] > 0.3 for r in big), [r["loss_rate"] for r in finals]
    assert suggested, "a window with half its messages lost must be below the 0.9 target"
    # The suggestion comes when the model agrees the configuration cannot reach the target (else the
    # prediction-drift alert speaks): here P_l is high for batch.num.messages=1 at L=15%.
    predicted_low = [r for r in suggested if r["gamma_predicted"] < 0.9]
    summary = [
        (r["sent"], r["loss_rate"], r["p_loss"], r["gamma_predicted"], r["suggestion"]) for r in suggested
    ]
    assert predicted_low, summary
    assert all(r["suggestion"] and "->" in r["suggestion"] for r in predicted_low), summary

    reg = job.metrics.registry
    tier = f"cluster:{CLUSTER}"
    newest = max(finals, key=lambda r: r["window_start_ms"])
    assert reg.get_sample_value("kafka_audit_gamma", {"topic": topic, "tier": tier, "kind": "actual"}) == (
        pytest.approx(newest["gamma_actual"])
    )
    p95 = reg.get_sample_value(
        "kafka_audit_predicted_loss_ratio", {"topic": topic, "tier": tier, "bound": "p95"}
    )
    assert p95 == pytest.approx(newest["p_loss_hi"])
    assert reg.get_sample_value("kafka_audit_gamma_target", {"topic": topic, "tier": tier}) == 0.9
    info = [
        s
        for m in reg.collect()
        if m.name == "kafka_audit_producer_info"
        for s in m.samples
        if s.labels["topic"] == topic
    ]
    assert [
        (s.labels["acks"], s.labels["batch_num_messages"], s.labels["message_timeout_ms"]) for s in info
    ] == [("1", "1", "500")]

    events = [
        decode_alert(m.value()) for m in read_to_end(kconfig, alerts_topic, group_id="t", missing_ok=True)
    ]
    gamma_alerts = [e for e in events if e.alertname == "KafkaAuditGammaBelowTarget" and e.topic == topic]
    assert gamma_alerts and gamma_alerts[0].firing
    assert gamma_alerts[0].suggestion and "->" in gamma_alerts[0].suggestion
    assert (
        reg.get_sample_value(
            "kafka_audit_alerts_firing",
            {"alertname": "KafkaAuditGammaBelowTarget", "topic": topic, "severity": "warning"},
        )
        == 1.0
    )
    # The alert state is kept next to the query's checkpoint: a restarted job continues this episode.
    saved = AlertStateFile(settings.checkpoint_dir / ALERT_STATE_FILE).load()
    assert saved is not None
    restored = AlertEngine(AlertSettings())
    restored.restore(saved.engine)
    assert gamma_alerts[0].event_id in {e.event_id for e in restored.firing()}
