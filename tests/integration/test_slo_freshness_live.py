"""Issue 40 acceptance: a freshness SLO breached by an injected 30 s delay fires, on the real pipeline.

Real Kafka (the session's KRaft cluster), a real audited producer, the real audit consumer (tier
``cluster:<name>``), the real Spark job (its exporter on 127.0.0.1) and Debian's Prometheus evaluating
``kafka-audit slo rules``' output for one freshness SLO: 99% of the messages held within 30 s of their
CreateTime. The windows are scaled down so the test takes seconds, not hours: 1 s audit windows, the
SLO's alert pair 30 s / 10 s at 14.4x (``SloSettings.burn_rate_alerts``), Prometheus scraping and
evaluating every second.

How the delay is injected: the audited producer writes the ``late`` topic's records with an explicit
CreateTime 31 s or more in the past (``produce(timestamp=...)``): what a producer that buffered its
messages for 31 s, or an upstream stage 31 s behind, hands to Kafka. Each burst fills one whole 1 s
window that ended at least 31 s ago, so the audit consumer holds every message of it 31+ s after its
CreateTime (bucket 30 < x <= 60 s on an idle host). The audit consumer's grace (45 s) covers the
delay, so the messages belong to their windows (not ``late``) and the job proves each window final once
the producer has accounted for it and the tier has read past its offsets. The test's time is mostly
the Spark job's start (20-50 s on 2 busy cores); the alert fires 2-3 s after the first final results.
The ``fresh`` topic, written by the same producer with CreateTime = now, is the control: its freshness
error ratio is 0 and nothing fires for it.
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
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.slo_rules import FRESHNESS_ALERT_NAME, rules_text
from alerts.slo_settings import BurnRateAlert, FreshnessSlo, SloSettings
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_record import freshness, window_result
from kafka_plumbing.cluster_ports import free_port
from kafka_plumbing.topics import ensure_topic
from spark_streaming.job import ReconciliationJob
from spark_streaming.settings import SparkJobSettings
from tests.conftest import unique_name

from .helpers import CLUSTER, consumer_settings, running_consumer, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PROMETHEUS = "/usr/bin/prometheus"
WINDOW_MS = 1_000
DELAY_MS = 31_000
"""Every ``late`` message's CreateTime is at least this far behind the wall clock when it is produced."""
TIER = f"cluster:{CLUSTER}"
BURST = 50
"""Messages per burst: one burst per 1 s window of each topic."""


class Finals:
    """A job listener: the final results of the tier, per (topic, window)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], dict[str, Any]] = {}
        self.first_at: float | None = None
        """When the first final result came (``time.monotonic()``)."""
        self.lock = threading.Lock()

    def __call__(self, batch_id: int, results: list[dict[str, Any]]) -> None:
        with self.lock:
            for r in results:
                if r["tier"] == TIER and r["state"] == window_result.FINAL:
                    self.rows[(r["topic"], r["window_start_ms"])] = r
                    self.first_at = self.first_at or time.monotonic()

    def of(self, topic: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for (t, _), r in self.rows.items() if t == topic]


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=3) as reply:
            return json.loads(reply.read()) if reply.status == 200 else None
    except OSError:
        return None


def _query(prom_url: str, expr: str) -> dict[str, float]:
    """Return ``topic -> value`` of an instant PromQL query (empty while Prometheus has none)."""
    reply = _get(f"{prom_url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
    result = reply["data"]["result"] if reply else []
    return {r["metric"].get("topic", ""): float(r["value"][1]) for r in result}


def _firing(prom_url: str) -> list[dict[str, str]]:
    """Return the labels of the freshness alerts Prometheus has firing now."""
    reply = _get(f"{prom_url}/api/v1/alerts")
    alerts = reply["data"]["alerts"] if reply else []
    return [
        a["labels"]
        for a in alerts
        if a["labels"]["alertname"] == FRESHNESS_ALERT_NAME and a["state"] == "firing"
    ]


def _start_prometheus(tmp: Path, rules: str, metrics_port: int) -> tuple[subprocess.Popen, str]:
    (tmp / "slo-rules.yml").write_text(rules)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp / "slo-rules.yml")],
        "scrape_configs": [
            {"job_name": "kafka-audit", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    with open(tmp / "prometheus.log", "wb") as log:
        prom = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return prom, f"http://127.0.0.1:{port}"


def _stop(prom: subprocess.Popen) -> None:
    if prom.poll() is None:
        os.kill(prom.pid, signal.SIGTERM)
        try:
            prom.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(prom.pid, signal.SIGKILL)
            prom.wait(10)


def test_a_freshness_slo_breached_by_an_injected_30s_delay_fires(
    request, tmp_path, kconfig, bootstrap, audit_topics
):
    assert shutil.which(PROMETHEUS), "prometheus (Debian package) is a required dev tool: make bootstrap"
    late, fresh = unique_name(request, "_late"), unique_name(request, "_fresh")
    for t in (late, fresh):
        ensure_topic(kconfig, t, 1)
    settings = SloSettings(
        completeness=[],
        freshness=[
            FreshnessSlo(
                name="fresh30", topic_pattern=f"{late}|{fresh}", threshold_s=30, objective=0.99, period="1h"
            )
        ],
        burn_rate_alerts=[BurnRateAlert(long_window="30s", short_window="10s", factor=14.4)],
    )
    metrics_port = free_port()
    prom, prom_url = _start_prometheus(tmp_path, rules_text(settings), metrics_port)
    finals = Finals()
    job = ReconciliationJob(
        SparkJobSettings(
            bootstrap_servers=bootstrap,
            audit_topic=audit_topics["audit_topic"],
            dlq_topic=audit_topics["dlq_topic"],
            results_topic=f"{audit_topics['audit_topic']}.results",
            commits_topic=f"{audit_topics['audit_topic']}.commits",
            checkpoint_dir=tmp_path / "checkpoint",
            parquet_dir=tmp_path / "parquet",
            clusters=[CLUSTER],
            trigger_ms=1_000,
            watermark_delay_ms=2_000,
            grace_ms=3_000,
            max_final_wait_ms=310_000,  # adaptive finality: windows final by proof
            heartbeat_ms=500,
            metrics_port=metrics_port,
            predict=False,
            retrain=False,
            query_name=f"q-fresh-{audit_topics['audit_topic'][-8:]}",
        ),
        listeners=[finals],
    )
    producer = AuditedProducer(
        {"bootstrap.servers": bootstrap, "client.id": "freshness", "linger.ms": 5},
        ProducerAuditSettings(
            window_ms=WINDOW_MS, snapshot_interval_ms=500, audit_topic=audit_topics["audit_topic"]
        ),
    )
    stop = threading.Event()
    errors: list[BaseException] = []

    def feed() -> None:
        """One burst per window: ``late`` into a whole window that ended DELAY_MS ago, ``fresh`` now."""
        try:
            burst()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    def burst() -> None:
        used: set[int] = set()
        while not stop.is_set():
            now = int(time.time() * 1000)
            w = (now - DELAY_MS) // WINDOW_MS * WINDOW_MS - WINDOW_MS  # ended >= DELAY_MS ago
            if w not in used:
                used.add(w)
                for i in range(BURST):
                    producer.produce(late, b"late", timestamp=w + i * WINDOW_MS // BURST)
                for _ in range(BURST):
                    producer.produce(fresh, b"fresh")
            producer.poll(0)
            stop.wait(0.1)

    feeder = threading.Thread(target=feed, daemon=True)
    consumer = consumer_settings(bootstrap, [late, fresh], audit_topics, window_ms=WINDOW_MS, grace_ms=45_000)
    started = time.monotonic()
    try:
        with running_consumer(consumer):
            feeder.start()  # while the job starts: its first micro-batch reads the snapshots from the start
            job.start()
            fired: list[dict[str, str]] = []
            deadline = time.monotonic() + 120
            while not fired:
                assert time.monotonic() < deadline, f"no {FRESHNESS_ALERT_NAME} for {late} within 120 s"
                assert job.exception() is None, job.exception()
                assert not errors, errors
                assert prom.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
                fired = [a for a in _firing(prom_url) if a["topic"] == late]
                time.sleep(0.2)
            fired_after_s = time.monotonic() - started
            assert finals.first_at is not None
            print(
                f"{FRESHNESS_ALERT_NAME} fired for the delayed topic {fired_after_s:.1f} s after the start, "
                f"{time.monotonic() - finals.first_at:.1f} s after the job's first final result"
            )
            [alert] = fired
            assert (alert["tier"], alert["slo"], alert["urgency"], alert["burn_rate"]) == (
                TIER,
                "fresh30",
                "page",
                "14.4",
            )
            # The control went through the same rules: its error ratio is 0, nothing fires for it.
            wait_for(
                lambda: (
                    _query(prom_url, 'slo:kafka_audit_freshness_error:ratio10s{slo="fresh30"}').get(fresh)
                    == 0.0
                ),
                30,
                "the fresh topic's freshness error ratio recorded at 0",
            )
            assert [a for a in _firing(prom_url) if a["topic"] != late] == []
    finally:
        stop.set()
        if feeder.is_alive():
            feeder.join(10)
        producer.close()
        job.stop()
        _stop(prom)
    # What fired is what the window results say, and they count every message the tier held.
    late_rows, fresh_rows = finals.of(late), finals.of(fresh)
    assert late_rows and fresh_rows
    for r in late_rows:
        within, held = freshness.fresh_and_total(r["freshness_counts"], 30_000)
        assert (within, held) == (0, r["received"]), r
    for r in fresh_rows:
        assert freshness.fresh_and_total(r["freshness_counts"], 30_000) == (r["received"], r["received"]), r
