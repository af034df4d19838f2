"""The generated SLO rules in a real Prometheus, on the job's real exporter, paging a real Alertmanager.

The Spark job's exporter (``spark_streaming.metrics.ResultMetrics``, served over HTTP) is fed final
window results once a second (time compressed: each tick is a 60 s window); Debian's Prometheus
scrapes it every second, evaluates ``kafka-audit slo rules``' output (default SLO: 99.99% over 30
days, the Workbook's window pairs) every second and sends what fires to Debian's Alertmanager. A topic
losing 5% pages (``urgency=page``, the 1h/5m pair); a healthy topic alerts nobody; a topic with a
message every tenth window, each lost, is not paged (low-traffic guard). The four cases over real
time spans are ``tests/unit/test_slo_rules.py``'s promtool unit tests; this test shows the rules,
the exporter's metric names and labels, Prometheus and Alertmanager fit together.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from alerts.slo_rules import ALERT_NAME, rules_text
from alerts.slo_settings import SloSettings
from kafka_plumbing.cluster_ports import free_port
from spark_streaming.metrics import ResultMetrics

from .alertmanager import running_alertmanager

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PROMETHEUS = "/usr/bin/prometheus"
TIER = "cluster:live"
PER_WINDOW = 60_000


def _row(topic: str, tick: int, sent: int, unique: int) -> dict[str, Any]:
    return {
        "topic": topic,
        "tier": TIER,
        "state": "final",
        "window_start_ms": tick * 60_000,
        "window_end_ms": (tick + 1) * 60_000,
        "sent": sent,
        "unique": unique,
        "received": unique,
        "duplicated": 0,
        "completeness": unique / sent,
        "loss_rate": (sent - unique) / sent,
        "duplicate_rate": 0.0,
    }


def _poll(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.5)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=3) as reply:
            return json.loads(reply.read()) if reply.status == 200 else None
    except OSError:
        return None


def test_a_fast_burn_pages_alertmanager_and_healthy_or_trickle_topics_do_not(tmp_path):
    assert shutil.which(PROMETHEUS), "prometheus (Debian package) is a required dev tool: make bootstrap"
    metrics = ResultMetrics()
    metrics_port = free_port()
    metrics.serve(metrics_port)
    rules = tmp_path / "slo-rules.yml"
    rules.write_text(rules_text(SloSettings()))
    stop = threading.Event()
    lost = {"burn": 3_000}

    def feed() -> None:
        tick = 0
        while not stop.is_set():
            rows = [
                _row("burn", tick, PER_WINDOW, PER_WINDOW - lost["burn"]),
                _row("healthy", tick, PER_WINDOW, PER_WINDOW),
            ]
            if tick % 10 == 0:
                rows.append(_row("trickle", tick, 1, 0))
            metrics.observe(rows, [], [])
            tick += 1
            stop.wait(1.0)

    with running_alertmanager(tmp_path / "am") as am:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "alerting": {
                "alertmanagers": [{"static_configs": [{"targets": [am.url.removeprefix("http://")]}]}]
            },
            "scrape_configs": [
                {"job_name": "kafka-audit", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}
            ],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        prom_port = free_port()
        prom_url = f"http://127.0.0.1:{prom_port}"
        with open(tmp_path / "prometheus.log", "wb") as log:
            prom = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        feeder = threading.Thread(target=feed, daemon=True)
        try:
            _poll(lambda: _ready(prom_url) or prom.poll() is not None, 60, "Prometheus")
            assert prom.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            started = time.monotonic()
            feeder.start()
            pages = _poll(
                lambda: am.alerts(alertname=ALERT_NAME, topic="burn", urgency="page", long_window="1h"),
                90,
                "Alertmanager to receive the 1h/5m page of topic burn",
            )
            paged_after_s = time.monotonic() - started
            print(f"paged {paged_after_s:.1f} s after the first lossy window reached the exporter")
            [page] = pages
            assert page["labels"] | {"tier": TIER} == page["labels"]
            assert (page["labels"]["slo"], page["labels"]["severity"], page["labels"]["burn_rate"]) == (
                "completeness",
                "critical",
                "14.4",
            )
            assert "burning its error budget 14.4x over 1h and 5m" in page["annotations"]["summary"]
            # The trickle topic has lost every message it sent (a burn rate of 10000x over both windows).
            expr = 'slo:kafka_audit_completeness_error:ratio5m{topic="trickle"}'
            query = f"{prom_url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"

            def trickle_ratio() -> float | None:
                reply = _get(query)
                result = reply["data"]["result"] if reply else []
                return float(result[0]["value"][1]) if result else None

            assert _poll(lambda: trickle_ratio() == 1.0, 60, "the trickle topic's 5m error ratio at 100%")
            time.sleep(5)  # more evaluations: still nobody else is paged
            assert am.alerts(alertname=ALERT_NAME, topic="healthy") == []
            assert am.alerts(alertname=ALERT_NAME, topic="trickle", urgency="page") == []
            assert paged_after_s < 60, paged_after_s
        finally:
            stop.set()
            if feeder.is_alive():
                feeder.join(5)
            if prom.poll() is None:
                os.kill(prom.pid, signal.SIGTERM)
                try:
                    prom.wait(30)
                except subprocess.TimeoutExpired:
                    os.kill(prom.pid, signal.SIGKILL)
                    prom.wait(10)
