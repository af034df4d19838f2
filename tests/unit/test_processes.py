"""pid_alive: the one liveness rule (running, exited, zombie, another user's process, no process)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafka_plumbing import processes
from kafka_plumbing.processes import pid_alive


def _child() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "pass"])


def test_a_running_process_is_alive():
    assert pid_alive(os.getpid())


def test_a_zombie_is_not_alive_and_a_reaped_process_neither():
    child = _child()
    try:
        deadline = time.monotonic() + 10
        while pid_alive(child.pid) and time.monotonic() < deadline:  # exited, not reaped: a zombie
            time.sleep(0.02)
        assert not pid_alive(child.pid)
        if Path("/proc").is_dir():
            stat = Path(f"/proc/{child.pid}/stat").read_text()
            assert stat.rpartition(")")[2].split()[0] == "Z"
    finally:
        child.wait(10)
    assert not pid_alive(child.pid)


@pytest.mark.parametrize("pid", [0, -1, 2**40])
def test_process_groups_and_impossible_ids_are_no_process(pid):
    assert not pid_alive(pid)


def test_another_users_process_is_alive(monkeypatch):
    def kill(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(processes.os, "kill", kill)
    assert pid_alive(12345)


def test_a_command_name_with_a_parenthesis_is_read(monkeypatch, tmp_path):
    (tmp_path / "self").mkdir()
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "stat").write_text("4242 (odd) name) S 1 4242 4242 0 -1\n")
    monkeypatch.setattr(processes, "_PROC", tmp_path)
    monkeypatch.setattr(processes.os, "kill", lambda pid, sig: None)
    assert pid_alive(4242)
    (tmp_path / "4242" / "stat").write_text("4242 (odd) name) Z 1 4242 4242 0 -1\n")
    assert not pid_alive(4242)
    (tmp_path / "4242" / "stat").unlink()  # exited between kill(0) and the read
    assert not pid_alive(4242)
    (tmp_path / "self").rmdir()  # no /proc at all (not Linux): kill(0) is the answer
    assert pid_alive(4242)
