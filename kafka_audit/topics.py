"""Creation of the platform's own topics (audit, dead-letter, state), idempotently."""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_audit.errors import KafkaAuditError

AUDIT_TOPIC_CONFIG = {"cleanup.policy": "compact,delete", "retention.ms": str(7 * 24 * 3600 * 1000)}
"""The audit topic keeps the newest snapshot per key (compaction) for a week."""

STATE_TOPIC_CONFIG = {"cleanup.policy": "compact"}
"""The audit consumer's state topic: newest state per (group, topic, partition)."""


class TopicError(KafkaAuditError):
    """A topic could not be created or described."""


def connection_config(config: Mapping[str, object]) -> dict[str, object]:
    """Return the connection part of a librdkafka config (servers, security, SASL/SSL), copied."""
    keep = ("bootstrap.servers", "security.protocol", "client.dns.lookup", "broker.address.family")
    return {k: v for k, v in config.items() if k in keep or k.startswith(("sasl.", "ssl."))}


def ensure_topic(
    config: Mapping[str, object],
    name: str,
    partitions: int = 3,
    replication_factor: int = -1,
    topic_config: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> None:
    """Create ``name`` unless it exists.

    Args:
        config: librdkafka config; only its connection keys are used.
        name: Topic name.
        partitions: Partition count for a new topic.
        replication_factor: -1 uses the broker's ``default.replication.factor``.
        topic_config: Topic-level configs for a new topic.
        timeout_s: Admin request timeout, s.

    Raises:
        TopicError: if the broker refuses (other than "already exists").
    """
    admin = AdminClient({**connection_config(config), "log_level": 0})
    futures = admin.create_topics(
        [NewTopic(name, partitions, replication_factor, config=dict(topic_config or {}))],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    try:
        futures[name].result(timeout=timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise TopicError(f"cannot create topic {name!r}: {exc.args[0].str()}") from exc
