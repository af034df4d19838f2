"""Typed settings of the reconciliation job (pydantic-settings; env prefix ``KAFKA_AUDIT_SPARK_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from audit_record import DEFAULT_AUDIT_TOPIC, DEFAULT_DLQ_TOPIC
from kafka_audit.security import KafkaSecurity


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
        clusters: Cluster names expected to audit every topic (a silent cluster shows 100% loss).
        trigger_ms: Micro-batch trigger interval, ms.
        watermark_delay_ms: Spark watermark delay on snapshot time: how far out of order snapshots may
            arrive, ms. Snapshots older than the watermark are dropped by Spark and counted (late).
        grace_ms: A window is final once the watermark passes its end + grace, ms. Must exceed the
            producers' and audit consumers' own grace so their final snapshots are in.
        heartbeat_ms: The job writes a heartbeat to the audit topic this often so event time advances
            while producers are idle, ms (0 disables).
        shuffle_partitions: ``spark.sql.shuffle.partitions`` (state partitions; fixed per checkpoint).
        metrics_port: Prometheus exporter port on 127.0.0.1 (0: none).
        query_name: Streaming query name; also names the transactional id of the sinks.
        extra_config: librdkafka / Kafka client properties for every client, passed through; security
            properties here (librdkafka names, ``security.protocol`` and the rest) replace ``kafka``.
        kafka: TLS / SASL settings of the Kafka source, sinks and heartbeat (default: KAFKA_AUDIT_KAFKA_*).
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
    trigger_ms: int = Field(5_000, gt=0)
    watermark_delay_ms: int = Field(10_000, ge=0)
    grace_ms: int = Field(60_000, ge=0)
    heartbeat_ms: int = Field(2_000, ge=0)
    shuffle_partitions: int = Field(4, gt=0)
    metrics_port: int = Field(0, ge=0)
    query_name: str = "kafka-audit-reconciliation"
    extra_config: dict[str, str] = Field(default_factory=dict)
    kafka: KafkaSecurity = Field(default_factory=KafkaSecurity.from_env)
