"""The alert engine: rules over window results, deduplication, replays, audit lag, metrics."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from alerts import AlertEngine, AlertMetrics, AlertSettings, AlertState, AlertStatus
from alerts.event import (
    AUDIT_LAG,
    COMPLETENESS_BELOW_TARGET,
    GAMMA_BELOW_TARGET,
    PREDICTION_DRIFT,
    UNAUDITED_PRODUCERS,
)
from alerts.settings import load_settings
from kafka_plumbing.errors import ConfigError

W = 10_000
T0 = 1_800_000_000_000
SUGGESTION = "raise batch.num.messages 1 -> 4: predicted P_l 0.63 -> 0.04, gamma 0.71 -> 0.93"


def window(
    i: int, topic: str = "t", tier: str = "cluster:a", state: str = "final", **kw: Any
) -> dict[str, Any]:
    """A healthy final window i of (topic, tier); kw overrides fields."""
    row: dict[str, Any] = {
        "kind": "result",
        "topic": topic,
        "tier": tier,
        "state": state,
        "window_start_ms": T0 + i * W,
        "window_end_ms": T0 + (i + 1) * W,
        "sent": 1000,
        "unique": 1000,
        "duplicated": 0,
        "unaudited": 0,
        "unaudited_producers": 0,
        "completeness": 1.0,
        "loss_rate": 0.0,
        "duplicate_rate": 0.0,
        "p_loss": 0.001,
        "p_loss_lo": 0.0,
        "p_loss_hi": 0.01,
        "gamma_actual": 0.95,
        "gamma_predicted": 0.94,
        "gamma_target": 0.9,
        "suggestion": None,
    }
    row.update(kw)
    return row


def bad_gamma(i: int, **kw: Any) -> dict[str, Any]:
    return window(i, gamma_actual=0.71, gamma_predicted=0.72, suggestion=SUGGESTION, **kw)


def only(events, alertname):
    return [e for e in events if e.alertname == alertname]


def feed(engine: AlertEngine, rows: list[dict[str, Any]], start_ms: int = T0 + 100 * W):
    """One observe call per row (one final window per micro-batch); returns events per call."""
    return [engine.observe([r], start_ms + k * 1000) for k, r in enumerate(rows)]


@pytest.fixture
def settings() -> AlertSettings:
    return AlertSettings(
        gamma_for_windows=2,
        gamma_keep_firing_windows=2,
        drift_windows=3,
        drift_keep_firing_windows=1,
        grace_ms=20_000,
        audit_lag_margin_ms=5_000,
    )


def test_gamma_fires_after_two_bad_windows_with_suggestion_and_numbers(settings):
    engine = AlertEngine(settings)
    per_call = feed(engine, [window(0), bad_gamma(1), bad_gamma(2), bad_gamma(3)])
    gamma = [only(evs, GAMMA_BELOW_TARGET) for evs in per_call]
    assert gamma[0] == [] and gamma[1] == [] and gamma[3] == []  # pending, then deduplicated
    (ev,) = gamma[2]
    assert ev.status is AlertStatus.FIRING
    assert (ev.topic, ev.tier, ev.severity) == ("t", "cluster:a", "warning")
    assert ev.suggestion == SUGGESTION
    assert ev.annotations()["suggestion"] == SUGGESTION
    assert ev.window_start_ms == T0 + 2 * W
    assert ev.value == pytest.approx(0.71) and ev.threshold == pytest.approx(0.9)
    assert ev.numbers["gamma_predicted"] == pytest.approx(0.72)
    assert ev.numbers["p_loss_hi"] == pytest.approx(0.01)
    assert "gamma 0.710 below target 0.900" in ev.summary
    assert SUGGESTION in ev.description
    assert engine.states()[(GAMMA_BELOW_TARGET, "t", "cluster:a")] is AlertState.FIRING
    assert [e.event_id for e in engine.firing()] == [ev.event_id]


def test_gamma_resolves_once_after_keep_firing_windows(settings):
    engine = AlertEngine(settings)
    per_call = feed(engine, [bad_gamma(0), bad_gamma(1), window(2), window(3), window(4), window(5)])
    events = [e for evs in per_call for e in only(evs, GAMMA_BELOW_TARGET)]
    assert [e.status for e in events] == [AlertStatus.FIRING, AlertStatus.RESOLVED]
    fired, resolved = events
    assert resolved.fingerprint == fired.fingerprint
    assert resolved.starts_at_ms == fired.starts_at_ms
    assert resolved.ends_at_ms == T0 + 100 * W + 3000  # the 4th call: second good window
    assert resolved.window_start_ms == T0 + 3 * W
    assert resolved.summary.startswith("resolved: ")
    assert engine.firing() == []


def test_gamma_does_not_flap_on_alternating_windows(settings):
    engine = AlertEngine(settings)
    rows = [bad_gamma(0), bad_gamma(1)] + [window(i) if i % 2 else bad_gamma(i) for i in range(2, 12)]
    events = [e for evs in feed(engine, rows) for e in only(evs, GAMMA_BELOW_TARGET)]
    assert [e.status for e in events] == [AlertStatus.FIRING]


def test_gamma_value_hysteresis_margin_keeps_firing_near_target():
    engine = AlertEngine(
        AlertSettings(gamma_for_windows=1, gamma_keep_firing_windows=1, gamma_resolve_margin=0.02)
    )
    rows = [
        bad_gamma(0),
        window(1, gamma_actual=0.91),
        window(2, gamma_actual=0.915),
        window(3, gamma_actual=0.93),
    ]
    per_call = [only(evs, GAMMA_BELOW_TARGET) for evs in feed(engine, rows)]
    assert [len(x) for x in per_call] == [1, 0, 0, 1]
    assert per_call[3][0].status is AlertStatus.RESOLVED


def test_gamma_target_falls_back_to_settings_and_unknown_without_it():
    rows = [window(0, gamma_target=None, gamma_actual=0.5)]
    assert only(AlertEngine(AlertSettings(gamma_for_windows=1)).observe(rows, T0), GAMMA_BELOW_TARGET) == []
    engine = AlertEngine(AlertSettings(gamma_for_windows=1, gamma_target=0.8))
    (ev,) = only(engine.observe(rows, T0), GAMMA_BELOW_TARGET)
    assert ev.threshold == pytest.approx(0.8)


def test_missing_numbers_leave_a_pending_alert_unchanged(settings):
    engine = AlertEngine(settings)
    rows = [bad_gamma(0), window(1, gamma_actual=None), bad_gamma(2)]
    events = [e for evs in feed(engine, rows) for e in only(evs, GAMMA_BELOW_TARGET)]
    assert [e.status for e in events] == [AlertStatus.FIRING]
    assert events[0].window_start_ms == T0 + 2 * W


def test_replayed_micro_batch_emits_nothing_twice(settings):
    engine = AlertEngine(settings)
    batch = [bad_gamma(0), bad_gamma(1)]
    first = engine.observe(batch, T0 + 100 * W)
    assert [e.status for e in only(first, GAMMA_BELOW_TARGET)] == [AlertStatus.FIRING]
    assert engine.observe(batch, T0 + 101 * W) == []  # Spark re-runs the batch after a driver crash
    # the same good windows replayed count once: one good window is not enough to resolve
    assert engine.observe([window(2)], T0 + 102 * W) == []
    assert engine.observe([window(2)], T0 + 103 * W) == []
    assert engine.states()[(GAMMA_BELOW_TARGET, "t", "cluster:a")] is AlertState.FIRING


def test_windows_in_one_batch_are_judged_in_window_order(settings):
    engine = AlertEngine(settings)
    events = engine.observe([window(2), bad_gamma(1), bad_gamma(0)], T0 + 100 * W)
    # 0 bad, 1 bad -> fire; 2 good -> one of two good windows: still firing
    assert [e.status for e in only(events, GAMMA_BELOW_TARGET)] == [AlertStatus.FIRING]
    assert only(events, GAMMA_BELOW_TARGET)[0].window_start_ms == T0 + W


def test_a_window_final_after_a_newer_one_is_judged_once_and_stays_open_until_then(settings):
    # Window 0 waits longer (say, its producers' message.timeout.ms was longer): window 1 is final first.
    bad = {"unique": 970, "completeness": 0.97, "loss_rate": 0.03}
    engine = AlertEngine(settings)
    engine.observe([window(0, state="provisional", **bad), window(1, state="provisional")], T0)
    assert only(engine.observe([window(1)], T0 + 1), COMPLETENESS_BELOW_TARGET) == []
    # window 0 is still open: the audit-lag rule sees it, and a restart keeps it undecided
    lag = only(engine.observe([], window(0)["window_end_ms"] + 10**6), AUDIT_LAG)
    assert [e.window_start_ms for e in lag] == [T0]
    restarted = AlertEngine(settings)
    restarted.restore(engine.to_state())
    for e in (engine, restarted):
        (ev,) = only(e.observe([window(0, **bad)], T0 + 2), COMPLETENESS_BELOW_TARGET)
        assert ev.status is AlertStatus.FIRING and ev.window_start_ms == T0
        # replays of either final window change nothing
        assert only(e.observe([window(0, **bad), window(1)], T0 + 3), COMPLETENESS_BELOW_TARGET) == []
        state = e.to_state()
        assert state["judged_ahead"] == [] and state["last_final"] == [["t", "cluster:a", T0 + W]]


def test_fire_resolve_fire_in_one_call_gives_distinct_episodes():
    engine = AlertEngine(AlertSettings(gamma_for_windows=1, gamma_keep_firing_windows=1))
    events = only(engine.observe([bad_gamma(0), window(1), bad_gamma(2)], T0), GAMMA_BELOW_TARGET)
    assert [e.status for e in events] == [AlertStatus.FIRING, AlertStatus.RESOLVED, AlertStatus.FIRING]
    assert len({e.event_id for e in events}) == 3
    assert events[2].starts_at_ms > events[1].ends_at_ms


def test_completeness_below_target_fires_on_first_window(settings):
    engine = AlertEngine(settings)
    row = window(0, unique=970, completeness=0.97, loss_rate=0.03)
    (ev,) = only(engine.observe([row], T0), COMPLETENESS_BELOW_TARGET)
    assert ev.severity == "critical"
    assert ev.value == pytest.approx(0.97) and ev.threshold == pytest.approx(0.999)
    assert "970 of 1,000 messages arrived, R_l 3.00%" in ev.description
    assert "completeness 97.00% below target 99.90%" in ev.summary


def test_completeness_needs_sent_messages(settings):
    engine = AlertEngine(settings)
    assert only(engine.observe([window(0, sent=0, completeness=0.0)], T0), COMPLETENESS_BELOW_TARGET) == []


def test_drift_fires_after_k_consecutive_windows_outside_interval(settings):
    engine = AlertEngine(settings)

    def outside(i, loss=0.15):
        return window(
            i, loss_rate=loss, unique=1000 * (1 - loss), completeness=1 - loss, model_calibrated=True
        )

    rows = [
        outside(0),
        outside(1),
        window(2, model_calibrated=True),
        outside(3),
        outside(4),
        outside(5, loss=0.2),
    ]
    per_call = [only(evs, PREDICTION_DRIFT) for evs in feed(engine, rows)]
    # the good window 2 breaks the streak: fires only at the third consecutive outside window
    assert [len(x) for x in per_call] == [0, 0, 0, 0, 0, 1]
    (ev,) = per_call[5]
    assert "actual R_l 20.00% above the predicted 90% interval [0.00%, 1.00%]" in ev.summary
    assert ev.threshold == pytest.approx(0.01)


def test_drift_below_interval_and_tolerance():
    rows = [window(i, loss_rate=0.0, p_loss_lo=0.05, p_loss_hi=0.2, model_calibrated=True) for i in range(3)]
    engine = AlertEngine(AlertSettings(drift_windows=3))
    events = [e for evs in feed(engine, rows) for e in only(evs, PREDICTION_DRIFT)]
    assert len(events) == 1 and "below" in events[0].summary
    tolerant = AlertEngine(AlertSettings(drift_windows=3, drift_tolerance=0.06))
    assert [e for evs in feed(tolerant, rows) for e in only(evs, PREDICTION_DRIFT)] == []


def _drifting(i: int, calibrated: bool | None, loss: float = 0.15, version: str = "v0003") -> dict[str, Any]:
    """Final window i with R_l far above the predicted interval [0%, 1%] of model ``version``."""
    return window(
        i,
        loss_rate=loss,
        unique=1000 * (1 - loss),
        completeness=1 - loss,
        model_version=version,
        model_calibrated=calibrated,
    )


def _drift_events(engine: AlertEngine, rows: list[dict[str, Any]]) -> list[list[Any]]:
    return [only(evs, PREDICTION_DRIFT) for evs in feed(engine, rows)]


def test_drift_never_fires_while_the_model_is_calibrating(settings):
    engine = AlertEngine(settings)
    rows = [_drifting(i, calibrated=False) for i in range(10)] + [_drifting(10, calibrated=None)]
    assert all(evs == [] for evs in _drift_events(engine, rows))
    assert (PREDICTION_DRIFT, "t", "cluster:a") not in engine.firing()
    # unknown observations leave the machine as it was: inactive, no streak
    assert engine.states()[(PREDICTION_DRIFT, "t", "cluster:a")] is AlertState.INACTIVE


def test_drift_fires_once_the_model_is_calibrated(settings):
    engine = AlertEngine(settings)
    rows = [_drifting(i, calibrated=False) for i in range(5)]
    rows += [_drifting(i, calibrated=True) for i in range(5, 8)]
    per_call = _drift_events(engine, rows)
    assert [len(x) for x in per_call] == [0, 0, 0, 0, 0, 0, 0, 1]  # k = 3 calibrated windows
    (ev,) = per_call[7]
    assert ev.status is AlertStatus.FIRING and ev.window_start_ms == T0 + 7 * W
    assert "of model v0003 (calibrated)" in ev.description


def test_drift_switching_back_to_calibrating_does_not_fire_or_resolve(settings):
    engine = AlertEngine(settings)
    # two calibrated windows outside: pending; then the model calibrates again (a promotion): nothing
    rows = [_drifting(0, calibrated=True), _drifting(1, calibrated=True)]
    rows += [_drifting(i, calibrated=False, version="v0004") for i in range(2, 12)]
    assert all(evs == [] for evs in _drift_events(engine, rows))
    assert engine.states()[(PREDICTION_DRIFT, "t", "cluster:a")] is AlertState.PENDING
    # a firing drift alert neither resolves on calibrating windows inside the interval
    firing = AlertEngine(AlertSettings(drift_windows=1, drift_keep_firing_windows=1))
    per_call = _drift_events(
        firing,
        [
            _drifting(0, calibrated=True),
            window(1, model_calibrated=False),
            window(2, model_calibrated=None),
            window(3, model_calibrated=True),
        ],
    )
    assert [[e.status for e in x] for x in per_call] == [[AlertStatus.FIRING], [], [], [AlertStatus.RESOLVED]]


def test_unaudited_producers(settings):
    engine = AlertEngine(settings)
    (ev,) = only(engine.observe([window(0, unaudited_producers=2, unaudited=40)], T0), UNAUDITED_PRODUCERS)
    assert ev.value == 2 and "2 unaudited producer(s)" in ev.summary
    assert "AuditedProducer" in (ev.suggestion or "")
    assert only(engine.observe([window(1)], T0 + 1), UNAUDITED_PRODUCERS) == []  # keep firing: 2 windows
    (res,) = only(engine.observe([window(2)], T0 + 2), UNAUDITED_PRODUCERS)
    assert res.status is AlertStatus.RESOLVED


def test_audit_lag_fires_when_window_stays_provisional_past_grace_and_margin(settings):
    engine = AlertEngine(settings)
    prov = window(0, state="provisional")
    end = prov["window_end_ms"]
    limit = settings.grace_ms + settings.audit_lag_margin_ms
    assert only(engine.observe([prov], end + 1000), AUDIT_LAG) == []
    assert only(engine.observe([], end + limit), AUDIT_LAG) == []  # not yet: strictly after
    (ev,) = only(engine.observe([], end + limit + 5000), AUDIT_LAG)
    assert ev.status is AlertStatus.FIRING and ev.severity == "critical"
    assert ev.window_start_ms == prov["window_start_ms"]
    assert ev.value == pytest.approx((limit + 5000) / 1000)
    assert ev.numbers["late_windows"] == 1
    assert only(engine.observe([], end + limit + 9000), AUDIT_LAG) == []  # deduplicated
    (res,) = only(engine.observe([window(0)], end + limit + 10_000), AUDIT_LAG)
    assert res.status is AlertStatus.RESOLVED


def test_audit_lag_ignores_provisional_rows_of_windows_already_final(settings):
    engine = AlertEngine(settings)
    engine.observe([window(5)], T0)
    late_replay = window(3, state="provisional")
    assert only(engine.observe([late_replay], late_replay["window_end_ms"] + 10**6), AUDIT_LAG) == []


def test_alerts_are_per_topic_and_tier(settings):
    engine = AlertEngine(AlertSettings(gamma_for_windows=1))
    events = engine.observe(
        [bad_gamma(0, tier="cluster:a"), window(0, tier="cluster:b"), bad_gamma(0, topic="u")], T0
    )
    fired = {(e.topic, e.tier) for e in only(events, GAMMA_BELOW_TARGET)}
    assert fired == {("t", "cluster:a"), ("u", "cluster:a")}
    assert len({e.fingerprint for e in only(events, GAMMA_BELOW_TARGET)}) == 2


def test_bad_rows_are_skipped_and_counted(settings):
    engine = AlertEngine(settings)
    rows = [{"topic": "t", "state": "final"}, {"kind": "dead_letter", "reason": "x"}, window(0)]
    assert engine.observe(rows, T0) == []
    assert engine.skipped_rows == 1


def test_disabled_rules_are_not_evaluated():
    engine = AlertEngine(AlertSettings(disabled_rules=[GAMMA_BELOW_TARGET, AUDIT_LAG], gamma_for_windows=1))
    assert engine.observe([bad_gamma(0)], T0) == []
    assert engine.lag_rule is None


def test_firing_gauge_and_event_counter(settings):
    registry = CollectorRegistry()
    metrics = AlertMetrics(registry)
    engine = AlertEngine(AlertSettings(gamma_for_windows=1, gamma_keep_firing_windows=1))
    labels = {"alertname": GAMMA_BELOW_TARGET, "topic": "t", "severity": "warning"}
    events = engine.observe([bad_gamma(0)], T0)
    metrics.count_events(events)
    metrics.update_firing(engine.firing())
    assert registry.get_sample_value("kafka_audit_alerts_firing", labels) == 1
    events = engine.observe([window(1)], T0 + 1)
    metrics.count_events(events)
    metrics.update_firing(engine.firing())
    assert registry.get_sample_value("kafka_audit_alerts_firing", labels) == 0
    assert (
        registry.get_sample_value(
            "kafka_audit_alert_events_total", {"alertname": GAMMA_BELOW_TARGET, "status": "resolved"}
        )
        == 1
    )
    assert registry.get_sample_value("kafka_audit_alert_sink_errors_total", {"sink": "webhook"}) == 0


def test_settings_from_environment(monkeypatch):
    monkeypatch.setenv("KAFKA_AUDIT_ALERTS_GAMMA_FOR_WINDOWS", "4")
    monkeypatch.setenv("KAFKA_AUDIT_ALERTS_ALERTMANAGER_URL", "http://127.0.0.1:9093")
    s = AlertSettings()
    assert s.gamma_for_windows == 4
    assert str(s.alertmanager_url) == "http://127.0.0.1:9093/"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"gamma_for_windows": 0}, "KAFKA_AUDIT_ALERTS_GAMMA_FOR_WINDOWS"),
        ({"completeness_target": 99.9}, "completeness_target"),
        ({"gamma_severity": "page"}, "'warning' or 'critical'"),
        ({"disabled_rules": ["KafkaAuditNope"]}, "allowed: KafkaAuditCompletenessBelowTarget"),
        ({"alertmanager_url": "ftp://x"}, "alertmanager_url"),
        ({"alertmanager_ttl_ms": 1000, "alertmanager_resend_ms": 5000}, "must exceed alertmanager_resend_ms"),
    ],
)
def test_bad_settings_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match="invalid alert settings") as info:
        load_settings(**overrides)
    assert message in str(info.value)
