"""What the controller remembers per producer group, as JSON (saved in the Spark checkpoint directory).

:class:`ControllerState` round-trips through :meth:`ControllerState.to_json` /
:meth:`ControllerState.from_json`; :class:`ControlStateFile` keeps it in ``control-state.json`` beside
the job's checkpoint (:class:`kafka_plumbing.state_file.JsonStateFile`: atomic, versioned, an unusable
file is set aside), so a restarted driver resumes with the same versions, dwell times, pending
evaluations and windows already judged (a micro-batch Spark re-runs after a crash is not counted twice).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit_record.control_record import ControlRecord
from control_loop.config import GroupConfig
from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.state_file import JsonStateFile

STATE_FILE = "control-state.json"
"""The controller's state file, in the Spark job's checkpoint directory."""
STATE_FORMAT = 1


@dataclass
class Evaluation:
    """A change being watched for a rollback (``docs/DESIGN.md``, "Control loop").

    Attributes:
        version: Version of the change's control record.
        decided_at_ms: When the change was decided, ms since the epoch UTC; only windows starting at or
            after it count.
        before: The configuration the change replaced (the rollback target).
        after: The configuration the change set.
        measured_gamma_before: Mean measured gamma (Eq. 2 with R_l, R_d) of the k final windows before the
            change (None: none measured).
        predicted_gamma_before, predicted_gamma_after: Predicted gamma of ``before`` and ``after`` then.
        gammas_after: Measured gamma of the final windows since, that ran with ``after``, oldest first.
        predicted_after_live: Predicted gamma of ``after`` on each of those windows' own network (the
            window's ``gamma_predicted``), oldest first; windows without one are left out.
        gammas_before: Measured gamma of the k final windows before the change, oldest first (their
            spread is part of the measurement's noise).
        errors_before: The model's gamma error on those windows (|predicted - measured|; 1 where the job
            marked the model not calibrated), windows with a prediction only.
        errors_after: The same for the windows in ``gammas_after``.
    """

    version: int
    decided_at_ms: int
    before: GroupConfig
    after: GroupConfig
    measured_gamma_before: float | None = None
    predicted_gamma_before: float | None = None
    predicted_gamma_after: float | None = None
    gammas_after: list[float] = field(default_factory=list)
    predicted_after_live: list[float] = field(default_factory=list)
    gammas_before: list[float] = field(default_factory=list)
    errors_before: list[float] = field(default_factory=list)
    errors_after: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "gammas_before": list(self.gammas_before),
            "errors_before": list(self.errors_before),
            "errors_after": list(self.errors_after),
            "version": self.version,
            "decided_at_ms": self.decided_at_ms,
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "measured_gamma_before": self.measured_gamma_before,
            "predicted_gamma_before": self.predicted_gamma_before,
            "predicted_gamma_after": self.predicted_gamma_after,
            "gammas_after": list(self.gammas_after),
            "predicted_after_live": list(self.predicted_after_live),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Evaluation:
        """Inverse of :meth:`to_json` (raises ``KeyError``, ``TypeError``, ``ValueError`` when malformed)."""
        return cls(
            version=int(data["version"]),
            decided_at_ms=int(data["decided_at_ms"]),
            before=GroupConfig.from_json(data["before"]),
            after=GroupConfig.from_json(data["after"]),
            measured_gamma_before=data.get("measured_gamma_before"),
            predicted_gamma_before=data.get("predicted_gamma_before"),
            predicted_gamma_after=data.get("predicted_gamma_after"),
            gammas_after=[float(g) for g in data.get("gammas_after", [])],
            predicted_after_live=[float(g) for g in data.get("predicted_after_live", [])],
            gammas_before=[float(g) for g in data.get("gammas_before", [])],
            errors_before=[float(g) for g in data.get("errors_before", [])],
            errors_after=[float(g) for g in data.get("errors_after", [])],
        )


@dataclass
class GroupState:
    """The controller's memory of one producer group.

    Attributes:
        version: Newest control-record version issued for the group (0: none); the next is ``version + 1``.
        config: The configuration last written for the group (None: none yet).
        last_change_ms: When the newest change or rollback was decided, ms since the epoch UTC.
        last_advice_ms: When the newest advice was given, ms (dwell time of advice).
        last_window_end_ms: End of the newest final window taken into account, ms (event time): older or
            equal windows (a re-run micro-batch) are ignored.
        recent_gammas: Measured gamma of the newest k final windows, oldest first (the "before" of a change).
        recent_errors: The model's gamma error (|predicted - measured|, 1 where the job marked the model
            not calibrated) on those of the newest k windows that have a prediction, oldest first.
        evaluation: The change being watched, if any.
        blocked: Configurations rolled back, as ``(librdkafka properties, blocked until ms)``: not tried
            again before then.
    """

    version: int = 0
    config: GroupConfig | None = None
    last_change_ms: int | None = None
    last_advice_ms: int | None = None
    last_window_end_ms: int | None = None
    recent_gammas: list[float] = field(default_factory=list)
    recent_errors: list[float] = field(default_factory=list)
    evaluation: Evaluation | None = None
    blocked: list[tuple[dict[str, Any], int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "version": self.version,
            "config": self.config.to_json() if self.config is not None else None,
            "last_change_ms": self.last_change_ms,
            "last_advice_ms": self.last_advice_ms,
            "last_window_end_ms": self.last_window_end_ms,
            "recent_gammas": list(self.recent_gammas),
            "recent_errors": list(self.recent_errors),
            "evaluation": self.evaluation.to_json() if self.evaluation is not None else None,
            "blocked": [{"properties": p, "until_ms": u} for p, u in self.blocked],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GroupState:
        """Inverse of :meth:`to_json` (raises ``KeyError``, ``TypeError``, ``ValueError`` when malformed)."""
        config, evaluation = data.get("config"), data.get("evaluation")
        return cls(
            version=int(data["version"]),
            config=GroupConfig.from_json(config) if config is not None else None,
            last_change_ms=data.get("last_change_ms"),
            last_advice_ms=data.get("last_advice_ms"),
            last_window_end_ms=data.get("last_window_end_ms"),
            recent_gammas=[float(g) for g in data.get("recent_gammas", [])],
            recent_errors=[float(g) for g in data.get("recent_errors", [])],
            evaluation=Evaluation.from_json(evaluation) if evaluation is not None else None,
            blocked=[(dict(b["properties"]), int(b["until_ms"])) for b in data.get("blocked", [])],
        )


@dataclass
class ControllerState:
    """Every group's :class:`GroupState`, by group name."""

    groups: dict[str, GroupState] = field(default_factory=dict)

    def group(self, name: str) -> GroupState:
        """Return the state of group ``name``, created empty on first use."""
        return self.groups.setdefault(name, GroupState())

    def to_json(self) -> dict[str, Any]:
        """Return ``{"groups": {name: GroupState.to_json()}}``."""
        return {"groups": {name: g.to_json() for name, g in sorted(self.groups.items())}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ControllerState:
        """Inverse of :meth:`to_json`.

        Raises:
            ValueError: the data is not a controller state (names what is wrong).
        """
        try:
            return cls({str(name): GroupState.from_json(g) for name, g in data["groups"].items()})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a controller state: {type(exc).__name__}: {exc}") from exc


class ControlStateFile:
    """The controller's state as one JSON file (``control-state.json`` in the checkpoint directory).

    Besides the :class:`ControllerState` it keeps the control records decided but not yet acknowledged
    by the control topic (written again on the next micro-batch, also after a restart).
    """

    def __init__(self, path: Path) -> None:
        self.file = JsonStateFile(path, STATE_FORMAT, "control-loop state")

    @property
    def path(self) -> Path:
        """The file."""
        return self.file.path

    def load(self) -> tuple[ControllerState, list[ControlRecord]] | None:
        """Return the saved state and the unsent records.

        None if there is no file or it was unusable (then it is set aside and logged).
        """
        data = self.file.load()
        if data is None:
            return None
        try:
            unsent = [ControlRecord(**r).validate() for r in data.get("unsent", [])]
            return ControllerState.from_json(data), unsent
        except (ValueError, TypeError, KafkaAuditError) as exc:
            self.file.set_aside(f"{type(exc).__name__}: {exc}")
            return None

    def save(self, state: ControllerState, unsent: Sequence[ControlRecord] = ()) -> None:
        """Replace the file with ``state`` and the ``unsent`` records (atomic).

        Raises:
            OSError: the directory cannot be written.
        """
        self.file.save({**state.to_json(), "unsent": [dataclasses.asdict(r) for r in unsent]})


__all__ = ["STATE_FILE", "ControlStateFile", "ControllerState", "Evaluation", "GroupState"]
