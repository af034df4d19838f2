"""Typed settings of the control loop (pydantic-settings; env prefix ``KAFKA_AUDIT_CONTROL_``).

Every field can be set from the environment, e.g. ``KAFKA_AUDIT_CONTROL_MODE=apply`` or
``KAFKA_AUDIT_CONTROL_DWELL_MS=120000``; lists, pairs and dicts take JSON
(``KAFKA_AUDIT_CONTROL_ALLOWED_ACKS='["1", "all"]'``,
``KAFKA_AUDIT_CONTROL_ALLOWED_BATCH_NUM_MESSAGES='[1, 100]'``,
``KAFKA_AUDIT_CONTROL_GROUPS='{"orders": "order-service"}'``). ``kafka-audit up`` reads them from its
config file's ``[control]`` section too. Constructor arguments win over the environment, the
environment over the defaults. A bad value raises :class:`~kafka_plumbing.errors.ConfigError` naming
the key (and its environment variable) and the allowed values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from audit_record.control_record import DEFAULT_CONTROL_TOPIC
from audit_record.record import ACKS_VALUES, canonical_acks
from kafka_plumbing.errors import config_error, setting_and_env_name

ENV_PREFIX = "KAFKA_AUDIT_CONTROL_"
KILL_ENV = "KAFKA_AUDIT_CONTROL_KILL"
"""Environment variable of the global kill switch: ``1`` (or ``true``, ``yes``, ``on``) stops every change."""
KILL_FILE = "control.kill"
"""Default kill-switch file, in the Spark job's checkpoint directory: while it exists, nothing changes."""

Mode = Literal["off", "advise", "apply"]
"""``off``: no controller; ``advise``: decisions are events only, nothing is written to the control topic;
``apply``: changes and rollbacks are written to the control topic."""
MODES: tuple[str, ...] = ("off", "advise", "apply")

LIBRDKAFKA_RANGES: dict[str, tuple[float, float]] = {
    "allowed_batch_num_messages": (1, 1_000_000),
    "allowed_linger_ms": (0, 900_000),
    "allowed_message_timeout_ms": (0, 2_147_483_647),
}
"""What librdkafka itself accepts for each bounded property (``CONFIGURATION.md``)."""


class ControlSettings(BaseSettings):
    """Mode and guardrails of the controller (``docs/DESIGN.md``, "Control loop").

    Attributes:
        mode: ``off``, ``advise`` (default: decisions become events, the control topic is not written)
            or ``apply`` (changes and rollbacks are written to the control topic).
        control_topic: Compacted topic of :class:`~audit_record.control_record.ControlRecord`, keyed by
            group (created with one partition if missing).
        bootstrap_servers: Kafka ``bootstrap.servers`` of the control topic (None: the Spark job's
            cluster, with the job's security settings: where the audited producers are).
        allowed_acks: librdkafka ``acks`` values the controller may write (``0``, ``1``, ``all``;
            ``-1`` is read as ``all``).
        allowed_batch_num_messages: (min, max) of ``batch.num.messages`` B, messages.
        allowed_message_timeout_ms: (min, max) of ``message.timeout.ms`` T_o, ms.
        allowed_linger_ms: (min, max) of ``linger.ms``, ms (the predictor does not change it; a group
            running outside this range gets no change until its producers are reconfigured).
        dwell_ms: Minimum wall-clock time between two changes (or two advices) of one group, ms.
        gamma_margin: A change needs ``suggested_gamma - gamma_predicted`` (predicted gamma, Eq. 2, of the
            suggested minus of the current configuration, 0-1 units) above this.
        rollback_windows: k: after a change, the mean measured gamma (``gamma_actual``) of the next k final
            windows that ran with the new configuration is compared with the mean of the k final windows
            before the change.
        rollback_tolerance: Roll back when the mean after is below the mean before by more than this
            (gamma units, 0-1).
        evaluation_timeout_ms: If the group's windows do not show the new configuration k times within
            this (producers not autotuned, or they rejected it), the evaluation is abandoned
            (``held``/``not_applied``) and the controller decides afresh, ms.
        rollback_block_ms: A configuration rolled back is not tried again for this group for this long, ms.
        kill_switch: Global kill switch: no change is written, decisions are advice (mode behaves as
            ``advise``). Also on while ``KAFKA_AUDIT_CONTROL_KILL=1`` is set or :attr:`kill_file` exists.
        kill_file: The kill-switch file (None: ``control.kill`` in the job's checkpoint directory); checked
            on every micro-batch, so creating it stops all changes at once without a restart.
        expiry_ms: Lifetime of a written record: producers ignore it after ``issued_at_ms + expiry_ms``
            (None: never expires), ms.
        groups: Topic -> producer group. A topic not listed is its own group (group = topic name): one
            group per topic, whose autotuned producers must set ``group`` to that name (an autotuned
            producer's group defaults to its ``client.id``; the testbed sets it explicitly).
        publish_timeout_ms: How long a write to the control topic waits for the broker's ack, ms.

    Example:
        >>> from control_loop.settings import ControlSettings
        >>> s = ControlSettings(mode="apply", groups={"orders": "checkout"})
        >>> s.mode, s.group_of("orders"), s.group_of("clicks")
        ('apply', 'checkout', 'clicks')
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")

    mode: Mode = "advise"
    control_topic: str = Field(DEFAULT_CONTROL_TOPIC, min_length=1)
    bootstrap_servers: str | None = None
    allowed_acks: list[str] = Field(default_factory=lambda: ["0", "1", "all"], min_length=1)
    allowed_batch_num_messages: tuple[int, int] = (1, 10_000)
    allowed_message_timeout_ms: tuple[int, int] = (500, 300_000)
    allowed_linger_ms: tuple[float, float] = (0.0, 1_000.0)
    dwell_ms: int = Field(60_000, ge=0)
    gamma_margin: float = Field(0.02, ge=0.0, le=1.0)
    rollback_windows: int = Field(3, ge=1)
    rollback_tolerance: float = Field(0.01, ge=0.0, le=1.0)
    evaluation_timeout_ms: int = Field(600_000, gt=0)
    rollback_block_ms: int = Field(1_800_000, ge=0)
    kill_switch: bool = False
    kill_file: Path | None = None
    expiry_ms: int | None = Field(3_600_000, gt=0)
    groups: dict[str, str] = Field(default_factory=dict)
    publish_timeout_ms: int = Field(10_000, gt=0)

    @field_validator("allowed_acks")
    @classmethod
    def _acks(cls, values: list[str]) -> list[str]:
        out: list[str] = []
        for v in values:
            try:
                canonical = canonical_acks(v)
            except ValueError:
                raise ValueError(
                    f"{v!r} is not an acks value; allowed values are {', '.join(ACKS_VALUES)}"
                ) from None
            if canonical not in out:
                out.append(canonical)
        return out

    @model_validator(mode="after")
    def _bounds(self) -> ControlSettings:
        for name, (lowest, highest) in LIBRDKAFKA_RANGES.items():
            lo, hi = getattr(self, name)
            if not lowest <= lo <= hi <= highest:
                raise ValueError(
                    f"{name}=({lo:g}, {hi:g}): allowed values are (min, max) with "
                    f"{lowest:g} <= min <= max <= {highest:g}"
                )
        bad = sorted(t for t, g in self.groups.items() if not t or not g)
        if bad:
            raise ValueError(
                f"groups: empty topic or group name for {bad}; allowed values are non-empty names"
            )
        return self

    def group_of(self, topic: str) -> str:
        """Return the producer group of ``topic``: :attr:`groups`' entry, else the topic name itself."""
        return self.groups.get(topic, topic)


def load_control_settings(**overrides: Any) -> ControlSettings:
    """Return :class:`ControlSettings` from ``overrides`` (None values ignored), the environment and defaults.

    Raises:
        ConfigError: a value is outside its allowed set; the message names the setting (and its
            environment variable) and the allowed values.
    """
    try:
        return ControlSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        raise config_error(exc, "invalid control settings", setting_and_env_name(ENV_PREFIX)) from None


__all__ = ["KILL_ENV", "KILL_FILE", "MODES", "ControlSettings", "Mode", "load_control_settings"]
