"""`kafka-audit slo status --at --json`: the statuses at a given instant, as the job computed them there."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from alerts.slo_evaluation import SloEvaluator
from alerts.slo_settings import SloSettings
from kafka_audit.cli import app
from spark_streaming.sinks import ParquetResultSink

from .test_slo_status import WINDOW_MS, result

NOW_MS = 1_800_000_000_000 - 1_800_000_000_000 % WINDOW_MS + 20_000


def test_status_at_an_instant_as_json_equals_the_jobs_gauges_of_that_instant(tmp_path):
    rows = [
        result("orders", NOW_MS - 20_000 - i * WINDOW_MS, 1_000, 1_000 - (40 if i < 3 else 0))
        for i in range(90)
    ]
    ParquetResultSink(tmp_path).write(1, rows)
    registry = CollectorRegistry()
    job = SloEvaluator(SloSettings(), registry)
    job.observe(rows, NOW_MS)  # what the job's alert pipeline does with a micro-batch
    at = registry.get_sample_value("kafka_audit_slo_evaluated_at_seconds")
    out = CliRunner().invoke(
        app, ["slo", "status", "--results-dir", str(tmp_path), "--at", str(at), "--json"]
    )
    assert out.exit_code == 0, out.output
    [status] = json.loads(out.output)
    labels = {"slo": "completeness", "topic": "orders", "tier": "cluster:eu"}
    assert status["evaluated_at_ms"] == NOW_MS
    assert status["period_counts"] == {"sent": 90_000, "lost": 120}
    assert status["budget_left"] == pytest.approx(
        registry.get_sample_value("kafka_audit_slo_error_budget_remaining_ratio", labels)
    )
    for window, burn in status["burn_rates"].items():
        assert burn == pytest.approx(
            registry.get_sample_value("kafka_audit_slo_burn_rate", {**labels, "window": window})
        )
    assert status["state"] == "page" and "1h/5m 14.4x" in status["firing"]


def test_rules_name_freshness_slos_with_their_threshold(tmp_path):
    config = tmp_path / "slo.toml"
    config.write_text('[slo]\n[[slo.freshness]]\nname = "fresh"\nthreshold_s = 30\n')
    out = CliRunner().invoke(
        app, ["slo", "rules", "--config", str(config), "--out", str(tmp_path / "r.yml")], terminal_width=200
    )
    assert out.exit_code == 0, out.output
    assert "fresh: freshness 0.99 within 30 s over 30d" in out.output
    assert "not yet measured" not in out.output


def test_report_freshness_percentiles_are_the_bucket_bounds_they_fall_in():
    from audit_record.freshness import BOUNDS_MS, N_COUNTS
    from dashboards.report_slos import freshness_bound_s, freshness_table

    counts = [0] * N_COUNTS
    counts[BOUNDS_MS.index(1_000)] = 50  # half within 1 s
    counts[BOUNDS_MS.index(30_000)] = 49  # 99% within 30 s
    counts[-1] = 1  # one message more than an hour late
    assert [freshness_bound_s(counts, q) for q in (0.5, 0.9, 0.99, 1.0)] == [
        "<= 1 s",
        "<= 30 s",
        "<= 30 s",
        "> 3600 s",
    ]
    table = freshness_table([{"topic": "t", "tier": "cluster:eu", "counts": counts}])
    assert "<td>100</td><td>&lt;= 1 s</td><td>&lt;= 30 s</td><td>&lt;= 30 s</td>" in table
