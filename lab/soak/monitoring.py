"""Prometheus and Alertmanager from Debian's packages, on 127.0.0.1, started and stopped by PID.

Prometheus scrapes the brokers' JMX exporters and the Spark job's exporter, evaluates kafka-audit's
shipped rules (``dashboards/prometheus-rules.yml``) and sends what fires to Alertmanager; the job's
own alert pipeline posts to the same Alertmanager (``KAFKA_AUDIT_ALERTS_ALERTMANAGER_URL``). Clustering
of Alertmanager is off (``--cluster.listen-address=``); its notifications go nowhere (a blackhole
receiver): the soak reads its active alerts over its API instead.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from kafka_plumbing.cluster_ports import HOST, free_port
from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.local_cluster import KafkaCluster
from soak.processes import ManagedProcess

PROMETHEUS = "/usr/bin/prometheus"
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"


class MonitoringError(KafkaAuditError):
    """Prometheus or Alertmanager is missing or did not come up."""


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as reply:  # noqa: S310 - our own http URL
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as reply:  # noqa: S310 - our own http URL
        return json.loads(reply.read())


def _wait_ready(process: ManagedProcess, url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not _ready(url):
        if process.exited() is not None:
            tail = process.log_path.read_text(errors="replace")[-2000:]
            raise MonitoringError(f"{process.argv[0]} exited with {process.exited()}:\n{tail}")
        if time.monotonic() > deadline:
            raise MonitoringError(f"{process.argv[0]} not ready at {url} in {timeout_s:.0f} s")
        time.sleep(0.3)


class Alertmanager:
    """Alertmanager on a free 127.0.0.1 port; its data under ``work_dir``."""

    def __init__(self, work_dir: Path) -> None:
        if not shutil.which(ALERTMANAGER):
            raise MonitoringError(f"{ALERTMANAGER} not installed (Debian package prometheus-alertmanager)")
        self.work_dir = Path(work_dir)
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        config = self.work_dir / "alertmanager.yml"
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config.write_text("route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n")
        self.process = ManagedProcess(
            [
                ALERTMANAGER,
                f"--config.file={config}",
                f"--storage.path={self.work_dir / 'data'}",
                f"--web.listen-address={HOST}:{self.port}",
                "--cluster.listen-address=",
            ],
            self.work_dir / "alertmanager.log",
        )

    def start(self, timeout_s: float = 30.0) -> None:
        """Start it and wait until ``/-/ready`` answers."""
        self.process.start()
        _wait_ready(self.process, self.url, timeout_s)

    def stop(self) -> None:
        """SIGTERM (SIGKILL after 10 s), by PID."""
        self.process.stop(10)

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (``GET /api/v2/alerts``); [] while it does not answer."""
        try:
            return list(_get_json(f"{self.url}/api/v2/alerts?active=true&silenced=false&inhibited=false"))
        except (OSError, ValueError):
            return []


SHIPPED_AUDIT_LAG_SLACK_S = 120
"""The constant of KafkaAuditAuditLag in ``dashboards/prometheus-rules.yml``: window (60 s) + watermark
delay (10 s) + margin (30 s) + trigger (20 s), s."""


def audit_lag_slack_s(
    window_ms: int, watermark_delay_ms: int, trigger_ms: int, heartbeat_ms: int = 2_000
) -> int:
    """Return the audit-lag rule's constant for a job's settings, s.

    The newest final window ends up to one window before the next one is final; a window is emitted up
    to heartbeat + watermark delay + 3 trigger intervals after its wait (``alerts.batch_listener.
    job_emit_delay_ms``); plus the rule's 30 s margin. Never below the shipped 120 s.
    """
    slack_ms = window_ms + heartbeat_ms + watermark_delay_ms + 3 * trigger_ms + 30_000
    return max(SHIPPED_AUDIT_LAG_SLACK_S, -(-slack_ms // 1000))


def soak_rules(slack_s: int) -> str:
    """Return the shipped Prometheus rules with KafkaAuditAuditLag's constant set to ``slack_s``.

    Raises:
        MonitoringError: the shipped file no longer has the constant where this expects it.
    """
    text = resources.files("dashboards").joinpath("prometheus-rules.yml").read_text()
    old = f"            {SHIPPED_AUDIT_LAG_SLACK_S} + ("
    if text.count(old) != 1:
        raise MonitoringError("dashboards/prometheus-rules.yml: KafkaAuditAuditLag's constant not found")
    return text.replace(old, f"            {slack_s} + (")


SOAK_TSDB_BLOCK_DURATION = "5m"
"""The soak's Prometheus TSDB block range (``--storage.tsdb.min-block-duration`` and ``max-``).

With the default of 2 h the in-memory head keeps every sample until it spans 3 h (1.5 block ranges),
and every series starts a new head chunk at each 2-hour wall-clock boundary: the 60-minute soak of
session 16 measured Prometheus's RSS +1.6% over 28 minutes, then one 4 MiB step at minute 38.3, which
was 02:00 UTC (+10.5% over minutes 10-60; whether a boundary falls inside the run decided pass or fail).
With 5-minute blocks the head is compacted to disk every 5 minutes from minute 7.5, so by minute 10
Prometheus is in the steady state a long-running one reaches after 3 hours with its defaults.
"""


class Prometheus:
    """Prometheus on a free 127.0.0.1 port scraping the brokers and the job, alerting to Alertmanager.

    It evaluates the shipped rules with KafkaAuditAuditLag's constant for the job's settings
    (:func:`audit_lag_slack_s`; the shipped file assumes 60 s windows and a trigger of 20 s at most).
    ``tsdb_block_duration`` (a Prometheus duration such as ``"5m"``; None: Prometheus's default of 2 h)
    sets the TSDB block range (:data:`SOAK_TSDB_BLOCK_DURATION` explains the soak's choice).
    """

    def __init__(
        self,
        work_dir: Path,
        cluster: KafkaCluster,
        job_metrics: str,
        alertmanager: Alertmanager,
        audit_lag_slack_s: int = SHIPPED_AUDIT_LAG_SLACK_S,
        scrape_interval: str = "15s",
        tsdb_block_duration: str | None = SOAK_TSDB_BLOCK_DURATION,
    ) -> None:
        if not shutil.which(PROMETHEUS):
            raise MonitoringError(f"{PROMETHEUS} not installed (Debian package prometheus)")
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        rules = self.work_dir / "kafka-audit-rules.yml"
        rules.write_text(soak_rules(audit_lag_slack_s))
        config = cluster.write_prometheus_config(
            self.work_dir / "prometheus.yml",
            scrape_interval=scrape_interval,
            other_jobs={"kafka-audit": [job_metrics]},
            rule_files=[str(rules)],
        )
        data = yaml.safe_load(config.read_text())
        data["alerting"] = {
            "alertmanagers": [{"static_configs": [{"targets": [f"{HOST}:{alertmanager.port}"]}]}]
        }
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        self.process = ManagedProcess(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.work_dir / 'tsdb'}",
                f"--web.listen-address={HOST}:{self.port}",
                *(
                    [
                        f"--storage.tsdb.min-block-duration={tsdb_block_duration}",
                        f"--storage.tsdb.max-block-duration={tsdb_block_duration}",
                    ]
                    if tsdb_block_duration
                    else []
                ),
            ],
            self.work_dir / "prometheus.log",
        )

    def start(self, timeout_s: float = 60.0) -> None:
        """Start it and wait until ``/-/ready`` answers."""
        self.process.start()
        _wait_ready(self.process, self.url, timeout_s)

    def stop(self) -> None:
        """SIGTERM (SIGKILL after 20 s), by PID."""
        self.process.stop(20)

    def firing(self) -> list[dict[str, Any]]:
        """Alerts of its rules now pending or firing (``GET /api/v1/alerts``); [] while it does not answer."""
        try:
            return list(_get_json(f"{self.url}/api/v1/alerts")["data"]["alerts"])
        except (OSError, ValueError, KeyError, TypeError):
            return []
