"""Settings of ``kafka-audit up``: defaults < config file (TOML or YAML) < environment < command line.

Environment variables use the prefix ``KAFKA_AUDIT_UP_`` (``KAFKA_AUDIT_UP_WINDOW_MS=10000``);
``producer_config`` holds librdkafka properties passed through to the load producers. The ``[kafka]``
section (:class:`~kafka_plumbing.security.KafkaSecurity`: TLS, SASL) secures every client; what it leaves
out comes from ``KAFKA_AUDIT_KAFKA_*`` (keep the password there, not in the file). The ``[alerts]``
section (:class:`~alerts.settings.AlertSettings`: ``alertmanager_url``, ``webhook_url``,
``gamma_target``, rule thresholds) works the same way with ``KAFKA_AUDIT_ALERTS_*``, and so does the
``[control]`` section (:class:`~control_loop.settings.ControlSettings`: ``mode``, guardrails, ``groups``)
with ``KAFKA_AUDIT_CONTROL_*``, and the ``[slo]`` section (:class:`~alerts.slo_settings.SloSettings`:
completeness SLOs per topic pattern and tier, burn-rate alerts) with ``KAFKA_AUDIT_SLO_*``;
``[topic_kpi.<topic>]``
sections set a topic's stream type and gamma target (:class:`~spark_streaming.settings.TopicKpi`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from alerts.settings import AlertSettings, load_settings
from alerts.slo_settings import SloSettings, load_slo_settings
from audit_consumer.discovery import check_patterns
from audit_record.finality import DEFAULT_DELIVERY_MARGIN_MS, DEFAULT_MAX_FINAL_WAIT_MS, Finality
from control_loop.settings import ControlSettings, load_control_settings
from kafka_plumbing.errors import ConfigError, config_error
from kafka_plumbing.security import KafkaSecurity
from spark_streaming.settings import TopicKpi

SCENARIOS = ("social", "weblog", "game")


class UpSettings(BaseSettings):
    """Everything ``kafka-audit up`` runs.

    Attributes:
        bootstrap_servers: An existing cluster; None starts the local one (``brokers`` nodes in ``data_dir``).
        cluster: Name of the audited cluster (tier ``cluster:<name>``).
        topics: Monitored topics by name, created if missing (the scenario's topic is added).
        topic_patterns: Python regular expressions (whole topic name; ``--topic``): every topic of the
            cluster one matches is audited, internal ones excepted, and new ones are found every
            ``discovery_interval_ms`` (monitor mode: ``up -b SERVERS --topic REGEX``).
        discovery_interval_ms: How often the cluster's topics are listed for new matches, ms.
        window_ms: Audit window, ms. The *_grace_ms settings: see each component.
        delivery_margin_ms, max_final_wait_ms: Adaptive finality of the audit consumer and the Spark job
            (docs/DESIGN.md, invariant 8): a window waits for the largest ``message.timeout.ms`` of its
            producers + the margin (at most ``max_final_wait_ms``; 0: the grace alone) when that is
            longer than the grace. The job's settle time is ``spark_grace_ms - consumer_grace_ms``.
        master: Spark master. trigger_ms: micro-batch trigger, ms. metrics_port: Prometheus port (0 = none).
        scenario, rate, duration_s: Optional audited load: profile, messages/s, seconds.
        producer_config: librdkafka properties for the load producers.
        kafka: TLS / SASL settings of every Kafka client (``[kafka]`` section; default KAFKA_AUDIT_KAFKA_*).
        alerts: Alert rules and sinks (``[alerts]`` section; default KAFKA_AUDIT_ALERTS_*). Its
            ``gamma_target`` (default 0.9) is also the target the job writes into every final window.
        control: The control loop (``[control]`` section; default KAFKA_AUDIT_CONTROL_*): ``mode`` off,
            advise (default) or apply, guardrails, topic -> producer group.
        slo: Service-level objectives (``[slo]`` section; default KAFKA_AUDIT_SLO_*, else one
            completeness SLO of 99.99% over 30 days on every topic): ``kafka-audit slo rules --config``
            turns them into Prometheus rules.
        topic_kpi: Per-topic stream type / gamma target / message size (``[topic_kpi."<topic>"]``); the
            scenario's topic defaults to the scenario's stream type (Table II weights).
        model_registry_dir, retrain, retrain_every_windows, retrain_every_minutes, training_min_messages,
            calibration_max_mae: The model lifecycle of the Spark job (see
            :class:`~spark_streaming.settings.SparkJobSettings`); None: the job's setting
            (``KAFKA_AUDIT_SPARK_*``, else its default: registry ``<data_dir>/spark/models``, training
            store ``<data_dir>/spark/training``, retraining on every 200 new windows or 60 minutes).
    """

    model_config = SettingsConfigDict(env_prefix="KAFKA_AUDIT_UP_", frozen=True)
    config_file: ClassVar[Path | None] = None

    bootstrap_servers: str | None = None
    brokers: int = 1
    data_dir: Path = Path("var/up")
    cluster: str = "local"
    topics: list[str] = Field(default_factory=list)
    topic_patterns: list[str] = Field(default_factory=list)
    discovery_interval_ms: int = Field(10_000, gt=0)
    window_ms: int = Field(60_000, gt=0)
    producer_grace_ms: int = Field(5_000, ge=0)
    consumer_grace_ms: int = Field(10_000, ge=0)
    spark_grace_ms: int = Field(30_000, ge=0)
    watermark_delay_ms: int = Field(5_000, ge=0)
    delivery_margin_ms: int = Field(DEFAULT_DELIVERY_MARGIN_MS, ge=0)
    max_final_wait_ms: int = Field(DEFAULT_MAX_FINAL_WAIT_MS, ge=0)
    master: str = "local[2]"
    trigger_ms: int = Field(5_000, gt=0)
    metrics_port: int = Field(9464, ge=0)
    scenario: str | None = None
    rate: float = 500.0
    duration_s: float | None = None
    producer_config: dict[str, str] = Field(default_factory=dict)
    kafka: KafkaSecurity = Field(default_factory=KafkaSecurity.from_env)
    alerts: AlertSettings = Field(default_factory=load_settings)
    control: ControlSettings = Field(default_factory=load_control_settings)
    slo: SloSettings = Field(default_factory=load_slo_settings)
    topic_kpi: dict[str, TopicKpi] = Field(default_factory=dict)
    model_registry_dir: Path | None = None
    retrain: bool | None = None
    retrain_every_windows: int | None = Field(None, ge=1)
    retrain_every_minutes: float | None = Field(None, gt=0.0)
    training_min_messages: int | None = Field(None, ge=1)
    calibration_max_mae: float | None = Field(None, gt=0.0)

    def model_post_init(self, context: Any) -> None:
        """Check values that pydantic's types cannot.

        Raises:
            ConfigError: naming the key and the allowed values.
        """
        if self.scenario is not None and self.scenario not in SCENARIOS:
            raise ConfigError(f"scenario={self.scenario!r}: allowed values are {', '.join(SCENARIOS)}")
        if self.brokers not in (1, 3):
            raise ConfigError(f"brokers={self.brokers}: allowed values are 1, 3")
        check_patterns(self.topic_patterns)
        if self.bootstrap_servers is None and self.kafka.security_protocol != "PLAINTEXT":
            raise ConfigError(
                f"kafka.security_protocol={self.kafka.security_protocol} needs bootstrap_servers: "
                "the local cluster `up` starts is PLAINTEXT (allowed without bootstrap_servers: PLAINTEXT)"
            )

    @property
    def monitor(self) -> bool:
        """True in monitor mode: no synthetic load, ``up`` audits what the cluster carries until stopped."""
        return self.scenario is None

    @property
    def consumer_finality(self) -> Finality:
        """The audit consumer's finality rule (grace, margin, bound)."""
        return Finality(self.consumer_grace_ms, self.delivery_margin_ms, self.max_final_wait_ms)

    @property
    def spark_finality(self) -> Finality:
        """The Spark job's finality rule: its grace, the same margin and bound, settle = the graces' gap."""
        return Finality(
            self.spark_grace_ms,
            self.delivery_margin_ms,
            self.max_final_wait_ms,
            max(0, self.spark_grace_ms - self.consumer_grace_ms),
        )

    @property
    def scenario_topic(self) -> str | None:
        """Topic the scenario's load goes to: ``audit.<scenario>``."""
        return f"audit.{self.scenario}" if self.scenario else None

    @property
    def kpi(self) -> dict[str, TopicKpi]:
        """``topic_kpi`` with the scenario's topic defaulting to the scenario's stream type."""
        out = dict(self.topic_kpi)
        if self.scenario_topic is not None:
            own = out.get(self.scenario_topic, TopicKpi())
            if own.stream_type is None:
                out[self.scenario_topic] = own.model_copy(update={"stream_type": self.scenario})
        return out

    @property
    def model_lifecycle(self) -> dict[str, Any]:
        """The model-lifecycle settings given (not None), as ``SparkJobSettings`` keywords."""
        names = (
            "model_registry_dir",
            "retrain",
            "retrain_every_windows",
            "retrain_every_minutes",
            "training_min_messages",
            "calibration_max_mae",
        )
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    @property
    def all_topics(self) -> list[str]:
        """Monitored topics including the scenario's."""
        extra = (
            [self.scenario_topic] if self.scenario_topic and self.scenario_topic not in self.topics else []
        )
        return [*self.topics, *extra]

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Command line (init) > environment > config file > defaults."""
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = cls.config_file
        if path is not None:
            if path.suffix in (".yaml", ".yml"):
                sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
            elif path.suffix == ".toml":
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
            else:
                raise ConfigError(f"config file {path}: allowed formats are .toml, .yaml, .yml")
        return tuple(sources)


def load_up_settings(
    config_file: Path | None,
    alerts: dict[str, Any] | None = None,
    control: dict[str, Any] | None = None,
    **overrides: Any,
) -> UpSettings:
    """Build settings from a config file (optional), the environment and non-None ``overrides``.

    Args:
        config_file: TOML or YAML file with UpSettings keys.
        alerts: Alert settings from the command line (``alertmanager_url``, ``webhook_url``,
            ``gamma_target``...); non-None values win over the ``[alerts]`` section and the environment.
        control: Control-loop settings from the command line (``mode``); non-None values win over the
            ``[control]`` section and the environment.
        overrides: UpSettings keys from the command line.

    Raises:
        ConfigError: for a missing file or an invalid value (naming the key and what is allowed).
    """
    if config_file is not None and not config_file.exists():
        raise ConfigError(f"config file {config_file} does not exist")
    UpSettings.config_file = config_file
    try:
        settings = UpSettings(**{k: v for k, v in overrides.items() if v is not None})
        update: dict[str, Any] = {}
        flags = {k: v for k, v in (alerts or {}).items() if v is not None}
        if flags:
            update["alerts"] = load_settings(**{**settings.alerts.model_dump(exclude_unset=True), **flags})
        control_flags = {k: v for k, v in (control or {}).items() if v is not None}
        if control_flags:
            update["control"] = load_control_settings(
                **{**settings.control.model_dump(exclude_unset=True), **control_flags}
            )
        return settings.model_copy(update=update) if update else settings
    except ValidationError as exc:
        raise config_error(
            exc, "invalid kafka-audit up settings", lambda loc: ".".join(map(str, loc)) or "settings"
        ) from None
    finally:
        UpSettings.config_file = None
