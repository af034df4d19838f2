"""The SLOs evaluated in the job (``alerts.slo_evaluation``): the same numbers as ``slo status``, alerts.

The evaluator is fed window results micro-batch by micro-batch through the alert pipeline, as the job
does; its gauges (read from the registry the job's exporter serves) must equal ``slo_status`` over all
the rows at the same instant, and its burn-rate alerts must page / resolve / stay silent as the
Prometheus rules do (``test_slo_rules.py``'s cases, on window results instead of counters).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from prometheus_client import CollectorRegistry

from alerts.batch_listener import AlertPipeline
from alerts.event import AlertEvent
from alerts.settings import AlertSettings
from alerts.slo_evaluation import SloEvaluator, WindowHistory
from alerts.slo_rules import ALERT_NAME
from alerts.slo_settings import SloSettings
from alerts.slo_status import slo_status

from .test_slo_status import WINDOW_MS, result

T0 = 1_700_000_000_000 - 1_700_000_000_000 % WINDOW_MS
PER_WINDOW = 10_000


class RecordingSink:
    name = "webhook"

    def __init__(self) -> None:
        self.events: list[AlertEvent] = []

    def send(self, events: Sequence[AlertEvent], now_ms: int) -> None:
        self.events.extend(events)

    def close(self) -> None:
        pass


def pipeline(settings: SloSettings, tmp_path=None) -> tuple[AlertPipeline, RecordingSink, CollectorRegistry]:
    registry = CollectorRegistry()
    sink = RecordingSink()
    state = tmp_path / "alerts-state.json" if tmp_path is not None else None
    rules_off = AlertSettings(
        disabled_rules=[
            "KafkaAuditCompletenessBelowTarget",
            "KafkaAuditGammaBelowTarget",
            "KafkaAuditPredictionDrift",
            "KafkaAuditAuditLag",
            "KafkaAuditUnauditedProducers",
            "KafkaAuditUnauditedTraffic",
            "KafkaAuditUnaccountedMessages",
        ]
    )
    p = AlertPipeline(
        rules_off, registry=registry, sinks=[sink], state_path=state, slo=SloEvaluator(settings, registry)
    )
    return p, sink, registry


def run(
    p: AlertPipeline, ticks: range, lost_at: dict[int, int], topic: str = "orders", per: int = PER_WINDOW
):
    """One micro-batch per window: window i ends at T0 + i min and is final 20 s later."""
    rows = []
    for i in ticks:
        row = result(topic, T0 + i * WINDOW_MS, per, per - lost_at.get(i, 0))
        rows.append(row)
        p.process([row], now_ms=T0 + i * WINDOW_MS + 20_000)
    return rows


def gauge(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_gauges_equal_slo_status_over_the_same_window_results():
    settings = SloSettings()
    p, _sink, registry = pipeline(settings)
    lost = {i: 300 for i in range(100, 110)} | {i: 2 for i in range(0, 120, 7)}
    rows = run(p, range(120), lost)
    now = T0 + 119 * WINDOW_MS + 20_000
    (expected,) = slo_status(rows, settings, now)
    labels = {"slo": "completeness", "topic": "orders", "tier": "cluster:eu"}
    assert gauge(registry, "kafka_audit_slo_error_budget_remaining_ratio", **labels) == pytest.approx(
        expected.budget_left
    )
    assert gauge(registry, "kafka_audit_slo_period_messages", kind="sent", **labels) == 120 * PER_WINDOW
    assert gauge(registry, "kafka_audit_slo_period_messages", kind="lost", **labels) == sum(lost.values())
    for w, burn in expected.burn_rates.items():
        assert gauge(registry, "kafka_audit_slo_burn_rate", window=w, **labels) == pytest.approx(burn)
    assert gauge(registry, "kafka_audit_slo_objective_ratio", slo="completeness") == 0.9999
    assert gauge(registry, "kafka_audit_slo_evaluated_at_seconds") == now / 1000
    assert p.slo is not None and p.slo.statuses == [expected]


def test_a_fast_burn_pages_once_with_the_budget_and_windows_then_resolves():
    p, sink, registry = pipeline(SloSettings())
    run(p, range(60), {})  # an hour healthy
    run(p, range(60, 66), {i: 3_000 for i in range(60, 66)})  # 30% lost: 3000x the budget
    fired = [e for e in sink.events if e.firing]
    assert sorted((e.alertname, e.topic, e.tier, e.severity) for e in fired) == [
        (ALERT_NAME, "orders", "cluster:eu", "critical"),  # the 1h/5m and 6h/30m pages: one alert
        (ALERT_NAME, "orders", "cluster:eu", "warning"),  # 3 days' 1x ticket: its 6h window burns too
    ]
    fired = [e for e in fired if e.severity == "critical"]
    page = fired[0]
    assert page.starts_at_ms == T0 + 60 * WINDOW_MS + 20_000  # the first lossy window's evaluation
    assert page.threshold == 14.4 and page.value is not None and page.value > 14.4
    assert page.numbers["period_lost"] == 3_000 and page.numbers["budget_left"] == pytest.approx(
        1 - (3_000 / (61 * PER_WINDOW)) / 0.0001
    )
    assert "completeness (1h/5m 14.4x)" in page.description
    assert "completeness (6h/30m 6x)" in page.description
    assert "lost 3000 of 10000" in page.description and page.window_end_ms == T0 + 60 * WINDOW_MS
    assert gauge(
        registry, "kafka_audit_alerts_firing", alertname=ALERT_NAME, topic="orders", severity="critical"
    )
    assert [e for e in sink.events if not e.firing] == []
    run(p, range(66, 100), {})  # the loss stops: 5m clean 5 windows later, 30m clean 30 windows later
    resolved = [e for e in sink.events if not e.firing and e.severity == "critical"]
    assert len(resolved) == 1 and resolved[0].starts_at_ms == page.starts_at_ms
    assert resolved[0].ends_at_ms == T0 + 95 * WINDOW_MS + 20_000  # both pages' short windows clean
    assert len([e for e in sink.events if e.firing and e.severity == "critical"]) == 1  # no second page


def test_a_one_window_blip_and_a_low_traffic_topic_page_nobody():
    p, sink, _ = pipeline(SloSettings())
    run(p, range(120), {90: 80})  # 0.8% in one window: 5m burns 16x (> 14.4), 1h 1.3x, 6h 0.9x
    run(p, range(120), {i: 1 for i in range(0, 120, 12)}, topic="trickle", per=1)  # 10 msg/h, all lost
    pages = [e for e in sink.events if e.severity == "critical"]
    assert pages == []
    tickets = [e for e in sink.events if e.firing and e.severity == "warning"]
    assert [e.topic for e in tickets] == ["trickle"]  # the low-traffic topic opens a ticket


def test_firing_alerts_survive_a_restart_and_resolve_once(tmp_path):
    p, sink, _ = pipeline(SloSettings(), tmp_path)
    rows = run(p, range(66), {i: 3_000 for i in range(60, 66)})
    assert len([e for e in sink.events if e.firing and e.severity == "critical"]) == 1
    again, sink2, _ = pipeline(SloSettings(), tmp_path)
    assert again.slo is not None
    again.slo.load(rows, T0 + 65 * WINDOW_MS + 20_000)  # attach_to_job reads them from the Parquet files
    run(again, range(66, 100), {})
    pages = [e for e in sink2.events if e.severity == "critical"]
    assert [e.status.value for e in pages] == ["firing", "resolved"]  # re-sent once, then resolved
    assert pages[0].event_id == next(e for e in sink.events if e.firing and e.severity == "critical").event_id


def test_windows_older_than_the_alert_windows_are_merged_without_changing_the_numbers():
    history = WindowHistory(fine_ms=10 * WINDOW_MS, keep_ms=100 * WINDOW_MS, bucket_ms=20 * WINDOW_MS)
    rows = [result("t", T0 + i * WINDOW_MS, 100, 100 - i % 3) for i in range(1, 201)]
    now = T0 + 200 * WINDOW_MS
    history.add(rows, now)
    history.prune(now)
    assert len(history._fine[("t", "cluster:eu")]) == 10 and len(history._buckets[("t", "cluster:eu")]) <= 6
    lookbacks = [5 * WINDOW_MS, 10 * WINDOW_MS, 100 * WINDOW_MS]
    rings = history.rows(now, lookbacks)
    assert len(rings) == 3  # one result per ring between the look-backs
    for w in lookbacks:  # each look-back adds up to what its windows hold
        inside = [r for r in rows if now - w < r["window_end_ms"] <= now]
        counted = [r for r in rings if now - w < r["window_end_ms"] <= now]
        assert sum(r["sent"] for r in counted) == sum(r["sent"] for r in inside), w
        assert sum(r["sent"] - r["unique"] for r in counted) == sum(
            r["sent"] - r["unique"] for r in inside
        ), w


def test_a_freshness_slo_is_judged_in_the_job_from_the_windows_histograms():
    from audit_record.freshness import BOUNDS_MS, N_COUNTS

    settings = SloSettings(
        completeness=[], freshness=[{"name": "fresh", "threshold_s": 30, "objective": 0.99}]
    )
    p, sink, registry = pipeline(settings)
    within, late = BOUNDS_MS.index(10_000), BOUNDS_MS.index(60_000)  # held within 10 s; 30-60 s late

    def histogram(on_time: int, behind: int) -> list[int]:
        counts = [0] * N_COUNTS
        counts[within], counts[late] = on_time, behind
        return counts

    for i in range(90):  # 1 h 30 min of windows; the last 30 have 40% of their messages 30-60 s late
        row = result("orders", T0 + i * WINDOW_MS, PER_WINDOW, PER_WINDOW)
        row["freshness_counts"] = histogram(6_000, 4_000) if i >= 60 else histogram(PER_WINDOW, 0)
        p.process([row], now_ms=T0 + i * WINDOW_MS + 20_000)
    [page] = [e for e in sink.events if e.firing and e.severity == "critical"]
    assert (page.alertname, page.topic) == ("KafkaAuditFreshnessBudgetBurn", "orders")
    assert "held later than the SLO's threshold" in page.description
    labels = {"slo": "fresh", "topic": "orders", "tier": "cluster:eu"}
    assert (
        registry.get_sample_value("kafka_audit_slo_period_messages", {**labels, "kind": "lost"}) == 30 * 4_000
    )
    assert registry.get_sample_value(
        "kafka_audit_slo_burn_rate", {**labels, "window": "5m"}
    ) == pytest.approx(40.0)
