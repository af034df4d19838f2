"""Typed settings of the audit consumer (pydantic-settings; env prefix ``KAFKA_AUDIT_CONSUMER_``)."""

from __future__ import annotations

import socket

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from audit_consumer.discovery import INTERNAL_TOPIC_PATTERNS, check_patterns
from audit_record import DEFAULT_AUDIT_TOPIC, DEFAULT_DLQ_TOPIC, DEFAULT_WINDOW_MS
from audit_record.finality import DEFAULT_DELIVERY_MARGIN_MS, DEFAULT_MAX_FINAL_WAIT_MS, Finality
from kafka_plumbing.replication import ReplicationNaming, ReplicationPolicy
from kafka_plumbing.security import KafkaSecurity

DEFAULT_STATE_TOPIC = "__kafka_audit_state"


class ReplicationNamingSettings(BaseSettings):
    """The MirrorMaker 2 naming settings that every counting tier shares (a base of settings models).

    The audit consumer (:class:`AuditConsumerSettings`) and an audited application consumer
    (:class:`audit_consumer.audited.ConsumerAuditSettings`) both count a replicated copy under its
    source topic; this base holds the three settings, their validation and the naming built from them.

    Attributes:
        replication_policy: MirrorMaker 2 replication policy of the replicated topics counted:
            ``default`` (copies named ``<alias>.<topic>``) or ``identity`` (same name).
        replication_sources: MM2 aliases of the clusters whose copies are counted (e.g. ``["A"]``): a
            topic ``A.orders`` is counted under its source topic ``orders``
            (:class:`kafka_plumbing.replication.ReplicationNaming`).
        replication_separator: MM2 ``replication.policy.separator``.

    Raises:
        ConfigError: (on construction) the three settings make no valid naming, saying why.
    """

    replication_policy: ReplicationPolicy = "default"
    replication_sources: list[str] = Field(default_factory=list)
    replication_separator: str = "."

    @model_validator(mode="after")
    def _naming(self) -> ReplicationNamingSettings:
        """Check the replication settings make a valid naming (raises ``ConfigError`` saying why)."""
        self.replication_naming  # noqa: B018 - built for its validation
        return self

    @property
    def replication_naming(self) -> ReplicationNaming:
        """How copies of replicated topics are named (``replication_*``); maps them to source topics."""
        return ReplicationNaming(
            self.replication_policy, tuple(self.replication_sources), self.replication_separator
        )


class AuditConsumerSettings(ReplicationNamingSettings):
    """How one audit consumer instance counts one cluster's topics.

    Attributes:
        cluster: Cluster name; the tier is ``cluster:<cluster>``.
        topics: Monitored topics, by name (audited whether or not a pattern matches them).
        topic_patterns: Python regular expressions (whole topic name); every topic of the cluster that
            one matches is audited, internal ones excepted (:mod:`audit_consumer.discovery`).
        exclude_topic_patterns: Topics no pattern matches (whole name); default Kafka's, kafka-audit's,
            MirrorMaker 2's and Connect's internal topics.
        discovery_interval_ms: How often the cluster's topics are listed to find new matches, ms.
        bootstrap_servers: The cluster's ``bootstrap.servers``.
        audit_bootstrap_servers: ``bootstrap.servers`` of the cluster holding the audit, state and
            dead-letter topics when it is not the counted one (None: the counted cluster), e.g. the
            audit consumer of a MirrorMaker 2 target B reporting to cluster A, where the reconciliation
            reads. Its input offsets are then kept in its state (committed in the same transaction on
            the audit cluster) instead of the consumer group: still exactly once (invariant 4).
        replication_policy: MirrorMaker 2 replication policy of the replicated topics it counts:
            ``default`` (copies named ``<alias>.<topic>``) or ``identity`` (same name).
        replication_sources: MM2 aliases of the clusters whose copies it counts (e.g. ``["A"]``): a
            topic ``A.orders`` is counted under its source topic ``orders``
            (:class:`kafka_plumbing.replication.ReplicationNaming`).
        replication_separator: MM2 ``replication.policy.separator``.
        group_id: Consumer group (also the ``source`` of its snapshots, so counts survive rebalances);
            default ``kafka-audit.<cluster>``.
        instance_id: This instance's id, stable across restarts (part of the ``transactional.id``, so a
            restart fences and aborts the previous incarnation's open transaction).
        audit_topic, state_topic, dlq_topic: Output topics.
        window_ms: Window length, ms; must equal the producers'.
        grace_ms: A window closes when the partition's event-time watermark passes its end + grace, ms;
            later when its producers may still deliver (below).
        delivery_margin_ms: Added to the largest ``message.timeout.ms`` the producers of a window
            reported (their snapshots in the audit topic): the window stays open until that much after
            its end when it exceeds the grace, ms (docs/DESIGN.md, invariant 8).
        max_final_wait_ms: Bound of that wait after a window's end, ms; 0 turns the adaptation off
            (every window closes after the grace).
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

    Example:
        >>> from audit_consumer.settings import AuditConsumerSettings
        >>> s = AuditConsumerSettings(cluster="A", topics=["orders"], bootstrap_servers="kafka-a:9092")
        >>> s.group, s.topics
        ('kafka-audit.A', ['orders'])
    """

    model_config = SettingsConfigDict(env_prefix="KAFKA_AUDIT_CONSUMER_", frozen=True)

    cluster: str = "local"
    topics: list[str] = Field(default_factory=list)
    topic_patterns: list[str] = Field(default_factory=list)
    exclude_topic_patterns: list[str] = Field(default_factory=lambda: list(INTERNAL_TOPIC_PATTERNS))
    discovery_interval_ms: int = Field(10_000, gt=0)
    bootstrap_servers: str = "127.0.0.1:9092"
    audit_bootstrap_servers: str | None = None
    group_id: str = ""
    instance_id: str = Field(default_factory=socket.gethostname)
    audit_topic: str = DEFAULT_AUDIT_TOPIC
    state_topic: str = DEFAULT_STATE_TOPIC
    dlq_topic: str = DEFAULT_DLQ_TOPIC
    window_ms: int = Field(DEFAULT_WINDOW_MS, gt=0)
    grace_ms: int = Field(30_000, ge=0)
    delivery_margin_ms: int = Field(DEFAULT_DELIVERY_MARGIN_MS, ge=0)
    max_final_wait_ms: int = Field(DEFAULT_MAX_FINAL_WAIT_MS, ge=0)
    commit_interval_ms: int = Field(1_000, gt=0)
    late_retention_ms: int = Field(3_600_000, ge=0)
    timeliness_ms: dict[str, int] = Field(default_factory=dict)
    default_timeliness_ms: int | None = None
    batch_size: int = Field(5_000, gt=0)
    transaction_timeout_ms: int = Field(30_000, gt=0)
    extra_config: dict[str, str] = Field(default_factory=dict)
    kafka: KafkaSecurity = Field(default_factory=KafkaSecurity.from_env)

    @field_validator("topic_patterns", "exclude_topic_patterns")
    @classmethod
    def _regexes(cls, patterns: list[str]) -> list[str]:
        """Each pattern must compile (raises ``ConfigError`` naming it)."""
        return check_patterns(patterns)

    @property
    def finality(self) -> Finality:
        """The rule that closes windows: grace, delivery margin and bound (no settle time)."""
        return Finality(self.grace_ms, self.delivery_margin_ms, self.max_final_wait_ms)

    @property
    def external_offsets(self) -> bool:
        """True when the audit topics live on another cluster: input offsets are kept in the state."""
        return self.audit_bootstrap_servers not in (None, "", self.bootstrap_servers)

    @property
    def group(self) -> str:
        """The consumer group id (``group_id`` or ``kafka-audit.<cluster>``)."""
        return self.group_id or f"kafka-audit.{self.cluster}"

    @property
    def transactional_id(self) -> str:
        """``kafka-audit.<cluster>.<instance_id>``: stable per instance."""
        return f"kafka-audit.{self.cluster}.{self.instance_id}"
