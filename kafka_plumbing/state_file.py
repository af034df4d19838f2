"""A component's state as one JSON file beside the Spark checkpoint: versioned, atomic, never deleted.

Used by the alert pipeline (``alerts-state.json``) and the live model (``live-model-state.json``) so
that a restarted Spark driver carries on where it stopped. A save replaces the file atomically (a
temporary file in the same directory, fsync, ``os.replace``), so a crash leaves the previous or the new
state, never half of one. A file that cannot be used (not JSON, another ``format``, or content its
owner rejects) is moved aside to ``<name>.corrupt-<ms>`` and logged; nothing is deleted.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class JsonStateFile:
    """Reads and atomically writes one JSON object ``{"format": N, "saved_at_ms": ms, ...}`` at ``path``.

    Args:
        path: The file; its directory is created on the first save.
        format_version: The layout version this reader understands; a file of another is set aside.
        what: What the state is, for log lines (e.g. ``"alert state"``).
    """

    def __init__(self, path: Path, format_version: int, what: str) -> None:
        self.path = Path(path)
        self.format_version = format_version
        self.what = what

    def load(self) -> dict[str, Any] | None:
        """Return the saved object; None if there is no file or it was set aside (not JSON, other format)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("format") != self.format_version:
                found = data.get("format") if isinstance(data, dict) else type(data).__name__
                raise ValueError(f"format {found!r}, expected {self.format_version}")
        except ValueError as exc:
            self.set_aside(f"{type(exc).__name__}: {exc}")
            return None
        return data

    def set_aside(self, why: str) -> Path:
        """Rename the file to ``<name>.corrupt-<ms>`` (kept), log ``why``; return the new path."""
        aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time() * 1000)}")
        os.replace(self.path, aside)
        log.error("%s %s unusable (%s): moved to %s; starting afresh", self.what, self.path, why, aside)
        return aside

    def save(self, data: dict[str, Any]) -> None:
        """Replace the file with ``data`` plus ``format`` and ``saved_at_ms`` (atomic).

        Raises:
            OSError: the directory cannot be created or written.
        """
        body = {**data, "format": self.format_version, "saved_at_ms": int(time.time() * 1000)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with open(tmp, "w") as f:
            json.dump(body, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
