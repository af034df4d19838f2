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

from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.local_cluster import HOST, KafkaCluster, free_port
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


class Prometheus:
    """Prometheus on a free 127.0.0.1 port scraping the brokers and the job, alerting to Alertmanager."""

    def __init__(
        self,
        work_dir: Path,
        cluster: KafkaCluster,
        job_metrics: str,
        alertmanager: Alertmanager,
        scrape_interval: str = "15s",
    ) -> None:
        if not shutil.which(PROMETHEUS):
            raise MonitoringError(f"{PROMETHEUS} not installed (Debian package prometheus)")
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        rules = Path(str(resources.files("dashboards").joinpath("prometheus-rules.yml")))
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
