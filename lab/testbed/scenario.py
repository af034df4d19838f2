"""Scenario files: stages of network impairment, producer configuration and workload.

A scenario (YAML) is a list of stages; each stage runs one audited producer process (in the impaired
namespace) for ``duration_s`` with the stage's librdkafka configuration and workload, after switching
the network to the stage's impairment. The next stage's network is applied while the previous
producer may still be flushing, so impairments change under flowing traffic, as in the paper's Fig. 9.
``variants`` name alternative producer configurations (a ``default`` and a ``tuned`` one for the
shipped scenarios) that override the base configuration of every stage.

Example::

    name: weblog
    stream: weblog              # Table II stream type (KPI weights)
    topic: testbed.weblog
    window_ms: 10000
    producer: {acks: "1", batch.num.messages: 1, message.timeout.ms: 5000}
    variants:
      tuned: {batch.num.messages: 8, message.timeout.ms: 15000}
    workload: {profile: weblog, poll_interval_ms: 1}
    stages:
      - {name: calm, duration_s: 20, network: {delay: {delay_ms: 20, jitter_ms: 5}}}
      - name: bursty loss
        duration_s: 20
        network:
          delay: {delay_ms: 20, jitter_ms: 5, distribution: pareto}
          loss: {model: gilbert-elliott, p: 3, r: 30}
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from audit_record.finality import DEFAULT_DELIVERY_MARGIN_MS, DEFAULT_MAX_FINAL_WAIT_MS
from kafka_plumbing.errors import ConfigError, config_error
from testbed.impairment import Impairment


class Workload(BaseModel):
    """Load of a stage.

    Attributes:
        profile: ``social``, ``weblog`` or ``game`` (paper Table II).
        message_bytes: Fixed message size M, bytes (None: the profile's sizes).
        poll_interval_ms: Polling interval delta, ms (rate lambda = 1/delta; 0 = as fast as possible).
        producers: Audited producers N_p the application hands the offered load to, round-robin (paper
            Sec. IV-C scaling; the offered rate is the stream's, not per producer).
    """

    model_config = ConfigDict(extra="forbid")

    profile: str = Field("weblog", pattern="^(social|weblog|game)$")
    message_bytes: int | None = Field(None, gt=0)
    poll_interval_ms: float = Field(1.0, ge=0.0)
    producers: int = Field(1, ge=1)


class Stage(BaseModel):
    """One stage: how long, the network, and overrides of the producer config and workload.

    Attributes:
        name: Shown in results.
        duration_s: Seconds of load.
        network: Impairment from the stage's start.
        producer: librdkafka properties overriding the scenario's (and the variant's).
        workload: Workload fields overriding the scenario's.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    duration_s: float = Field(gt=0)
    network: Impairment = Field(default_factory=Impairment)
    producer: dict[str, Any] = Field(default_factory=dict)
    workload: dict[str, Any] = Field(default_factory=dict)


class Scenario(BaseModel):
    """A scenario file.

    Attributes:
        name: Scenario name.
        description: One paragraph.
        stream: Table II stream type for the KPI weights (``social``, ``weblog``, ``game``).
        topic: Data topic (created with 3 partitions).
        window_ms: Audit window, ms.
        grace_ms: How long after a window's end the audit consumer waits for its messages before the
            window is final, ms. Through a lossy path TCP delivers seconds late (retransmission timeouts,
            and the kernel drains an exited producer's send queue); a message arriving after the grace
            is counted as late, not in R_l's received, and the verifier (which reads the topic at the
            end) would disagree. The Spark job's grace is derived from it. Producers whose
            ``message.timeout.ms`` + ``delivery_margin_ms`` exceed it make their windows wait that long
            instead (at most ``max_final_wait_ms``; docs/DESIGN.md, invariant 8).
        delivery_margin_ms, max_final_wait_ms: The adaptive finality of the audit consumer and the job, ms
            (``max_final_wait_ms`` 0: the grace alone).
        producer: Base librdkafka properties of every stage.
        variants: Named overrides of ``producer`` (``default`` is implicit and empty unless given).
        workload: Base workload.
        stages: The stages, in order.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    stream: str = Field("weblog", pattern="^(social|weblog|game)$")
    topic: str = ""
    window_ms: int = Field(10_000, gt=0)
    grace_ms: int = Field(10_000, ge=0)
    delivery_margin_ms: int = Field(DEFAULT_DELIVERY_MARGIN_MS, ge=0)
    max_final_wait_ms: int = Field(DEFAULT_MAX_FINAL_WAIT_MS, ge=0)
    producer: dict[str, Any] = Field(default_factory=dict)
    variants: dict[str, dict[str, Any]] = Field(default_factory=dict)
    workload: Workload = Field(default_factory=Workload)
    stages: list[Stage] = Field(min_length=1)

    def stage_config(self, stage: Stage, variant: str = "default") -> dict[str, Any]:
        """Return the librdkafka properties of ``stage`` under ``variant``: scenario < variant < stage.

        Raises:
            ConfigError: if the variant does not exist.
        """
        if variant != "default" and variant not in self.variants:
            allowed = ", ".join(["default", *self.variants])
            raise ConfigError(f"variant={variant!r}: allowed values are {allowed}")
        return {**self.producer, **self.variants.get(variant, {}), **stage.producer}

    def stage_workload(self, stage: Stage) -> Workload:
        """Workload of ``stage``: the scenario's, overridden by the stage's fields."""
        return Workload.model_validate({**self.workload.model_dump(), **stage.workload})

    def with_overrides(
        self, stage_seconds: float | None = None, poll_interval_ms: float | None = None
    ) -> Scenario:
        """Return a copy with other stage lengths and/or another offered rate; None keeps the scenario's.

        Every stage lasts ``stage_seconds`` (s); every stage's workload polls every ``poll_interval_ms``
        (ms, rate = 1/delta).

        For experiments that need longer stages (more final windows inside one network condition) or a
        different offered rate than the shipped scenario (``kafka-audit testbed run --stage-seconds``).

        Raises:
            ConfigError: if a value is not positive (poll interval: not negative).
        """
        if stage_seconds is not None and stage_seconds <= 0:
            raise ConfigError(f"stage_seconds={stage_seconds}: allowed values are > 0")
        if poll_interval_ms is not None and poll_interval_ms < 0:
            raise ConfigError(f"poll_interval_ms={poll_interval_ms}: allowed values are >= 0")
        stages = [
            stage.model_copy(
                update={
                    **({"duration_s": stage_seconds} if stage_seconds is not None else {}),
                    **(
                        {"workload": {**stage.workload, "poll_interval_ms": poll_interval_ms}}
                        if poll_interval_ms is not None
                        else {}
                    ),
                }
            )
            for stage in self.stages
        ]
        return self.model_copy(update={"stages": stages})

    @property
    def duration_s(self) -> float:
        """Total load time, s."""
        return sum(s.duration_s for s in self.stages)


def shipped_scenarios() -> list[str]:
    """Names of the scenarios shipped in ``testbed/scenarios/``."""
    root = resources.files("testbed").joinpath("scenarios")
    return sorted(p.name.removesuffix(".yaml") for p in root.iterdir() if p.name.endswith(".yaml"))


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Read a scenario: a YAML path, or the name of a shipped one (``weblog``, ``social``, ``game``...).

    Raises:
        ConfigError: if it does not exist or is invalid (naming the file and the key).
    """
    path = Path(name_or_path)
    if not path.exists():
        shipped = resources.files("testbed").joinpath("scenarios", f"{name_or_path}.yaml")
        if not shipped.is_file():
            raise ConfigError(
                f"scenario {str(name_or_path)!r}: no such file, and not a shipped scenario "
                f"(shipped: {', '.join(shipped_scenarios())})"
            )
        text, where = shipped.read_text(), f"testbed/scenarios/{name_or_path}.yaml"
    else:
        text, where = path.read_text(), str(path)
    try:
        scenario = Scenario.model_validate(yaml.safe_load(text))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    except ValidationError as exc:
        raise config_error(exc, where) from None
    if not scenario.topic:
        scenario = scenario.model_copy(update={"topic": f"testbed.{scenario.name}"})
    return scenario
