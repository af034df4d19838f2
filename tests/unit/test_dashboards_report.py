"""`kafka-audit report`: reading Parquet results (old and new schema) and alerts, rendering the HTML."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from audit_record.window_result import LIVE_COMPARISON_FIELDS as PREDICTION_COLUMNS
from audit_record.window_result import MODEL_FIELDS
from dashboards.report import render
from dashboards.report_data import (
    UNKNOWN_VERSION,
    load_alerts,
    load_results,
    parse_since,
    predicted_windows,
    rolling_accuracy,
    topic_accuracy,
    version_summary,
)
from kafka_audit.cli import app
from kafka_plumbing.errors import ConfigError
from spark_streaming.sinks import PARQUET_SCHEMA, ParquetResultSink
from spark_streaming.window_state import RESULT_COLUMNS

NOW = datetime.now(UTC).replace(microsecond=0)
NOW_MS = int(NOW.timestamp() * 1000)
WINDOW_MS = 60_000


def result_row(topic: str, start_ms: int, sent: int, unique: int, dup: int = 0, **extra) -> dict:
    """A final window result with every column the sink writes (RESULT_COLUMNS) plus ``extra``."""
    row = {name: None for name, _ in RESULT_COLUMNS}
    row.update(
        topic=topic,
        window_start_ms=start_ms,
        window_end_ms=start_ms + WINDOW_MS,
        tier="cluster:local",
        state="final",
        sent=sent,
        received=unique + dup,
        unique=unique,
        duplicated=dup,
        producers=1,
        unaudited_producers=0,
        loss_rate=(sent - unique) / sent,
        duplicate_rate=dup / sent,
        completeness=unique / sent,
        result_at_ms=start_ms + 2 * WINDOW_MS,
    )
    row.update(extra)
    return row


def write_with_predictions(root: Path, batch_id: int, rows: list[dict]) -> None:
    """Write rows in the sink's layout with the live-comparison columns (newer results)."""
    fields = list(PARQUET_SCHEMA) + [
        pa.field(c, pa.string() if c == "suggestion" else pa.float64())
        for c in PREDICTION_COLUMNS
        if c not in PARQUET_SCHEMA.names
    ]
    schema = pa.schema(fields)
    day = datetime.fromtimestamp(rows[0]["window_start_ms"] / 1000, UTC).strftime("%Y-%m-%d")
    folder = root / f"date={day}"
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)
    pq.write_table(table, folder / f"batch-{batch_id:012d}.parquet")


@pytest.fixture
def results_dir(tmp_path) -> Path:
    root = tmp_path / "results"
    start = NOW_MS - NOW_MS % WINDOW_MS - 30 * WINDOW_MS
    old = [result_row("orders", start + i * WINDOW_MS, 1000, 1000 - 7 * i, dup=i) for i in range(20)]
    old.append(result_row("orders", start - 90 * WINDOW_MS, 1000, 10))  # outside --since 1h
    old.append(result_row("orders", start + 25 * WINDOW_MS, 1000, 1000) | {"state": "provisional"})
    ParquetResultSink(root).write(7, old)
    new = [
        result_row(
            "clicks",
            start + i * WINDOW_MS,
            2000,
            2000 - 20 * (i % 3),
            p_loss=0.01,
            p_loss_lo=0.002,
            p_loss_hi=0.03,
            p_dup=0.001,
            p_dup_lo=0.0,
            p_dup_hi=0.004,
            gamma_actual=0.9 - 0.01 * (i % 3),
            gamma_predicted=0.91,
            gamma_target=0.88,
            suggestion="raise batch.num.messages 1 -> 4" if i % 3 == 2 else None,
        )
        for i in range(20)
    ]
    write_with_predictions(root, 8, new)
    # A re-written window (same key, later result): the newest wins.
    write_with_predictions(
        root, 9, [new[0] | {"completeness": 0.5, "result_at_ms": new[0]["result_at_ms"] + 1}]
    )
    return root


def test_parse_since():
    assert parse_since("1h") == timedelta(hours=1)
    assert parse_since("90s") == timedelta(seconds=90)
    assert parse_since("1.5d") == timedelta(hours=36)
    for bad in ("1", "h", "-1h", "0m", "1y", "one hour"):
        with pytest.raises(ConfigError, match="--since"):
            parse_since(bad)


def test_load_results_reads_old_and_new_schema_final_windows_in_range(results_dir):
    frame = load_results(results_dir, timedelta(hours=1), NOW)
    assert sorted(frame.groupby("topic").size().items()) == [("clicks", 20), ("orders", 20)]
    assert set(frame["state"]) == {"final"}
    orders, clicks = frame[frame.topic == "orders"], frame[frame.topic == "clicks"]
    assert orders["p_loss"].isna().all() and orders["gamma_actual"].isna().all()
    assert clicks["p_loss"].notna().all()
    first = clicks.sort_values("window_start_ms").iloc[0]
    assert first["completeness"] == 0.5
    assert list(frame["window_start_ms"]) == sorted(frame["window_start_ms"])
    assert len(load_results(results_dir, None, NOW)) == 41


def test_load_results_missing_dir(tmp_path):
    with pytest.raises(ConfigError, match="--results-dir"):
        load_results(tmp_path / "nope", None, NOW)


def _alert(status: str, at_ms: int, **kw) -> dict:
    base = {
        "fingerprint": "0123456789abcdef",
        "alertname": "KafkaAuditGammaBelowTarget",
        "topic": "clicks",
        "tier": "cluster:local",
        "severity": "warning",
        "status": status,
        "starts_at_ms": NOW_MS - 600_000,
        "ends_at_ms": at_ms if status == "resolved" else None,
        "event_at_ms": at_ms,
        "window_start_ms": NOW_MS - 660_000,
        "summary": "clicks (cluster:local): gamma 0.880 below target 0.900",
        "suggestion": "raise batch.num.messages 1 -> 4",
    }
    return base | kw


def test_load_alerts_keeps_the_newest_event_per_episode(tmp_path):
    path = tmp_path / "alerts.jsonl"
    events = [
        _alert("firing", NOW_MS - 600_000),
        _alert("resolved", NOW_MS - 300_000),
        _alert("firing", NOW_MS - 100_000, alertname="KafkaAuditAuditLag", starts_at_ms=NOW_MS - 100_000),
        _alert("resolved", NOW_MS - 9_000_000, starts_at_ms=NOW_MS - 9_900_000),  # long over
    ]
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    alerts = load_alerts(path, timedelta(hours=1), NOW)
    assert list(zip(alerts["alertname"], alerts["status"], strict=True)) == [
        ("KafkaAuditAuditLag", "firing"),
        ("KafkaAuditGammaBelowTarget", "resolved"),
    ]
    assert load_alerts(tmp_path / "missing.jsonl").empty
    path.write_text("not json\n")
    with pytest.raises(ConfigError, match="line 1 is not JSON"):
        load_alerts(path)


def test_render_has_every_view(results_dir):
    frame = load_results(results_dir, timedelta(hours=1), NOW)
    alerts = load_alerts(None)
    page = render(frame, alerts, timedelta(hours=1), NOW)
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    alts = [alt for alt, _ in images]
    assert alts[0] == "completeness heatmap, topic x window"
    assert sum(a.startswith("R_l and R_d") for a in alts) == 2
    assert "gamma timeline" in alts
    assert all(len(data) > 5_000 for _, data in images)
    assert "No alerts in this period." in page
    assert "<td>raise batch.num.messages 1 -&gt; 4</td>" in page  # newest suggestion of clicks
    assert "<td>orders</td>" in page and "<td>clicks</td>" in page


def test_render_without_results_or_predictions(results_dir):
    frame = load_results(results_dir, timedelta(hours=1), NOW)
    old_only = frame[frame.topic == "orders"]
    page = render(old_only, load_alerts(None), None, NOW)
    assert "No gamma in these results" in page
    assert "No configuration suggestions in this period." in page
    empty = render(frame.iloc[0:0], load_alerts(None), timedelta(hours=1), NOW)
    assert "No final window results in this period." in empty and "<img" not in empty


def test_cli_report(results_dir, tmp_path):
    alerts = tmp_path / "alerts.jsonl"  # next to the results dir: found without --alerts
    alerts.write_text(json.dumps(_alert("firing", NOW_MS)) + "\n")
    out = tmp_path / "r" / "report.html"
    result = CliRunner().invoke(
        app, ["report", "--since", "100d", "--out", str(out), "--results-dir", str(results_dir)]
    )
    assert result.exit_code == 0, result.output
    assert "41 final window result(s), 1 alert(s)" in result.output
    page = out.read_text()
    assert "KafkaAuditGammaBelowTarget" in page and "raise batch.num.messages 1 -&gt; 4" in page
    bad = CliRunner().invoke(app, ["report", "--since", "soon", "--results-dir", str(results_dir)])
    assert bad.exit_code == 2 and "--since" in bad.output


# ------------------------------------------------------------------------------------ predictor model
def write_without_model_fields(root: Path, batch_id: int, rows: list[dict]) -> None:
    """Write rows as results written before ``model_version`` / ``model_calibrated`` existed."""
    schema = pa.schema([f for f in PARQUET_SCHEMA if f.name not in MODEL_FIELDS])
    day = datetime.fromtimestamp(rows[0]["window_start_ms"] / 1000, UTC).strftime("%Y-%m-%d")
    folder = root / f"date={day}"
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)
    pq.write_table(table, folder / f"batch-{batch_id:012d}.parquet")


def predicted(topic: str, i: int, start: int, loss: float, p: float, lo: float, hi: float, **kw) -> dict:
    sent = 1000
    return result_row(
        topic,
        start + i * WINDOW_MS,
        sent,
        round(sent * (1 - loss)),
        p_loss=p,
        p_loss_lo=lo,
        p_loss_hi=hi,
        **kw,
    )


@pytest.fixture
def model_results(tmp_path) -> Path:
    """Three stretches: predictions before model_version existed, the shipped model calibrating (badly
    off: P_l 0.6 where 10% were lost), then v0001 calibrated (P_l within 1 point)."""
    root = tmp_path / "model-results"
    start = NOW_MS - NOW_MS % WINDOW_MS - 40 * WINDOW_MS
    write_without_model_fields(
        root, 1, [predicted("orders", i, start, 0.1, 0.12, 0.05, 0.2) for i in range(5)]
    )
    shipped = [
        predicted("orders", i, start, 0.1, 0.6, 0.5, 0.7, model_version="shipped", model_calibrated=False)
        for i in range(5, 15)
    ]
    v1 = [
        predicted(t, i, start, 0.1, 0.11, 0.08, 0.14, model_version="v0001", model_calibrated=i >= 20)
        for i in range(15, 30)
        for t in ("orders", "clicks")
    ]
    v1[-1] |= {"loss_rate": 0.3, "unique": 700, "completeness": 0.7}  # one window outside its interval
    write_with_predictions(root, 2, shipped)
    write_with_predictions(root, 3, v1)
    return root


def test_model_accuracy_per_version_with_results_before_model_version(model_results):
    results = load_results(model_results, None, NOW)
    assert results["model_version"].isna().sum() == 5  # the old files read all the same
    scored = predicted_windows(results)
    assert list(dict.fromkeys(scored["version"])) == [UNKNOWN_VERSION, "shipped", "v0001"]
    versions = version_summary(scored).set_index("version")
    assert list(versions.index) == [UNKNOWN_VERSION, "shipped", "v0001"]
    assert versions.loc["shipped", "windows"] == 10 and versions.loc["v0001", "windows"] == 30
    assert versions.loc["shipped", "mae"] == pytest.approx(0.5)
    assert versions.loc["shipped", "coverage"] == 0.0 and versions.loc["shipped", "calibrated"] == 0.0
    assert versions.loc["v0001", "mae"] == pytest.approx((29 * 0.01 + 0.19) / 30)
    assert versions.loc["v0001", "coverage"] == pytest.approx(29 / 30)
    assert versions.loc["v0001", "calibrated"] == pytest.approx(20 / 30)
    assert math.isnan(versions.loc[UNKNOWN_VERSION, "calibrated"])
    rolling = rolling_accuracy(scored, windows=4)
    v1 = rolling[rolling["version"] == "v0001"]
    assert len(v1) == 30 and v1["mae"].iloc[0] == pytest.approx(0.01)
    assert v1["mae"].iloc[-1] == pytest.approx((3 * 0.01 + 0.19) / 4)
    assert list(v1["window_end_ms"]) == sorted(v1["window_end_ms"])
    topics = topic_accuracy(scored).set_index("topic")
    assert topics.loc["orders", "versions"] == f"{UNKNOWN_VERSION}, shipped, v0001"
    assert topics.loc["clicks", "versions"] == "v0001" and topics.loc["clicks", "windows"] == 15


def test_render_model_section(model_results):
    page = render(load_results(model_results, None, NOW), load_alerts(None), None, NOW)
    assert "Predictor model: live MAE(P_l) and 90% coverage per model version" in page
    alts = re.findall(r'<img alt="([^"]+)"', page)
    assert "live MAE and coverage per model version" in alts
    assert "predicted vs actual R_l per topic" in alts
    assert "<td>v0001</td><td>30</td>" in page and f"<td>{UNKNOWN_VERSION}</td><td>5</td>" in page
    assert "<td>50.000%</td><td>0.000%</td><td>0.000%</td>" in page  # shipped: MAE, coverage, calibrated
    assert f"<td>{UNKNOWN_VERSION}, shipped, v0001</td>" in page


def test_model_section_without_predictions(results_dir):
    frame = load_results(results_dir, timedelta(hours=1), NOW)
    page = render(frame[frame.topic == "orders"], load_alerts(None), None, NOW)
    assert "No predictions in these results" in page
    assert (
        predicted_windows(frame.iloc[0:0]).empty and version_summary(predicted_windows(frame.iloc[0:0])).empty
    )
