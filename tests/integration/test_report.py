"""`kafka-audit report` end to end: Parquet from the job's sink -> HTML -> headless Chromium screenshot."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from spark_streaming.sinks import ParquetResultSink
from spark_streaming.window_state import RESULT_COLUMNS

pytestmark = pytest.mark.integration
WINDOW_MS = 10_000
CHROMIUM = "/usr/bin/chromium"


def _row(topic: str, start_ms: int, sent: int, unique: int, dup: int, **predicted) -> dict:
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
        producers=2,
        unaudited_producers=0,
        loss_rate=(sent - unique) / sent,
        duplicate_rate=dup / sent,
        completeness=unique / sent,
        result_at_ms=start_ms + 3 * WINDOW_MS,
    )
    # The live-comparison fields, where this checkout's sink writes them (contract).
    row.update({k: v for k, v in predicted.items() if k in row})
    return row


def _screenshot(html: Path, png: Path) -> None:
    assert shutil.which(CHROMIUM), "chromium (Debian package) is a required dev tool: make bootstrap"
    # Running as root needs --no-sandbox; its own profile dir so parallel runs do not share a lock.
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={png.parent / 'chromium-profile'}",
            f"--screenshot={png}",
            "--window-size=1400,2000",
            html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and png.exists(), done.stderr[-2000:]


def test_report_screenshot_shows_the_plots(tmp_path):
    now_ms = int(time.time() * 1000)
    start = now_ms - now_ms % WINDOW_MS - 40 * WINDOW_MS
    rows = []
    for i in range(30):
        w = start + i * WINDOW_MS
        lost = (i % 7) * 15
        rows.append(
            _row(
                "audit.weblog",
                w,
                5000,
                5000 - lost,
                i % 4,
                p_loss=0.01,
                p_loss_lo=0.0,
                p_loss_hi=0.025,
                p_dup=0.0005,
                p_dup_lo=0.0,
                p_dup_hi=0.001,
                gamma_actual=0.93 - lost / 5000,
                gamma_predicted=0.92,
                gamma_target=0.9,
            )
        )
        rows.append(_row("audit.game", w, 3000, 3000 - (i // 10), 0))
    results = tmp_path / "results"
    sink = ParquetResultSink(results)
    for batch in range(3):  # several micro-batches, as the job writes them
        assert sink.write(batch, rows[batch * 20 : (batch + 1) * 20])
    assert len(list(results.rglob("batch-*.parquet"))) >= 3

    html = tmp_path / "report.html"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kafka_audit",
            "report",
            "--since",
            "1h",
            "--out",
            str(html),
            "--results-dir",
            str(results),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "60 final window result(s), 0 alert(s)" in done.stdout
    assert html.read_text().count("data:image/png;base64,") >= 3

    png = tmp_path / "report.png"
    _screenshot(html, png)
    image = np.asarray(Image.open(png).convert("RGB")).astype(int)
    assert image.shape == (2000, 1400, 3)
    r, g, b = image[..., 0], image[..., 1], image[..., 2]
    non_white = float((image.min(axis=2) < 235).mean())
    colours = len(np.unique(image.reshape(-1, 3), axis=0))
    # Matplotlib's default line colour (tab:blue, 31,119,180) drawn by the R_l / R_d plots, and the
    # heatmap's greens: the plots really rendered, not just text (a text-only page of this report has
    # ~0.1% non-white pixels, ~250 colours, no blue or green).
    blue = int(((abs(r - 31) < 30) & (abs(g - 119) < 30) & (abs(b - 180) < 30)).sum())
    green = int(((g > 100) & (g > r + 40) & (g > b + 40)).sum())
    assert non_white > 0.03, f"screenshot mostly blank: {non_white:.1%} non-white pixels"
    assert colours > 1_000, f"only {colours} distinct colours"
    assert blue > 2_000 and green > 10_000, (blue, green)
