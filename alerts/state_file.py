"""The alert pipeline's state on disk, so a restarted Spark driver carries on where it stopped.

One JSON file (``alerts-state.json`` next to the Spark checkpoint, see
:class:`spark_streaming.job.ReconciliationJob`)::

    {"format": 1, "saved_at_ms": ..., "engine": AlertEngine.to_state(),
     "pending": {sink name: [AlertEvent.to_dict(), ...]}}

Written after every evaluation by replacing the file atomically, so a crash leaves the previous or the
new state, never half of one. A file that cannot be read is moved aside (``*.corrupt-<ms>``) and
logged, and the pipeline starts from scratch; nothing is deleted (:mod:`kafka_plumbing.state_file`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alerts.event import AlertEvent
from kafka_plumbing.state_file import JsonStateFile

FORMAT = 1
"""Version of the file's layout; a file of another version is set aside like a corrupt one."""


@dataclass(frozen=True)
class SavedAlertState:
    """What the file holds.

    Attributes:
        engine: :meth:`alerts.engine.AlertEngine.to_state` data.
        pending: Undelivered events per sink name, oldest first.
        saved_at_ms: When it was written, ms since the Unix epoch.
    """

    engine: dict[str, Any]
    pending: dict[str, list[AlertEvent]]
    saved_at_ms: int


class AlertStateFile:
    """Reads and atomically writes :class:`SavedAlertState` at ``path``.

    Args:
        path: The JSON file; its directory is created on the first save.
    """

    def __init__(self, path: Path) -> None:
        self.file = JsonStateFile(path, FORMAT, "alert state")
        self.path = self.file.path

    def load(self) -> SavedAlertState | None:
        """Return the saved state, or None if there is none.

        A file that is not valid JSON of this format is renamed to ``<name>.corrupt-<ms>`` (logged as
        an error) and None is returned.
        """
        data = self.file.load()
        if data is None:
            return None
        try:
            return SavedAlertState(
                engine=dict(data["engine"]),
                pending={
                    str(name): [AlertEvent.from_dict(e) for e in events]
                    for name, events in data["pending"].items()
                },
                saved_at_ms=int(data["saved_at_ms"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self.set_aside(f"{type(exc).__name__}: {exc}")
            return None

    def set_aside(self, why: str) -> Path:
        """Rename the file to ``<name>.corrupt-<ms>`` (kept for inspection) and log ``why``; return it."""
        return self.file.set_aside(why)

    def save(self, engine: dict[str, Any], pending: dict[str, list[AlertEvent]]) -> None:
        """Replace the file with this state (atomic: temporary file, fsync, ``os.replace``).

        Raises:
            OSError: the directory cannot be created or written.
        """
        self.file.save(
            {
                "engine": engine,
                "pending": {name: [e.to_dict() for e in events] for name, events in pending.items()},
            }
        )
