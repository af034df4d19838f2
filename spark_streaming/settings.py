"""Typed settings of the reconciliation job (pydantic-settings; env prefix ``KAFKA_AUDIT_SPARK_``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from audit_record import DEFAULT_AUDIT_TOPIC, DEFAULT_DLQ_TOPIC
from audit_record.finality import DEFAULT_DELIVERY_MARGIN_MS, DEFAULT_MAX_FINAL_WAIT_MS, Finality
from kafka_plumbing.security import KafkaSecurity

StreamType = Literal["default", "social", "weblog", "game"]
"""Stream types with Eq. 2 weight presets (paper Table II; :meth:`predictor.kpi.Weights.preset`)."""

DEFAULT_GAMMA_TARGET = 0.9
"""gamma target when neither the topic, the job nor the alert settings name one (see SparkJobSettings)."""


class TopicKpi(BaseModel):
    """Per-topic KPI settings of the live comparison (unset fields fall back to the job's).

    Attributes:
        stream_type: Eq. 2 weights preset: ``default``, ``social``, ``weblog`` or ``game``.
        gamma_target: gamma the topic must reach (0-1]; below it the window gets a suggestion.
        message_size_bytes: Message size M used when the producers report no bytes, bytes.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    stream_type: StreamType | None = None
    gamma_target: float | None = Field(None, gt=0.0, le=1.0)
    message_size_bytes: float | None = Field(None, gt=0.0)


class SparkJobSettings(BaseSettings):
    """Where the job reads and writes, and its event-time rules.

    Attributes:
        bootstrap_servers: Kafka ``bootstrap.servers``.
        master: Spark master URL (``local[2]``, ``spark://host:7077``).
        audit_topic: Input: producer and cluster snapshots.
        results_topic: Output: one Avro WindowResult per (topic, window, tier), compacted.
        dlq_topic: Malformed audit records, with their bytes and the reason.
        commits_topic: Compacted marker topic: last micro-batch id written to Kafka (exactly-once sinks).
        checkpoint_dir: Spark checkpoint (offsets, state); reuse it to resume after a crash.
        parquet_dir: Parquet results, partitioned by ``date=YYYY-MM-DD``.
        clusters: Cluster names expected to audit every topic (a silent cluster shows 100% loss), in
            data-flow order (``["A", "B"]`` when MirrorMaker 2 copies A to B): the default tier order.
        tier_order: The tier order as ``fnmatch`` patterns of tier names, e.g. ``["producer",
            "cluster:A", "cluster:B", "consumer:*"]`` (``KAFKA_AUDIT_SPARK_TIER_ORDER`` as JSON); each tier
            is compared with the one before it (``docs/DESIGN.md``, "Tiers"). Empty: producer, the
            ``clusters`` in order, other cluster tiers, then ``consumer:*``.
        trigger_ms: Micro-batch trigger interval, ms.
        watermark_delay_ms: Spark watermark delay on snapshot time: how far out of order snapshots may
            arrive, ms. Snapshots older than the watermark are dropped by Spark and counted (late).
        grace_ms: A window is final once the watermark passes its end + grace, ms. Must exceed the
            producers' and audit consumers' own grace so their final snapshots are in. Longer for a
            window whose producers may still deliver (docs/DESIGN.md, invariant 8): end + the largest
            ``message.timeout.ms`` of its producers + ``delivery_margin_ms`` (at most
            ``max_final_wait_ms``) + ``final_settle_ms``.
        delivery_margin_ms: Added to the producers' ``message.timeout.ms``, ms; the audit consumers must
            use the same (``KAFKA_AUDIT_CONSUMER_DELIVERY_MARGIN_MS``).
        max_final_wait_ms: Bound of the delivery wait, ms (as the audit consumers'); 0 turns the
            adaptation off: every window is final after the grace.
        final_settle_ms: After the delivery wait, how long the audit consumers' final snapshots may take
            to reach the job (their grace and this job's grace usually differ by this much), ms.
        tier_final_wait_ms: When that wait is over, how much longer a window waits while a producer or a
            cluster tier has not closed it (a snapshot of the window that is not final: a producer still
            waiting for delivery reports, an audit consumer restarting or catching up), ms. The window is
            final as soon as every producer and cluster tier closed it, at the latest this long after the
            wait; 0: final when the wait is over (docs/DESIGN.md, invariant 8).
        heartbeat_ms: The job writes a heartbeat to the audit topic this often so event time advances
            while producers are idle, ms (0 disables).
        shuffle_partitions: ``spark.sql.shuffle.partitions`` (state partitions; fixed per checkpoint).
        metrics_port: Prometheus exporter port (0: none), on ``bind_address``.
        driver_host: Address Spark executors reach the driver at (``spark.driver.host``).
        bind_address: Address the driver and the exporter listen on: 127.0.0.1 locally; 0.0.0.0 in a
            container (docker-compose sets it with ``driver_host`` = the service name).
        query_name: Streaming query name; also names the transactional id of the sinks.
        extra_config: librdkafka / Kafka client properties for every client, passed through; security
            properties here (librdkafka names, ``security.protocol`` and the rest) replace ``kafka``.
        kafka: TLS / SASL settings of the Kafka source, sinks and heartbeat (default: KAFKA_AUDIT_KAFKA_*).
        predict: Add the live comparison to final windows (predicted P_l, P_d, gamma, suggestion;
            :mod:`spark_streaming.predict`).
        model_dir: Predictor model directory (None: the shipped default model).
        suggest_producers: Suggestions may change the number of producers (``suggested_producers``, a
            hint the application must follow); False when it cannot scale (only librdkafka properties).
        stream_type: Eq. 2 weights preset of topics without their own (``default``, ``social``,
            ``weblog``, ``game``).
        gamma_target: gamma target of topics without their own, (0, 1]. None: the alert settings'
            ``gamma_target`` (``KAFKA_AUDIT_ALERTS_GAMMA_TARGET``) if the job alerts, else 0.9.
        message_size_bytes: Message size M when the producers report no bytes, bytes.
        topic_kpi: Per-topic overrides, topic -> :class:`TopicKpi`
            (``KAFKA_AUDIT_SPARK_TOPIC_KPI='{"orders": {"stream_type": "weblog", "gamma_target": 0.95}}'``).
        training_dir: Training store: every eligible final window, Parquet by ``date=YYYY-MM-DD``
            (:mod:`predictor.training_store`). Default: ``training`` beside the checkpoint directory.
        model_registry_dir: Versioned models, the champion and the decisions
            (:mod:`predictor.registry`); the job serves its champion, read at every micro-batch.
            Default: ``models`` beside the checkpoint directory.
        training_min_messages: A final window with fewer messages sent is not stored for training.
        retrain: Retrain in the background (``kafka-audit predictor retrain --registry ...``, one
            process at a time) every ``retrain_every_windows`` new stored windows, or every
            ``retrain_every_minutes`` once ``retrain_min_windows`` new ones are stored.
        retrain_every_windows: New stored windows that start a retraining.
        retrain_every_minutes: Minutes after which a retraining starts with at least
            ``retrain_min_windows`` new stored windows.
        retrain_min_windows: See ``retrain_every_minutes``; also the retraining's ``--min-windows``.
        retrain_data: Base data of the retraining beside the paper's
            ``predictor/base_data/wu2020/experiments.csv`` (testbed grid CSVs, same columns).
        calibration_windows: Rolling window of the live calibration check, final windows per model
            version.
        calibration_max_mae: A model version is calibrated for this deployment (``model_calibrated``;
            drift alerts fire only then) while its rolling live MAE(P_l) is below this, with at least
            10 windows seen.

    Example:
        >>> from spark_streaming.settings import SparkJobSettings
        >>> s = SparkJobSettings(bootstrap_servers="kafka-a:9092", master="local[4]")
        >>> s.bootstrap_servers, s.master
        ('kafka-a:9092', 'local[4]')
    """

    model_config = SettingsConfigDict(env_prefix="KAFKA_AUDIT_SPARK_", frozen=True)

    bootstrap_servers: str = "127.0.0.1:9092"
    master: str = "local[2]"
    audit_topic: str = DEFAULT_AUDIT_TOPIC
    results_topic: str = "__kafka_audit_results"
    dlq_topic: str = DEFAULT_DLQ_TOPIC
    commits_topic: str = "__kafka_audit_results_commits"
    checkpoint_dir: Path = Path("var/spark/checkpoint")
    parquet_dir: Path = Path("var/spark/results")
    clusters: list[str] = Field(default_factory=lambda: ["local"])
    tier_order: list[str] = Field(default_factory=list)
    trigger_ms: int = Field(5_000, gt=0)
    watermark_delay_ms: int = Field(10_000, ge=0)
    grace_ms: int = Field(60_000, ge=0)
    delivery_margin_ms: int = Field(DEFAULT_DELIVERY_MARGIN_MS, ge=0)
    max_final_wait_ms: int = Field(DEFAULT_MAX_FINAL_WAIT_MS, ge=0)
    final_settle_ms: int = Field(30_000, ge=0)
    tier_final_wait_ms: int = Field(120_000, ge=0)
    heartbeat_ms: int = Field(2_000, ge=0)
    shuffle_partitions: int = Field(4, gt=0)
    metrics_port: int = Field(0, ge=0)
    driver_host: str = "127.0.0.1"
    bind_address: str = "127.0.0.1"
    query_name: str = "kafka-audit-reconciliation"
    extra_config: dict[str, str] = Field(default_factory=dict)
    kafka: KafkaSecurity = Field(default_factory=KafkaSecurity.from_env)
    predict: bool = True
    model_dir: Path | None = None
    suggest_producers: bool = True
    stream_type: StreamType = "default"
    gamma_target: float | None = Field(None, gt=0.0, le=1.0)
    message_size_bytes: float = Field(1_000.0, gt=0.0)
    topic_kpi: dict[str, TopicKpi] = Field(default_factory=dict)
    training_dir: Path = Path("var/spark/training")
    model_registry_dir: Path = Path("var/spark/models")
    training_min_messages: int = Field(500, ge=1)
    retrain: bool = True
    retrain_every_windows: int = Field(200, ge=1)
    retrain_every_minutes: float = Field(60.0, gt=0.0)
    retrain_min_windows: int = Field(50, ge=3)
    retrain_data: list[Path] = Field(default_factory=list)
    calibration_windows: int = Field(30, ge=1)
    calibration_max_mae: float = Field(0.05, gt=0.0)

    @property
    def finality(self) -> Finality:
        """The rule that makes windows final: grace, delivery margin, bound and settle time."""
        return Finality(self.grace_ms, self.delivery_margin_ms, self.max_final_wait_ms, self.final_settle_ms)

    @model_validator(mode="before")
    @classmethod
    def _beside_the_checkpoint(cls, data: Any) -> Any:
        """Default ``training_dir`` and ``model_registry_dir`` to siblings of ``checkpoint_dir``."""
        if not isinstance(data, dict):
            return data
        checkpoint = Path(data.get("checkpoint_dir") or cls.model_fields["checkpoint_dir"].default)
        out = dict(data)
        if out.get("training_dir") is None:
            out["training_dir"] = checkpoint.parent / "training"
        if out.get("model_registry_dir") is None:
            out["model_registry_dir"] = checkpoint.parent / "models"
        return out
