"""The testbed's stage producer processes: their stderr must never block them (a file, not a pipe)."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from testbed.lab import Lab, LabError
from testbed.producer_process import ProducerRun

# writes 256 KB to stderr (4x a pipe's buffer: a lossy link makes librdkafka log this much), then the result
CHATTY = (
    "import json, sys\n"
    "for _ in range(2048): sys.stderr.write('%5|REQTMOUT|' + 'x' * 115 + '\\n')\n"
    "print(json.dumps({'producer_id': 'p', 'produced': 3, 'seconds': 1.0}))\n"
)


class LocalNamespace:
    """Runs the command it is given a script for, in this namespace."""

    def __init__(self, script: str) -> None:
        self.script = script

    def popen(self, cmd: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen([sys.executable, "-c", self.script], **kwargs)


def _lab(tmp_path: Path, script: str) -> Lab:
    lab = object.__new__(Lab)  # no cluster, no namespace: only the process plumbing
    lab.ns = LocalNamespace(script)  # type: ignore[assignment]
    lab.logs_dir = tmp_path / "producer-logs"
    lab._log_numbers = itertools.count()
    lab.cluster = type("C", (), {"bootstrap_servers": "127.0.0.1:1"})()  # type: ignore[assignment]
    return lab


def test_a_chatty_producer_process_is_not_blocked_by_its_stderr(tmp_path: Path) -> None:
    lab = _lab(tmp_path, CHATTY)
    proc = lab.start_producer(ProducerRun(bootstrap_servers="x", topic="t", client_id="stage-0", count=3))
    assert proc.wait(timeout=30) == 0  # nobody reads it meanwhile, as while later stages run
    outcome = Lab.finish_producer(proc)
    assert outcome.sent == 3
    log = (tmp_path / "producer-logs" / "stage-0-0.stderr").read_text()
    assert log.count("REQTMOUT") == 2048


def test_a_failed_producer_process_reports_the_end_of_its_stderr(tmp_path: Path) -> None:
    lab = _lab(tmp_path, "import sys; sys.stderr.write('boom: no broker'); sys.exit(3)")
    proc = lab.start_producer(ProducerRun(bootstrap_servers="x", topic="t", client_id="stage-1", count=1))
    with pytest.raises(LabError, match=r"failed \(3\): boom: no broker"):
        Lab.finish_producer(proc)
