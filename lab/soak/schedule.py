"""The chaos schedule: which fault, when, on what, for how long (YAML, validated by pydantic).

A schedule is a list of events, each at ``at_s`` seconds after the load starts::

    events:
      - {at_s: 240, action: kill_audit_consumer, target: 1, restart_after_s: 5}
      - {at_s: 420, action: cut_broker, target: 2, duration_s: 60}

Actions (:mod:`soak.chaos` carries them out; ``target`` numbers are 1-based):

* ``rolling_restart``: every broker in turn, controlled shutdown (SIGTERM), restart, wait until the
  cluster has every broker and no under-replicated partition, then the next.
* ``kill_audit_leader``: SIGKILL the broker that leads most of the audit topic's partitions; restart it
  after ``restart_after_s``.
* ``kill_audit_consumer``: SIGKILL audit consumer ``target``; restart it after ``restart_after_s``.
* ``kill_spark_driver``: SIGKILL the Spark driver (its Python process and its JVM); restart it after
  ``restart_after_s``: it resumes from its checkpoint.
* ``kill_spark_worker``: SIGKILL Spark worker ``target`` and its executor (executor loss); restart the
  worker after ``restart_after_s``.
* ``cut_broker``: cut broker ``target`` off with iptables (everything it sends and everything sent to
  its ports is dropped) for ``duration_s``.
* ``restart_alertmanager``: stop Alertmanager (SIGTERM) and start it again after ``restart_after_s``.

Events run one at a time in order; one that starts late (the previous one overran) says so in the
records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kafka_plumbing.errors import ConfigError

Action = Literal[
    "rolling_restart",
    "kill_audit_leader",
    "kill_audit_consumer",
    "kill_spark_driver",
    "kill_spark_worker",
    "cut_broker",
    "restart_alertmanager",
]
_TARGETED = {"kill_audit_consumer", "kill_spark_worker", "cut_broker"}


class ChaosEvent(BaseModel):
    """One fault.

    Attributes:
        at_s: When, seconds after the load starts.
        action: What (see the module docstring).
        target: Which instance, 1-based (audit consumer, worker, broker ``node.id``); actions without one
            ignore it.
        duration_s: How long a ``cut_broker`` lasts, s.
        restart_after_s: How long a killed or stopped component stays down before it is restarted, s.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    at_s: float = Field(ge=0)
    action: Action
    target: int | None = Field(None, ge=1)
    duration_s: float = Field(60.0, gt=0)
    restart_after_s: float = Field(5.0, ge=0)

    @model_validator(mode="after")
    def _target_where_needed(self) -> ChaosEvent:
        if self.action in _TARGETED and self.target is None:
            raise ValueError(f"{self.action} needs a target (1-based)")
        return self

    @property
    def label(self) -> str:
        """Short name for tables and plots, e.g. ``cut_broker 2``."""
        return self.action + (
            f" {self.target}" if self.target is not None and self.action in _TARGETED else ""
        )


class Schedule(BaseModel):
    """A chaos schedule: events sorted by ``at_s``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    events: list[ChaosEvent] = Field(default_factory=list)

    @model_validator(mode="after")
    def _sorted(self) -> Schedule:
        object.__setattr__(self, "events", sorted(self.events, key=lambda e: e.at_s))
        return self

    def check_fits(self, duration_s: float, consumers: int = 2, workers: int = 2, brokers: int = 3) -> None:
        """Raise ConfigError if an event starts after the load ends or names a target that does not exist."""
        limits = {"kill_audit_consumer": consumers, "kill_spark_worker": workers, "cut_broker": brokers}
        for e in self.events:
            if e.at_s >= duration_s:
                raise ConfigError(
                    f"chaos event {e.label} at {e.at_s:.0f} s starts after the load ({duration_s:.0f} s)"
                )
            if e.target is not None and e.action in limits and e.target > limits[e.action]:
                raise ConfigError(f"chaos event {e.label}: there are only {limits[e.action]}")


def load_schedule(path: Path) -> Schedule:
    """Read and validate a schedule file.

    Raises:
        ConfigError: the file is missing, not YAML, or not a valid schedule (the message says where).
    """
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"chaos schedule {path}: {exc}") from None
    try:
        return Schedule.model_validate(data or {})
    except ValidationError as exc:
        raise ConfigError(f"chaos schedule {path}: {exc}") from None
