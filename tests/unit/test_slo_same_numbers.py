"""Issue 40 acceptance: `slo status`, the job's gauges (what the "SLOs" dashboard shows) and the report
show the same numbers as the window results they come from.

The window results are written by the job's own Parquet sink; the expected numbers are summed here from
those rows by hand (events = sent, bad = sent - unique per window, budget left = 1 - ratio / (1 -
objective), burn = ratio over the look-back / (1 - objective)). The three readers then show them:
``kafka-audit slo status --json --at T``, the gauges of the job's SLO evaluation at T (the dashboard's
panels query exactly these series: ``tests/integration/test_slo_job_live.py`` checks the queries through a
real Prometheus), and ``kafka-audit report``'s SLO section.
"""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from alerts.slo_evaluation import SloEvaluator
from alerts.slo_settings import SloSettings
from dashboards.report import write_report
from kafka_audit.cli import _slo_report, app
from spark_streaming.sinks import ParquetResultSink

from .test_slo_status import WINDOW_MS, result

T_MS = 1_800_000_000_000 - 1_800_000_000_000 % WINDOW_MS + 25_000
"""The instant every reader evaluates at: 25 s after a window's end."""
OBJECTIVE = 0.9999


def windows() -> list[dict]:
    """Two topics over 7 hours: 'orders' lost 30 messages in each of its last 8 windows, 'ok' none."""
    rows = []
    for i in range(420):
        end = T_MS - 25_000 - i * WINDOW_MS
        rows.append(result("orders", end, 2_000, 2_000 - (30 if i < 8 else 0)))
        rows.append(result("ok", end, 500, 500))
    return rows


def expected(rows: list[dict], topic: str, lookback_ms: int) -> tuple[int, int]:
    inside = [r for r in rows if r["topic"] == topic and T_MS - lookback_ms < r["window_end_ms"] <= T_MS]
    return sum(r["sent"] for r in inside), sum(r["sent"] - r["unique"] for r in inside)


LOOKBACKS = {"5m": 300_000, "30m": 1_800_000, "1h": 3_600_000, "6h": 21_600_000, "3d": 259_200_000}


def test_status_gauges_and_report_show_the_window_results_numbers(tmp_path):
    rows = windows()
    ParquetResultSink(tmp_path / "results").write(7, rows)
    truth = {}
    for topic in ("orders", "ok"):
        sent, lost = expected(rows, topic, 30 * 86_400_000)
        burns = {
            w: (expected(rows, topic, ms)[1] / expected(rows, topic, ms)[0]) / (1 - OBJECTIVE)
            for w, ms in LOOKBACKS.items()
        }
        truth[topic] = {
            "sent": sent,
            "lost": lost,
            "budget_left": 1 - (lost / sent) / (1 - OBJECTIVE),
            "burns": burns,
        }
    assert truth["orders"]["lost"] == 240 and truth["orders"]["sent"] == 840_000

    # 1. kafka-audit slo status
    out = CliRunner().invoke(
        app, ["slo", "status", "--results-dir", str(tmp_path / "results"), "--at", str(T_MS / 1000), "--json"]
    )
    assert out.exit_code == 0, out.output
    status = {s["topic"]: s for s in json.loads(out.output)}
    # 2. the job's gauges, fed micro-batch by micro-batch (each window's final result 20 s after its end)
    registry = CollectorRegistry()
    job = SloEvaluator(SloSettings(), registry)
    for row in sorted(rows, key=lambda r: r["window_end_ms"]):
        job.observe([row], row["window_end_ms"] + 20_000)
    job.observe([], T_MS)
    assert registry.get_sample_value("kafka_audit_slo_evaluated_at_seconds") == T_MS / 1000
    # 3. the report's SLO section
    report = tmp_path / "report.html"
    write_report(
        tmp_path / "results",
        report,
        None,
        now=datetime.fromtimestamp(T_MS / 1000, UTC),
        slo=_slo_report(None),
    )
    page = html.unescape(report.read_text())

    for topic, want in truth.items():
        s = status[topic]
        assert s["period_counts"] == {"sent": want["sent"], "lost": want["lost"]}
        assert s["budget_left"] == pytest.approx(want["budget_left"])
        for w, burn in want["burns"].items():
            if w in s["burn_rates"]:
                assert s["burn_rates"][w] == pytest.approx(burn), w
        labels = {"slo": "completeness", "topic": topic, "tier": "cluster:eu"}

        def gauge(name: str, labels: dict = labels, **extra: str) -> float | None:
            return registry.get_sample_value(name, {**labels, **extra})

        assert gauge("kafka_audit_slo_period_messages", kind="sent") == want["sent"]
        assert gauge("kafka_audit_slo_period_messages", kind="lost") == want["lost"]
        assert gauge("kafka_audit_slo_error_budget_remaining_ratio") == pytest.approx(want["budget_left"])
        assert gauge("kafka_audit_slo_error_budget_messages") == pytest.approx((1 - OBJECTIVE) * want["sent"])
        for w, burn in want["burns"].items():
            assert gauge("kafka_audit_slo_burn_rate", window=w) == pytest.approx(burn), w
        [row] = [
            r
            for r in re.findall(r"<tr>(.*?)</tr>", page)
            if f"<td>{topic}</td>" in r and "<td>completeness</td><td>completeness</td>" in r
        ]
        cells = re.findall(r"<td>(.*?)</td>", row)
        assert cells[6:10] == [
            f"{want['sent']:,}",
            f"{want['lost']:,}",
            f"{100 * (1 - want['lost'] / want['sent']):.4f}%",
            f"{100 * want['budget_left']:.1f}%",
        ]
        assert cells[10:15] == [f"{want['burns'][w]:.2f}x" for w in ("5m", "30m", "1h", "6h", "3d")]
    assert status["orders"]["state"] == "page" and status["ok"]["state"] == "ok"
    # The windows that spent the budget: orders' 8 lossy windows, each 30 / (1e-4 x 840,000) of it.
    assert page.count(f"{100 * 30 / ((1 - OBJECTIVE) * 840_000):.2f}%") == 8
