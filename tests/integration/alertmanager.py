"""A real Prometheus Alertmanager (Debian's ``prometheus-alertmanager``) for tests, on 127.0.0.1.

    with running_alertmanager(tmp_path) as am:
        post alerts to am.url; read them back with am.alerts()

Clustering is disabled (``--cluster.listen-address=``), storage lives under the given directory, the
process is stopped by its PID. ``receiver_url`` makes Alertmanager forward notifications to a webhook
(with group_wait/group_interval 1 s so tests see them quickly).
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kafka_plumbing.cluster_ports import free_port

BINARY = "/usr/bin/prometheus-alertmanager"


@dataclass
class Alertmanager:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def alerts(self, **filters: str) -> list[dict[str, Any]]:
        """GET /api/v2/alerts (active, silenced, inhibited, unprocessed); filters are label=value matchers."""
        query = urllib.parse.urlencode([("filter", f'{k}="{v}"') for k, v in filters.items()])
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts?{query}", timeout=5) as resp:
            return json.loads(resp.read())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _config(receiver_url: str | None) -> str:
    if receiver_url is None:
        return "route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n"
    return (
        "route:\n  receiver: hook\n  group_by: [alertname, topic, tier]\n"
        "  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n"
        f"receivers:\n  - name: hook\n    webhook_configs:\n      - url: {json.dumps(receiver_url)}\n"
        "        send_resolved: true\n"
    )


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def running_alertmanager(
    workdir: Path, receiver_url: str | None = None, port: int | None = None, timeout_s: float = 30.0
) -> Iterator[Alertmanager]:
    """Start Alertmanager on 127.0.0.1 (``port`` or a free one); stop it (SIGTERM, then SIGKILL) by PID."""
    if not shutil.which(BINARY):
        pytest.skip(f"{BINARY} not installed (Debian package prometheus-alertmanager)")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "alertmanager.yml"
    config.write_text(_config(receiver_url))
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = workdir / "alertmanager.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                BINARY,
                f"--config.file={config}",
                f"--storage.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
                "--log.level=debug",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    am = Alertmanager(url, proc, log_path)
    try:
        deadline = time.monotonic() + timeout_s
        while not _ready(url):
            if proc.poll() is not None:
                raise AssertionError(f"alertmanager exited with {proc.returncode}:\n{am.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"alertmanager not ready in {timeout_s:.0f} s:\n{am.log()[-3000:]}")
            time.sleep(0.2)
        yield am
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)


class WebhookReceiver:
    """A JSON webhook receiver on 127.0.0.1 (http.server in a thread) recording every POST body.

    ``fail_with`` set to an HTTP status makes it answer that status (and record nothing).
    """

    def __init__(self) -> None:
        self.bodies: list[Any] = []
        self.headers: list[dict[str, str]] = []
        self.fail_with: int | None = None
        self._lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                if receiver.fail_with is not None:
                    self.send_response(receiver.fail_with)
                    self.end_headers()
                    return
                with receiver._lock:
                    receiver.bodies.append(json.loads(body))
                    receiver.headers.append(dict(self.headers))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert of every received body, in arrival order."""
        with self._lock:
            return [a for b in self.bodies for a in b.get("alerts", [])]

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)
