"""kafka_plumbing.connect_worker: the worker's and connectors' properties files and the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_plumbing import connect_worker
from kafka_plumbing.connect_worker import BYTE_ARRAY_CONVERTER, MAIN_CLASS, ConnectWorker


def _props(path: Path) -> dict[str, str]:
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    return dict(tuple(part.strip() for part in ln.split("=", 1)) for ln in lines)  # type: ignore[misc]


def test_worker_defaults_then_overrides_and_one_file_per_connector(tmp_path):
    worker = ConnectWorker(
        data_dir=tmp_path,
        bootstrap_servers="127.0.0.1:9092",
        connectors={"copy": {"connector.class": "X", "tasks.max": "1"}},
        worker={"producer.interceptor.classes": "I", "offset.flush.interval.ms": "250"},
        rest_port=8083,
    )
    files = worker._write()
    assert [f.name for f in files] == ["worker.properties", "copy.properties"]
    props = _props(files[0])
    assert props["bootstrap.servers"] == "127.0.0.1:9092"
    assert props["value.converter"] == props["header.converter"] == BYTE_ARRAY_CONVERTER
    assert props["listeners"] == "http://127.0.0.1:8083"
    assert props["offset.storage.file.filename"] == str(tmp_path / "connect.offsets")
    assert props["producer.interceptor.classes"] == "I" and props["offset.flush.interval.ms"] == "250"
    assert _props(files[1]) == {"name": "copy", "connector.class": "X", "tasks.max": "1"}


def test_command_puts_extra_jars_after_the_mirror_jars(tmp_path, monkeypatch):
    monkeypatch.setattr(connect_worker, "classpath", lambda profile: f"/jars/{profile}/*")
    monkeypatch.setattr(connect_worker, "java_executable", lambda: "/usr/bin/java")
    worker = ConnectWorker(tmp_path, "b:1", {}, extra_classpath=[Path("/x/audit.jar")])
    cmd = worker._command([tmp_path / "worker.properties"])
    assert cmd[0] == "/usr/bin/java" and cmd[cmd.index("-cp") + 1] == "/jars/mirror/*:/x/audit.jar"
    assert cmd[-2:] == [MAIN_CLASS, str(tmp_path / "worker.properties")]


def test_stop_without_start_is_a_no_op(tmp_path):
    worker = ConnectWorker(tmp_path, "b:1", {})
    worker.stop()
    assert not worker.running


@pytest.mark.parametrize("state", [None, {"connector": {"state": "RUNNING"}, "tasks": []}])
def test_not_ready_until_every_task_runs(tmp_path, monkeypatch, state):
    worker = ConnectWorker(tmp_path, "b:1", {"c": {}})
    monkeypatch.setattr(ConnectWorker, "running", property(lambda self: True))
    monkeypatch.setattr(worker, "status", lambda name: state)
    with pytest.raises(connect_worker.ConnectError, match="waiting for c"):
        worker.wait_ready(timeout_s=0.6)
