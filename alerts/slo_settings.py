r"""Service-level objectives of completeness and freshness per topic pattern and tier (pydantic-settings).

An SLO states reliability as a target ratio of good events over a compliance period (Google SRE
Workbook, ch. 2 "Implementing SLOs"); the error budget is ``1 - objective`` of the period's events, and
the burn rate is how fast it is spent (error ratio / (1 - objective); 1 spends exactly the budget over
the period). Alerts page or open a ticket when a pair of windows both burn faster than a factor
(Workbook ch. 5 "Alerting on SLOs", multi-window multi-burn-rate alerts); ``alerts.slo_rules`` writes
them as Prometheus rules.

* **Completeness** ("99.99% of audited messages reach tier T"): events = messages sent by audited
  producers (``kafka_audit_messages_sent_total``), bad events = messages the tier does not hold
  (``kafka_audit_messages_lost_total``, sent - unique, final windows only).
* **Freshness** ("99% of messages held by tier T within S seconds of their CreateTime"): events =
  messages the tier held whose freshness it measured, bad events = those held later than S
  (``kafka_audit_freshness_messages_total``, the tiers' freshness histograms of the audit snapshots,
  :mod:`audit_record.freshness`). S must be one of the histogram's bucket bounds, so both are exact
  counts (never interpolated): 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600, 1800 or 3600 s.

Sources, highest first: constructor arguments (the command line), the environment
(``KAFKA_AUDIT_SLO_*``, lists as JSON, e.g. ``KAFKA_AUDIT_SLO_COMPLETENESS='[{"topic_pattern":
"orders\\..*", "objective": 0.999}]'``), the ``[slo]`` section of a TOML or YAML config file (the one
``kafka-audit up --config`` reads), the defaults: one completeness SLO of 99.99% over 30 days on every
topic in the audited clusters' tiers (``cluster:*``), so monitor mode has SLOs without configuration.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from alerts.event import Severity
from audit_record.freshness import threshold_bound_ms
from kafka_plumbing.errors import ConfigError, config_error, setting_and_env_name

ENV_PREFIX = "KAFKA_AUDIT_SLO_"
CONFIG_SECTION = "slo"

DURATION_UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}
"""Units of an SLO duration (Prometheus duration syntax, one unit: ``30s``, ``5m``, ``1h``, ``3d``, ``4w``)
-> s. Seconds are for scaled-down windows (tests, demos): the Workbook's windows are minutes and up."""
_DURATION = re.compile(r"^([1-9][0-9]*)([smhdw])$")
_RE2_UNSUPPORTED = re.compile(r"\(\?[=!<]|\\[1-9]")
"""Python regex constructs Prometheus' RE2 lacks (look-around, back-references)."""

Urgency = Literal["page", "ticket"]


def duration_seconds(text: str) -> int:
    """Return the seconds of a duration like ``5m``, ``1h``, ``3d``, ``4w``.

    Raises:
        ValueError: naming the allowed form (an integer > 0 and one unit of m, h, d, w).
    """
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration: allowed: an integer > 0 followed by one unit of "
            f"{', '.join(DURATION_UNITS)} (e.g. 5m, 1h, 3d)"
        )
    return int(match.group(1)) * DURATION_UNITS[match.group(2)]


def _pattern(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a regular expression: {exc}") from None
    if _RE2_UNSUPPORTED.search(value):
        raise ValueError(
            f"{value!r}: look-around and back-references are not allowed (Prometheus' RE2 lacks them)"
        )
    return value


def _duration(value: str) -> str:
    duration_seconds(value)
    return value


class BurnRateAlert(BaseModel):
    """One multi-window burn-rate alert: fire while both windows spend the budget faster than ``factor``.

    Attributes:
        long_window: The window that makes the alert significant (``1h``).
        short_window: The window that makes it reset soon after the burn stops (``5m``; Workbook: 1/12
            of the long one).
        factor: Burn rate threshold (error ratio / error budget); 14.4 over 1 h spends 2% of a 30-day
            budget.
        urgency: ``page`` (subject to the low-traffic guard) or ``ticket``.
        severity: The alert's ``severity`` label (Alertmanager routing).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    long_window: str
    short_window: str
    factor: float = Field(gt=0.0)
    urgency: Urgency = "page"
    severity: Severity = "critical"

    _long = field_validator("long_window", "short_window")(_duration)

    @model_validator(mode="after")
    def _short_below_long(self) -> BurnRateAlert:
        if duration_seconds(self.short_window) >= duration_seconds(self.long_window):
            raise ValueError(
                f"short_window {self.short_window} must be shorter than long_window {self.long_window}"
            )
        return self


WORKBOOK_ALERTS = (
    BurnRateAlert(long_window="1h", short_window="5m", factor=14.4, urgency="page", severity="critical"),
    BurnRateAlert(long_window="6h", short_window="30m", factor=6.0, urgency="page", severity="critical"),
    BurnRateAlert(long_window="3d", short_window="6h", factor=1.0, urgency="ticket", severity="warning"),
)
"""The SRE Workbook's recommended pairs for a 30-day SLO (ch. 5, "Multiwindow, Multi-Burn-Rate Alerts")."""


class _Slo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_.:-]+$")
    topic_pattern: str = ".*"
    tier_pattern: str = "cluster:.*"
    period: str = "30d"

    _patterns = field_validator("topic_pattern", "tier_pattern")(_pattern)
    _period = field_validator("period")(_duration)


class CompletenessSlo(_Slo):
    """Completeness: ``objective`` of the messages audited producers sent reach the tier.

    Attributes:
        name: The ``slo`` label of its series and alerts (default ``completeness-<index>``).
        topic_pattern: Topics (Python regular expression on the whole name, RE2-compatible: Prometheus
            matches the ``topic`` label with it).
        tier_pattern: Tiers, the same way (``cluster:.*``: the audited clusters; ``consumer:.*``...).
        objective: Target ratio of good events, 0 < objective < 1 (0.9999: 99.99%).
        period: Compliance period the budget is counted over (default 30d).
    """

    objective: float = Field(0.9999, gt=0.0, lt=1.0)

    @property
    def error_budget(self) -> float:
        """Allowed ratio of bad events, ``1 - objective``."""
        return 1.0 - self.objective


class FreshnessSlo(_Slo):
    """Freshness: ``objective`` of the messages the tier holds got there within ``threshold_s`` of CreateTime.

    Measured by the tiers' freshness histograms (:mod:`audit_record.freshness`): the tier's consume time
    minus CreateTime per message, counted per fixed bucket.

    Attributes:
        name, topic_pattern, tier_pattern, period: As :class:`CompletenessSlo`.
        objective: Target ratio of fresh messages, 0 < objective < 1 (0.99).
        threshold_s: Freshness bound S (the tier held the message - its CreateTime), s: one of the
            histogram's bounds (:data:`audit_record.freshness.BOUNDS_MS` in seconds: 0.1, 0.25, 0.5, 1,
            2.5, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600), so "within S" is an exact count.
    """

    objective: float = Field(0.99, gt=0.0, lt=1.0)
    threshold_s: float = Field(60.0, gt=0.0)

    @field_validator("threshold_s")
    @classmethod
    def _a_bound(cls, value: float) -> float:
        threshold_bound_ms(value)  # ValueError naming the allowed values
        return value

    @property
    def threshold_ms(self) -> int:
        """``threshold_s`` in ms: the freshness histogram's bound it names."""
        return threshold_bound_ms(self.threshold_s)

    @property
    def error_budget(self) -> float:
        """Allowed ratio of bad events (messages held later than S), ``1 - objective``."""
        return 1.0 - self.objective


def _default_completeness() -> list[CompletenessSlo]:
    return [CompletenessSlo(name="completeness")]


def _default_alerts() -> list[BurnRateAlert]:
    return list(WORKBOOK_ALERTS)


class _FileSection(InitSettingsSource):
    """The ``[slo]`` section of a config file, below the environment."""


class SloSettings(BaseSettings):
    """The SLOs and their burn-rate alerts.

    Attributes:
        completeness: Completeness SLOs (default: one, ``completeness``, 99.99% over 30 days of every
            topic on the ``cluster:*`` tiers).
        freshness: Freshness SLOs (default none).
        burn_rate_alerts: The window pairs alerted on, for every SLO (default: the Workbook's 14.4x over
            1h and 5m and 6x over 6h and 30m page; 1x over 3d and 6h opens a ticket).
        low_traffic_min_events: A page needs at least this many events (messages sent) in its long
            window; None: per alert, the fewest events in which one bad event alone stays below the
            burn factor, ``ceil(1 / (factor * (1 - objective)))`` (695 for 14.4x at 99.99%). Tickets are
            not guarded: low-traffic topics open tickets, not pages (Workbook ch. 5, "Low-traffic
            services").
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")
    config_file: ClassVar[Path | None] = None

    completeness: list[CompletenessSlo] = Field(default_factory=_default_completeness)
    freshness: list[FreshnessSlo] = Field(default_factory=list)
    burn_rate_alerts: list[BurnRateAlert] = Field(default_factory=_default_alerts, min_length=1)
    low_traffic_min_events: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _unique_names(self) -> SloSettings:
        names = [s.name for s in self.slos() if s.name is not None]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"SLO names must be unique; repeated: {', '.join(twice)}")
        return self

    def slos(self) -> list[CompletenessSlo | FreshnessSlo]:
        """Return every SLO with its name filled in (``completeness-<i>``, ``freshness-<i>`` if unnamed)."""
        out: list[CompletenessSlo | FreshnessSlo] = []
        for kind, slos in (("completeness", self.completeness), ("freshness", self.freshness)):
            for i, slo in enumerate(slos):
                out.append(slo if slo.name else slo.model_copy(update={"name": f"{kind}-{i}"}))
        return out

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Command line (init) > environment > the config file's ``[slo]`` section > defaults."""
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if cls.config_file is not None:
            sources.append(_FileSection(settings_cls, read_section(cls.config_file)))
        return tuple(sources)


def read_section(path: Path) -> dict[str, Any]:
    """Return the ``[slo]`` section of a TOML or YAML config file (empty if it has none).

    Raises:
        ConfigError: the file is missing, not TOML/YAML by its suffix, or unreadable as such.
    """
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    try:
        if path.suffix == ".toml":
            import tomllib

            doc = tomllib.loads(path.read_text())
        elif path.suffix in (".yaml", ".yml"):
            doc = yaml.safe_load(path.read_text()) or {}
        else:
            raise ConfigError(f"config file {path}: allowed formats are .toml, .yaml, .yml")
    except (ValueError, yaml.YAMLError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"config file {path}: {exc}") from None
    section = doc.get(CONFIG_SECTION, {}) if isinstance(doc, dict) else {}
    if not isinstance(section, dict):
        raise ConfigError(f"config file {path}: [{CONFIG_SECTION}] must be a table of SLO settings")
    return section


def load_slo_settings(config_file: Path | None = None, **overrides: Any) -> SloSettings:
    """Return :class:`SloSettings` from ``overrides`` (None ignored), the environment, the file, defaults.

    Raises:
        ConfigError: an invalid value; the message names the key (with its environment variable) and
            the allowed values, e.g. ``completeness (KAFKA_AUDIT_SLO_COMPLETENESS): 0: objective:
            Input should be less than 1``.
    """
    SloSettings.config_file = config_file
    try:
        return SloSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        name = setting_and_env_name(ENV_PREFIX)

        def key(loc: tuple[int | str, ...]) -> str:
            return f"{name(loc[:1])}: {'.'.join(map(str, loc[1:]))}" if len(loc) > 1 else name(loc)

        raise config_error(exc, "invalid SLO settings", key) from None
    finally:
        SloSettings.config_file = None
