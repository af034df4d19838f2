"""`kafka-audit slo status`: each SLO's numbers equal what the window results it reads add up to.

Window results are written by the job's own Parquet sink (``ParquetResultSink``) and read back by the
command; the expected numbers are summed here from the same rows.
"""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from alerts.slo_settings import SloSettings
from alerts.slo_status import final_windows, read_parquet_results, slo_status
from kafka_audit.cli import app
from spark_streaming.sinks import ParquetResultSink
from spark_streaming.window_state import RESULT_COLUMNS

WINDOW_MS = 60_000
PER_WINDOW = 60_000


def result(topic: str, end_ms: int, sent: int, unique: int, tier: str = "cluster:eu", **extra) -> dict:
    row = {name: None for name, _ in RESULT_COLUMNS}
    row.update(
        topic=topic,
        window_start_ms=end_ms - WINDOW_MS,
        window_end_ms=end_ms,
        tier=tier,
        state="final",
        sent=sent,
        received=unique,
        unique=unique,
        duplicated=0,
        producers=1,
        unaudited_producers=0,
        loss_rate=(sent - unique) / sent if sent else 0.0,
        duplicate_rate=0.0,
        completeness=unique / sent if sent else 1.0,
        result_at_ms=end_ms + 20_000,
    )
    row.update(extra)
    return row


def history(now_ms: int) -> list[dict]:
    """8 hours of 1-minute windows: 'fast' loses 5% in its last 4 windows, 'leak' 0.02% throughout,
    'quiet' is healthy, 'trickle' sends 1 message every 6 minutes and lost 3 in the last hour; plus
    windows outside every SLO (a consumer tier) and a provisional result that must not count."""
    rows = []
    for i in range(480):
        end = now_ms - i * WINDOW_MS
        rows.append(result("fast", end, PER_WINDOW, PER_WINDOW - (3_000 if i < 4 else 0)))
        rows.append(result("leak", end, PER_WINDOW, PER_WINDOW - 12))
        rows.append(result("quiet", end, PER_WINDOW, PER_WINDOW))
        rows.append(result("quiet", end, PER_WINDOW, PER_WINDOW - 1_000, tier="consumer:app"))
        if i % 6 == 0:
            rows.append(result("trickle", end, 1, 0 if i in (6, 18, 30) else 1))
    rows.append(result("quiet", now_ms, PER_WINDOW, 0, state="provisional", result_at_ms=now_ms + 30_000))
    return rows


def test_status_equals_the_sums_of_the_window_results_and_pages_like_the_rules():
    now_ms = 1_790_000_000_000
    rows = history(now_ms)
    by = {(s.topic, s.tier): s for s in slo_status(rows, SloSettings(), now_ms)}
    assert set(by) == {(t, "cluster:eu") for t in ("fast", "leak", "quiet", "trickle")}

    fast = by["fast", "cluster:eu"]
    sent, lost = 480 * PER_WINDOW, 4 * 3_000
    assert (fast.period_counts.sent, fast.period_counts.lost) == (sent, lost)
    assert fast.actual == pytest.approx(1 - lost / sent)
    assert fast.budget_left == pytest.approx(1 - (lost / sent) / (1 - 0.9999))
    assert fast.burn_rates["1h"] == pytest.approx((lost / (60 * PER_WINDOW)) / (1 - 0.9999))
    assert fast.state == "page" and "1h/5m 14.4x" in fast.firing

    leak = by["leak", "cluster:eu"]
    assert leak.burn_rates["3d"] == pytest.approx(2.0) and leak.state == "ticket"
    assert leak.firing == ("3d/6h 1x",)

    quiet = by["quiet", "cluster:eu"]  # the provisional result with everything lost is not counted
    assert (quiet.period_counts.lost, quiet.actual, quiet.budget_left, quiet.state) == (0, 1.0, 1.0, "ok")

    trickle = by["trickle", "cluster:eu"]  # 10 messages an hour: no page, a ticket
    assert trickle.period_counts.sent == 80 and trickle.period_counts.lost == 3
    assert trickle.burn_rates["1h"] == pytest.approx((3 / 10) / (1 - 0.9999))
    assert trickle.state == "ticket"


def test_the_newest_final_result_of_a_window_counts_once():
    rows = [result("t", 60_000, 100, 90, result_at_ms=1), result("t", 60_000, 100, 100, result_at_ms=2)]
    assert [r["unique"] for r in final_windows(rows)] == [100]


def test_cli_status_reads_the_parquet_results_and_prints_their_numbers(tmp_path):
    now_ms = int(time.time() * 1000)
    rows = history(now_ms - 5_000)
    ParquetResultSink(tmp_path).write(1, rows[: len(rows) // 2])
    ParquetResultSink(tmp_path).write(2, rows[len(rows) // 2 :])
    assert len(read_parquet_results(tmp_path, now_ms - 86_400_000)) == len(rows)
    config = tmp_path / "slo.toml"
    config.write_text(
        '[slo]\n[[slo.completeness]]\nname = "fast-only"\ntopic_pattern = "fast"\n'
        '[[slo.freshness]]\nname = "fresh"\n'
    )
    result_ = CliRunner().invoke(
        app, ["slo", "status", "--config", str(config), "--results-dir", str(tmp_path)], terminal_width=250
    )
    assert result_.exit_code == 0, result_.output
    fresh = [line for line in result_.output.splitlines() if line.strip("│ ").startswith("fresh ")]
    assert len(fresh) == 4 and all("no data" in line for line in fresh)  # these results have no histograms
    [line] = [line for line in result_.output.splitlines() if "fast-only" in line]
    cells = [c.strip() for c in line.strip("│ ").split("│")]
    assert cells == [
        "fast-only",
        "fast",
        "cluster:eu",
        "99.99%",
        "30d",
        f"{480 * PER_WINDOW:,}",
        "12,000",
        f"{100 * (1 - 12_000 / (480 * PER_WINDOW)):.4f}%",
        f"{100 * (1 - (12_000 / (480 * PER_WINDOW)) / 1e-4):.1f}%",
        f"{(12_000 / (60 * PER_WINDOW)) / 1e-4:.2f}x",
        f"{(12_000 / (360 * PER_WINDOW)) / 1e-4:.2f}x",
        f"{(12_000 / (480 * PER_WINDOW)) / 1e-4:.2f}x",
        "page (1h/5m 14.4x, 3d/6h 1x)",  # 6h: 5.56x, under 6x
    ]


def test_cli_status_without_results_names_the_directory(tmp_path):
    result_ = CliRunner().invoke(app, ["slo", "status", "--results-dir", str(tmp_path / "none")])
    assert result_.exit_code == 2
    assert "--results-dir" in result_.output and "no such directory" in result_.output
