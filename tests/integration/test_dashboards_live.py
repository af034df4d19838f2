"""Every dashboard panel's PromQL returns data from a live run scraped by real Prometheus (issue 6).

Real broker (session fixture), real audit consumer, the real Spark job (``kafka-audit spark-job``,
``local[2]``, exporter on a free port), audited load that really loses a third of its messages, a
few messages from an unaudited producer, and Prometheus from Debian (``/usr/bin/prometheus``, scrape
interval 1 s, the built alerting rules loaded). The dashboards come from ``kafka-audit dashboards
build``; template variables are replaced as Grafana would for the test's topic and cluster.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

import audit_producer.producer as producer_module
import dashboards
from audit_producer import ProducerAuditSettings
from audit_producer.load import run_load
from audit_record import stamp
from dashboards.brokers import UID as BROKERS_UID
from dashboards.build import PanelQuery, build, iter_queries
from kafka_plumbing.topics import AUDIT_TOPIC_CONFIG, STATE_TOPIC_CONFIG, ensure_topic
from tests.conftest import unique_name

from .helpers import CLUSTER, PinnedLoss, consumer_settings, running_consumer, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PROMETHEUS = "/usr/bin/prometheus"
WINDOW_MS = 5_000
MAX_MESSAGE_BYTES = 1_000  # the topic's max.message.bytes: the broker rejects larger record batches


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout_s: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout_s) as reply:
        return json.loads(reply.read())


def _stop(proc: subprocess.Popen, timeout_s: float = 60) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def substitute(expr: str, topic: str) -> str:
    """Replace Grafana's template variables as the dashboard does with one topic and cluster selected."""
    for name, value in (
        ("$__rate_interval", "20s"),
        ("$__interval", "20s"),
        ("$__range", "5m"),
        ("$slo", ".*"),  # "All"
        ("$topic", topic),
        ("$tier", f"cluster:{CLUSTER}"),
        ("$cluster", CLUSTER),
        ("$producer", ".*"),  # "All"
        ("$model_version", ".*"),  # "All"
    ):
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def _visible(bootstrap: str, name: str) -> bool:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(name, timeout=10).topics.get(name)
    return md is not None and md.error is None and bool(md.partitions)


def spark_job(
    bootstrap: str, audit_topics: dict[str, str], tmp: Path, metrics_port: int, log
) -> subprocess.Popen:
    results, commits = f"{audit_topics['audit_topic']}.results", f"{audit_topics['audit_topic']}.commits"
    # Created up front: the job reads its commits topic right after creating it and can see it missing
    # (metadata not yet propagated), exiting with "topic ... does not exist".
    for name, partitions, topic_config in (
        (results, 3, AUDIT_TOPIC_CONFIG),
        (commits, 1, STATE_TOPIC_CONFIG),
    ):
        ensure_topic({"bootstrap.servers": bootstrap}, name, partitions, topic_config=topic_config)
        wait_for(lambda name=name: _visible(bootstrap, name), 30, f"topic {name} in the metadata")
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "KAFKA_AUDIT_SPARK_AUDIT_TOPIC": audit_topics["audit_topic"],
        "KAFKA_AUDIT_SPARK_DLQ_TOPIC": audit_topics["dlq_topic"],
        "KAFKA_AUDIT_SPARK_COMMITS_TOPIC": commits,
        "KAFKA_AUDIT_SPARK_HEARTBEAT_MS": "500",
        "KAFKA_AUDIT_ALERTS_ALERTS_TOPIC": f"{audit_topics['audit_topic']}.alerts",
    }
    cmd = [
        sys.executable,
        "-m",
        "kafka_audit",
        "spark-job",
        "-b",
        bootstrap,
        "--checkpoint-dir",
        str(tmp / "checkpoint"),
        "--parquet-dir",
        str(tmp / "parquet"),
        "--cluster",
        CLUSTER,
        "--trigger-ms",
        "1000",
        "--grace-ms",
        "8000",
        "--watermark-delay-ms",
        "2000",
        "--results-topic",
        results,
        "--query-name",
        f"q-dash-{audit_topics['audit_topic'][-8:]}",
        "--metrics-port",
        str(metrics_port),
    ]
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def prometheus(tmp: Path, metrics_port: int, rules: Path, log) -> tuple[subprocess.Popen, str]:
    assert shutil.which(PROMETHEUS), "prometheus (Debian package) is a required dev tool: make bootstrap"
    port = _free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": "kafka-audit", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return proc, f"http://127.0.0.1:{port}"


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def _query(url: str, expr: str) -> list[dict]:
    reply = _get(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
    assert reply["status"] == "success", reply
    return reply["data"]["result"]


def _metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (Prometheus exports histogram buckets as ``<name>_bucket``)."""
    return set(re.findall(r"\bkafka_audit_\w+", expr))


def _unaudited_messages(bootstrap: str, topic: str, n: int = 50) -> None:
    """Stamped messages of a producer that never sends audit snapshots (an unaudited producer)."""
    raw = Producer({"bootstrap.servers": bootstrap})
    for seq in range(1, n + 1):
        raw.produce(topic, b"rogue", headers=[stamp.header("rogue@dashboards-test.1.0", seq)])
    assert raw.flush(30) == 0


def test_every_panel_query_returns_data_from_a_live_run(
    bootstrap, request, audit_topics, tmp_path, monkeypatch
):
    topic = unique_name(request)
    ensure_topic(
        {"bootstrap.servers": bootstrap}, topic, 3, topic_config={"max.message.bytes": str(MAX_MESSAGE_BYTES)}
    )
    written = build(tmp_path / "grafana")
    models = [json.loads(p.read_text()) for p in written if p.suffix == ".json"]
    # The "Kafka brokers" dashboard queries the brokers' JMX exporters, which this Prometheus does not
    # scrape: tests/integration/test_broker_metrics.py checks it against a 3-broker cluster.
    models = [m for m in models if m["uid"] != BROKERS_UID]
    queries: list[PanelQuery] = [q for m in models for q in iter_queries(m)]
    panel_queries = [q for q in queries if not q.annotation]
    assert len(panel_queries) >= 25
    rules = next(p for p in written if p.name == "kafka-audit-rules.yml")

    metrics_port = _free_port()
    job_log = open(tmp_path / "spark-job.log", "wb")  # noqa: SIM115 - closed in the finally below
    prom_log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115
    job = spark_job(bootstrap, audit_topics, tmp_path, metrics_port, job_log)
    prom, prom_url = prometheus(tmp_path, metrics_port, rules, prom_log)
    missing: dict[str, str] = {}
    try:
        t0 = time.monotonic()
        wait_for(lambda: _ready(prom_url), 60, "Prometheus ready")
        with running_consumer(consumer_settings(bootstrap, [topic], audit_topics, window_ms=WINDOW_MS)):
            audit = ProducerAuditSettings(
                window_ms=WINDOW_MS,
                grace_ms=1_000,
                snapshot_interval_ms=1_000,
                audit_topic=audit_topics["audit_topic"],
                delivery_reports="errors",
            )
            # Loss for real, so gamma is below the default 0.9 target and the suggestion panel has data:
            # one record per batch (batch.num.messages=1); the "rejected" producer's 2,000-byte messages
            # exceed the topic's max.message.bytes, the "ok" producer's weblog records (<= 300 bytes) do
            # not: R_l = 400 / 1,200 per window. The L estimate is pinned to 15% (as if the link lost
            # packets), where the model too expects heavy loss from batch.num.messages=1, so it suggests.
            monkeypatch.setattr(producer_module, "TcpRetransmitMeter", PinnedLoss)
            stop_load = threading.Event()
            loads: dict[str, Any] = {}

            def load(name: str, rate: float, message_bytes: int | None) -> None:
                config = {
                    "bootstrap.servers": bootstrap,
                    "client.id": f"dashboards-{name}",
                    "acks": "1",
                    "batch.num.messages": 1,
                    "linger.ms": 0,
                    "message.timeout.ms": 5_000,
                }
                loads[name] = run_load(
                    config,
                    topic,
                    "weblog",
                    rate=rate,
                    duration_s=200,
                    audit=audit,
                    message_bytes=message_bytes,
                    stop=stop_load,
                )

            threads = [
                threading.Thread(target=load, args=("ok", 800, None), daemon=True),
                threading.Thread(target=load, args=("rejected", 400, 2 * MAX_MESSAGE_BYTES), daemon=True),
            ]
            for t in threads:
                t.start()
            _unaudited_messages(bootstrap, topic)  # one producer without audit snapshots

            pending = {substitute(q.expr, topic) for q in panel_queries}
            final_seen: list[float] = []

            def exported() -> set[str]:
                return set(_get(f"{prom_url}/api/v1/label/__name__/values")["data"])

            def settled() -> bool:
                """Every query has data, or those without use only metrics the job does not export."""
                assert job.poll() is None, (
                    f"spark-job exited: {(tmp_path / 'spark-job.log').read_text()[-3000:]}"
                )
                for expr in sorted(pending):
                    if _query(prom_url, expr):
                        pending.discard(expr)
                if not final_seen and _query(prom_url, f'kafka_audit_completeness_ratio{{topic="{topic}"}}'):
                    final_seen.append(time.monotonic())
                names = exported()
                unexported = all(_metric_names(e) - names for e in pending)
                # Final windows arrive every 5 s; metrics derived from them show up with them.
                return not pending or (
                    unexported and bool(final_seen) and time.monotonic() > final_seen[0] + 15
                )

            t_load = time.monotonic()
            deadline = t_load + 180  # what has no data by then is reported panel by panel below
            try:
                while not settled() and time.monotonic() < deadline:
                    time.sleep(2)
            finally:
                stop_load.set()
                for t in threads:
                    t.join(60)
            assert set(loads) == {"ok", "rejected"} and loads["ok"].produced > 10_000, loads
            print(  # timing of the phases, shown with -s
                f"start {t_load - t0:.0f} s, first final +{(final_seen or [t_load])[0] - t_load:.0f} s, "
                f"settled +{time.monotonic() - t_load:.0f} s"
            )
            names = exported()
            for q in panel_queries:
                expr = substitute(q.expr, topic)
                if expr in pending:
                    absent = sorted(_metric_names(expr) - names)
                    why = f"metric(s) not exported: {', '.join(absent)}" if absent else "no series matched"
                    missing[f"{q.dashboard} / {q.panel} [{q.ref_id}]"] = f"{why}: {expr}"
        # The alerting rules loaded into the live Prometheus and evaluate without errors.
        groups = _get(f"{prom_url}/api/v1/rules")["data"]["groups"]
        rules_seen = [r for g in groups for r in g["rules"]]
        shipped = yaml.safe_load((Path(dashboards.__file__).parent / "prometheus-rules.yml").read_text())
        n_rules = sum(len(g["rules"]) for g in shipped["groups"])  # every rule of the shipped file
        assert len(rules_seen) == n_rules and all(r["health"] == "ok" for r in rules_seen), rules_seen
        # The alert annotation's query is valid PromQL (it has data only while an alert fires).
        for q in queries:
            if q.annotation:
                _query(prom_url, substitute(q.expr, topic))
    finally:
        _stop(job)
        _stop(prom)
        job_log.close()
        prom_log.close()
    assert not missing, "panels without data:\n" + "\n".join(f"{k}: {v}" for k, v in sorted(missing.items()))
