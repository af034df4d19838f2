"""Typed settings of the audit consumer (pydantic-settings; env prefix ``KAFKA_AUDIT_CONSUMER_``)."""

from __future__ import annotations

import socket

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from audit_record import DEFAULT_AUDIT_TOPIC, DEFAULT_DLQ_TOPIC, DEFAULT_WINDOW_MS
from kafka_plumbing.security import KafkaSecurity

DEFAULT_STATE_TOPIC = "__kafka_audit_state"


class AuditConsumerSettings(BaseSettings):
    """How one audit consumer instance counts one cluster's topics.

    Attributes:
        cluster: Cluster name; the tier is ``cluster:<cluster>``.
        topics: Monitored topics.
        bootstrap_servers: The cluster's ``bootstrap.servers``.
        group_id: Consumer group (also the ``source`` of its snapshots, so counts survive rebalances);
            default ``kafka-audit.<cluster>``.
        instance_id: This instance's id, stable across restarts (part of the ``transactional.id``, so a
            restart fences and aborts the previous incarnation's open transaction).
        audit_topic, state_topic, dlq_topic: Output topics.
        window_ms: Window length, ms; must equal the producers'.
        grace_ms: A window closes when the partition's event-time watermark passes its end + grace, ms.
        commit_interval_ms: Snapshots, state and offsets are committed in one transaction this often, ms.
        late_retention_ms: Counters of closed windows are kept this long to count late messages, ms.
        timeliness_ms: Timeliness S per topic (paper Sec. IV-B), ms; a message whose consume time minus
            CreateTime exceeds it is stale.
        default_timeliness_ms: S for topics not in ``timeliness_ms``; None disables stale counting.
        batch_size: Messages per ``consume()`` call.
        transaction_timeout_ms: Timeout of each transactional call, ms; a call still blocked after 1.5x
            this (librdkafka #5456) gets its producer replaced and the state rewound.
        extra_config: librdkafka properties for the consumer and producer, passed through; security
            properties here (``security.protocol`` and the rest) replace ``kafka``.
        kafka: TLS / SASL settings of every client (default: ``KAFKA_AUDIT_KAFKA_*``).
    """

    model_config = SettingsConfigDict(env_prefix="KAFKA_AUDIT_CONSUMER_", frozen=True)

    cluster: str = "local"
    topics: list[str] = Field(default_factory=list)
    bootstrap_servers: str = "127.0.0.1:9092"
    group_id: str = ""
    instance_id: str = Field(default_factory=socket.gethostname)
    audit_topic: str = DEFAULT_AUDIT_TOPIC
    state_topic: str = DEFAULT_STATE_TOPIC
    dlq_topic: str = DEFAULT_DLQ_TOPIC
    window_ms: int = Field(DEFAULT_WINDOW_MS, gt=0)
    grace_ms: int = Field(30_000, ge=0)
    commit_interval_ms: int = Field(1_000, gt=0)
    late_retention_ms: int = Field(3_600_000, ge=0)
    timeliness_ms: dict[str, int] = Field(default_factory=dict)
    default_timeliness_ms: int | None = None
    batch_size: int = Field(5_000, gt=0)
    transaction_timeout_ms: int = Field(30_000, gt=0)
    extra_config: dict[str, str] = Field(default_factory=dict)
    kafka: KafkaSecurity = Field(default_factory=KafkaSecurity.from_env)

    @property
    def group(self) -> str:
        """The consumer group id (``group_id`` or ``kafka-audit.<cluster>``)."""
        return self.group_id or f"kafka-audit.{self.cluster}"

    @property
    def transactional_id(self) -> str:
        """``kafka-audit.<cluster>.<instance_id>``: stable per instance."""
        return f"kafka-audit.{self.cluster}.{self.instance_id}"
