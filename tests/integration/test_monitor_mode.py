"""Issue 15 acceptance, items 1-2: ``kafka-audit up`` in monitor mode on a cluster started separately.

``kafka-audit kafka start`` runs a cluster; ``kafka-audit up -b SERVERS --topic REGEX`` audits it with no
synthetic load. An audited producer (``kafka-audit produce``) and ``kcat`` (no audit stamp) write to a
matching topic; a topic created while ``up`` runs is audited without a restart; an internal topic that
matches the pattern is not. The kcat messages show as unaudited in the results, the exporter's metrics
(what the dashboards query), the live table and the alerts topic (``KafkaAuditUnauditedTraffic``); no
loss is reported (the verifier agrees); ``kafka-audit status`` finds the instance by its registry; SIGTERM
stops it cleanly.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from alerts.codec import decode_alert
from audit_consumer.ground_truth import verify_topic
from audit_record.reader import read_audit_log
from kafka_plumbing.cluster_ports import free_port
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.topics import ensure_topic, read_to_end
from tests.integration.helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLI = [sys.executable, "-m", "kafka_audit"]
WINDOW_MS = 5_000
AUDITED = 3_000
UNAUDITED = 1_500


def _run(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _kcat(bootstrap: str, topic: str, n: int) -> None:
    lines = "".join(f"kcat line {i}\n" for i in range(n))
    subprocess.run(
        ["kcat", "-P", "-b", bootstrap, "-t", topic], input=lines, text=True, check=True, timeout=120
    )


def _finals(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _metric(port: int, name: str, topic: str) -> float | None:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    pattern = rf'^{name}\{{tier="cluster:local",topic="{re.escape(topic)}"\}} (\S+)$'
    match = re.search(pattern, text, re.M)
    return float(match.group(1)) if match else None


def test_monitor_mode_audits_a_separate_cluster_and_shows_unaudited_kcat_traffic(tmp_path, request):
    assert shutil.which("kcat"), "kcat (Debian package kcat) is a required dev tool: make bootstrap"
    env = {**os.environ, "KAFKA_AUDIT_STATE_DIR": str(tmp_path / "state")}
    kafka_dir = tmp_path / "kafka"
    _run(["kafka", "start", "--data-dir", str(kafka_dir)], env)
    up: subprocess.Popen[str] | None = None
    try:
        cluster = KafkaCluster.load(kafka_dir)
        assert cluster is not None
        bootstrap = cluster.bootstrap_servers
        kconfig = {"bootstrap.servers": bootstrap}
        prefix = f"mon{os.urandom(3).hex()}"
        orders, later, internal = f"{prefix}.orders", f"{prefix}.later", f"{prefix}.x.internal"
        for t in (orders, internal):
            ensure_topic(kconfig, t, partitions=3)
        port = free_port()
        config = tmp_path / "up.toml"
        config.write_text(
            f'data_dir = "{tmp_path / "up"}"\n'
            f"window_ms = {WINDOW_MS}\nconsumer_grace_ms = 2000\nspark_grace_ms = 8000\n"
            "watermark_delay_ms = 2000\ntrigger_ms = 2000\ndiscovery_interval_ms = 2000\n"
            f"metrics_port = {port}\n"
        )
        results = tmp_path / "results.jsonl"
        out, err = (tmp_path / "up.out").open("w"), (tmp_path / "up.err").open("w")
        up = subprocess.Popen(
            [
                *CLI,
                "up",
                "-b",
                bootstrap,
                "--topic",
                re.escape(prefix) + r"\..*",
                "--config",
                str(config),
                "--json-out",
                str(results),
                "--no-retrain",
                "--control",
                "off",
            ],
            env=env,
            stdout=out,
            stderr=err,
            text=True,
        )

        def registered() -> dict[str, Any] | None:
            assert up is not None and up.poll() is None, (tmp_path / "up.err").read_text()[-3000:]
            done = subprocess.run([*CLI, "status", "--json"], env=env, capture_output=True, text=True)
            records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
            return next((r for r in records if r["pid"] == up.pid), None)

        record = wait_for(registered, 240, "kafka-audit status to find the instance", 2.0)
        assert record["mode"] == "monitor" and record["bootstrap_servers"] == bootstrap
        assert record["data_dir"] == str(tmp_path / "up")  # found whatever the data directory

        # An audited producer and kcat (no stamp) write to the same matching topic.
        produce = subprocess.Popen(
            [
                *CLI,
                "produce",
                "--topic",
                orders,
                "--count",
                str(AUDITED),
                "--rate",
                "200",
                "--duration",
                "60",
                "--window-ms",
                str(WINDOW_MS),
                "-b",
                bootstrap,
                "-X",
                "message.timeout.ms=10000",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # kcat writes while the audited producer does (its first snapshot is in the audit topic).
        wait_for(
            lambda: any(r.topic == orders for r in read_audit_log(kconfig, "__kafka_audit").tier("producer")),
            60,
            "the audited producer's first snapshot",
        )
        _kcat(bootstrap, orders, UNAUDITED)
        produced, produce_err = produce.communicate(timeout=180)
        assert produce.returncode == 0, produced + produce_err
        # A topic created while `up` runs is found without a restart.
        ensure_topic(kconfig, later, partitions=1)
        _run(
            [
                "produce",
                "--topic",
                later,
                "--count",
                "300",
                "--rate",
                "300",
                "--window-ms",
                str(WINDOW_MS),
                "-b",
                bootstrap,
                "-X",
                "message.timeout.ms=10000",
            ],
            env,
        )
        _kcat(bootstrap, internal, 50)  # matches the pattern, but internal: never audited

        def complete() -> bool:
            finals = _finals(results)
            by_topic = {t: [r for r in finals if r["topic"] == t] for t in (orders, later)}
            return (
                sum(r["sent"] for r in by_topic[orders]) == AUDITED
                and sum(r["unaudited"] for r in by_topic[orders]) == UNAUDITED
                and sum(r["sent"] for r in by_topic[later]) == 300
            )

        wait_for(complete, 240, "final windows of both topics with every message")
        finals = _finals(results)
        # Unaudited messages are counted apart and never as loss; the verifier agrees window by window.
        truth = verify_topic(kconfig, orders, WINDOW_MS)
        for r in [r for r in finals if r["topic"] in (orders, later)]:
            assert r["unique"] == r["sent"] and r["late"] == 0, r
            assert r["loss_rate"] in (0.0, None), r
        for r in [r for r in finals if r["topic"] == orders]:
            rows = [t for (start, _), t in truth.rows.items() if start == r["window_start_ms"]]
            assert sum(t.unique for t in rows if t.producer_id) == r["unique"]
            assert sum(t.received for t in rows if t.producer_id is None) == r["unaudited"]
            if r["sent"]:  # issue 37: proven complete, not the message.timeout.ms + margin + settle (21 s)
                assert (r["final_rule"], r["waiting_for"]) == ("proof", None), r
                assert r["final_wait_ms"] < 10_000 + 5_000 + 6_000, r
        assert not [r for r in finals if r["topic"] == internal]
        # What the dashboards query: the exporter's unaudited counter and share for the topic.
        assert _metric(port, "kafka_audit_messages_unaudited_total", orders) == UNAUDITED
        assert _metric(port, "kafka_audit_messages_received_total", orders) == AUDITED + UNAUDITED
        assert _metric(port, "kafka_audit_messages_lost_total", orders) == 0
        # The unaudited-traffic alert fired for the topic; no completeness alert.
        events = [decode_alert(m.value()) for m in read_to_end(kconfig, "__kafka_audit_alerts", group_id="t")]
        fired = {(e.alertname, e.topic) for e in events if e.status == "firing"}
        assert ("KafkaAuditUnauditedTraffic", orders) in fired, fired
        assert not {a for a, t in fired if a == "KafkaAuditCompletenessBelowTarget" and t in (orders, later)}

        up.send_signal(signal.SIGTERM)
        assert up.wait(180) == 0, (tmp_path / "up.err").read_text()[-3000:]
        out.close()
        err.close()
        table = (tmp_path / "up.out").read_text()
        assert "unaudited" in table and "never counted as" in table  # the closing table's column
        assert f"{prefix}.orders" in table
        assert "Connection refused" not in (tmp_path / "up.err").read_text()
        done = subprocess.run([*CLI, "status"], env=env, capture_output=True, text=True)
        assert done.returncode == 1 and "--data-dir" in done.stdout  # unregistered on stop
        up = None
    finally:
        if up is not None and up.poll() is None:
            up.kill()
            up.wait(30)
        subprocess.run([*CLI, "kafka", "stop", "--data-dir", str(kafka_dir)], env=env, timeout=120)
