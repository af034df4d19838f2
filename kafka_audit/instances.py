"""The running ``kafka-audit up`` instances of this user, wherever their data directories are.

Each instance writes one JSON file, ``<state dir>/instances/<pid>.json`` (state dir:
``$KAFKA_AUDIT_STATE_DIR``, default ``~/.local/state/kafka-audit``), when it has started, and removes
it when it stops. ``kafka-audit status`` lists the files whose process still runs and removes the others
(an instance killed with ``kill -9`` leaves its file behind). The same record is also written as
``up.json`` in the instance's data directory, for ``kafka-audit status --data-dir DIR`` (another user's
instance, or one started with another ``$HOME``).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from kafka_plumbing.processes import pid_alive


def state_dir() -> Path:
    """``$KAFKA_AUDIT_STATE_DIR`` or ``~/.local/state/kafka-audit``: this user's kafka-audit state."""
    env = os.environ.get("KAFKA_AUDIT_STATE_DIR")
    return Path(env) if env else Path.home() / ".local" / "state" / "kafka-audit"


def instances_dir() -> Path:
    """Where running ``up`` instances register (``<state dir>/instances``)."""
    return state_dir() / "instances"


def _write_atomic(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
    os.replace(tmp, path)


def register(record: dict[str, Any]) -> Path:
    """Register a running instance; ``record["pid"]`` is its process id. Returns the file written.

    Raises:
        OSError: if the state directory cannot be written.
    """
    path = instances_dir() / f"{int(record['pid'])}.json"
    _write_atomic(path, record)
    return path


def unregister(pid: int) -> None:
    """Remove the registration of ``pid`` (nothing if there is none)."""
    with contextlib.suppress(FileNotFoundError):
        (instances_dir() / f"{int(pid)}.json").unlink()


def _read(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("pid"), int) else None


def running() -> list[dict[str, Any]]:
    """Return the records of the registered instances whose process still runs, oldest first.

    Files of dead processes (and unreadable ones) are removed on the way.
    """
    out = []
    directory = instances_dir()
    if not directory.is_dir():
        return []
    for path in sorted(directory.glob("*.json")):
        record = _read(path)
        if record is None or not pid_alive(int(record["pid"])):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        out.append(record)
    return sorted(out, key=lambda r: r.get("started_at") or 0)


def write_data_dir_record(data_dir: Path, name: str, record: dict[str, Any]) -> None:
    """Write the record into the instance's data directory too (``<data_dir>/<name>``)."""
    _write_atomic(Path(data_dir) / name, record)


def read_data_dir_record(data_dir: Path, name: str) -> dict[str, Any] | None:
    """Return the record in ``<data_dir>/<name>`` if that process still runs, else None."""
    record = _read(Path(data_dir) / name)
    return record if record is not None and pid_alive(int(record["pid"])) else None
