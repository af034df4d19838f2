"""Processes the project starts: whether one still runs (by PID), and the tail of its log.

One rule for the local cluster, MirrorMaker 2, the Connect worker, ``up`` and the testbed.
"""

from __future__ import annotations

import os
from pathlib import Path

_PROC = Path("/proc")


def pid_alive(pid: int) -> bool:
    """Return True while the process ``pid`` runs.

    ``kill(pid, 0)`` asks the kernel without sending a signal: no such process -> not alive; a process
    of another user (``PermissionError``) -> alive. A zombie (exited, not yet reaped by its parent,
    ``/proc/<pid>/stat`` state ``Z``) still answers ``kill(pid, 0)`` but runs no more -> not alive.
    Without ``/proc`` (not Linux) zombies cannot be told apart and count as alive.

    Never raises: every outcome is an answer.

    Args:
        pid: Process id; 0, negative ids (process groups to ``kill``) and ids beyond the platform's
            ``pid_t`` are never a live process.
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:  # gone since kill(0), or no /proc on this system
        return not (_PROC / "self").exists()
    # Field 3 (state) follows the command name in parentheses, which may itself hold ")" (proc(5)).
    fields = stat.rpartition(")")[2].split()
    return not fields or fields[0] != "Z"


def log_tail(path: Path, chars: int = 3000) -> str:
    """Return the last ``chars`` characters of a process's log file (``(no log)`` if it cannot be read).

    For error messages about a process that exited during start-up; undecodable bytes are replaced.
    """
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"
