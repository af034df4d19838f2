"""The platform's own topics (audit, dead-letter, state): created idempotently, read to their end."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.security import client_config, wait_for_cluster

log = logging.getLogger(__name__)

AUDIT_TOPIC_CONFIG = {"cleanup.policy": "compact,delete", "retention.ms": str(7 * 24 * 3600 * 1000)}
"""The audit topic keeps the newest snapshot per key (compaction) for a week."""

CONTROL_TOPIC_CONFIG = {"cleanup.policy": "compact"}
"""The control topic (``audit_record.control_record``): newest desired configuration per producer group."""

STATE_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Largest state record (one (group, topic, partition)'s counters and sequence sets), bytes.

A partition's sequence sets outgrow Kafka's default 1 MB (broker ``message.max.bytes``, librdkafka
``message.max.bytes``, Java ``max.request.size``) with keyed traffic: a key spreads each producer's sequences
over the partitions, so a partition holds about every N-th sequence of N partitions and its Roaring bitmap
takes 8 KiB for every 65,536 sequences. Four producers at 50,000 messages/s over 12 partitions make one
partition's state 1.5 MB per open 60-s window (measured with ``encode_state``). 16 MiB holds ten times that
and stays below the Java clients' ``buffer.memory`` (32 MiB), which must hold a whole record.
"""

STATE_TOPIC_MAX_MESSAGE_BYTES = STATE_MAX_MESSAGE_BYTES + 128 * 1024
"""``max.message.bytes`` of the topics the state writers produce to (state and dead-letter topics), bytes: a
record batch of one largest state with its overhead, above the writers' request limit
(:data:`STATE_PRODUCER_LIMITS`), so that what a writer sends the topic takes."""

STATE_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "max.message.bytes": str(STATE_TOPIC_MAX_MESSAGE_BYTES),
    "segment.bytes": str(128 * 1024 * 1024),
}
"""The audit consumer's state topic: newest state per (group, topic, partition). Segments of 128 MiB (not the
broker's 1 GiB) so that compaction, which never touches the active segment, keeps what a new member reads to
the end small although states are rewritten every second."""

DLQ_TOPIC_CONFIG = {"max.message.bytes": str(STATE_TOPIC_MAX_MESSAGE_BYTES)}
"""The dead-letter topic: a dead letter copies its record, and goes through the state writers' producers."""

LARGE_RECORD_MINIMUMS = {"max.message.bytes": STATE_TOPIC_MAX_MESSAGE_BYTES}
"""What :func:`ensure_topic` raises an existing state or dead-letter topic to (one created before)."""

STATE_PRODUCER_LIMITS = {"message.max.bytes": STATE_MAX_MESSAGE_BYTES + 64 * 1024}
"""librdkafka settings of a producer that writes states: its request may carry one of
:data:`STATE_MAX_MESSAGE_BYTES` (librdkafka's ``message.max.bytes`` is the request's limit; the JVM
interceptors' audit producer sets ``max.request.size`` alike). Put first in a configuration: an operator's own
``message.max.bytes`` wins."""

STATE_KEY_PLACEMENT = {"partitioner": "consistent_random"}
"""librdkafka settings of a producer that writes states: a state key goes where librdkafka's default
partitioner puts it (CRC-32 of the key mod partitions; ``audit_record/partition_vectors.json``), as the JVM
interceptors' ``ConsistentRandomPartitioner`` does, so that a key's records share one log, whose order is what
"newest" means. Put last in a configuration: an operator's own ``partitioner`` (e.g. ``murmur2_random``, for
Java's placement of the application's keys) must not move the states."""


class TopicError(KafkaAuditError):
    """A topic could not be created or described."""


def connection_config(config: Mapping[str, object]) -> dict[str, object]:
    """Return the connection part of a librdkafka config (servers, security, SASL/SSL), copied.

    Security properties come from the config, else from ``KAFKA_AUDIT_KAFKA_*`` (``client_config``).
    """
    keep = ("bootstrap.servers", "security.protocol", "client.dns.lookup", "broker.address.family")
    return {k: v for k, v in client_config(config).items() if k in keep or k.startswith(("sasl.", "ssl."))}


def ensure_topic(
    config: Mapping[str, object],
    name: str,
    partitions: int = 3,
    replication_factor: int = -1,
    topic_config: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    minimums: Mapping[str, int] | None = None,
) -> None:
    """Create ``name`` unless it exists; raise numeric configs of an existing one to ``minimums``.

    Args:
        config: librdkafka config; only its connection keys are used.
        name: Topic name.
        partitions: Partition count for a new topic.
        replication_factor: -1 uses the broker's ``default.replication.factor``.
        topic_config: Topic-level configs for a new topic.
        timeout_s: Admin request timeout, s.
        minimums: Numeric topic configs (e.g. ``max.message.bytes``, bytes) an existing topic is raised to
            where lower (never lowered), by ``IncrementalAlterConfigs`` (KIP-339). A broker that refuses
            (e.g. no ALTER_CONFIGS permission) is logged with the ``kafka-configs`` command to run, not
            raised: the topic still works within its own limits.

    Raises:
        TopicError: if the broker refuses (other than "already exists").
        KafkaSecurityError: if the broker rejects the credentials or its certificate is not trusted.
        KafkaConnectionError: if no broker answers within ``timeout_s``.
    """
    conn = connection_config(config)
    errors: list[KafkaError] = []
    admin = AdminClient({**conn, "log_level": 0, "error_cb": errors.append})
    wait_for_cluster(admin, errors, conn, timeout_s)
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
        if minimums:
            _raise_to(admin, name, minimums, timeout_s)


def ensure_consumer_tier_topics(config: Mapping[str, object], audit: str, state: str, dlq: str) -> None:
    """Create (or raise, see :func:`ensure_topic`) the topics a consumer tier's transactions write.

    The audit topic (3 partitions, :data:`AUDIT_TOPIC_CONFIG`), the state topic (3,
    :data:`STATE_TOPIC_CONFIG`) and the dead-letter topic (1, :data:`DLQ_TOPIC_CONFIG`); the last two raised
    to :data:`LARGE_RECORD_MINIMUMS`.

    Raises:
        TopicError, KafkaSecurityError, KafkaConnectionError: as :func:`ensure_topic`.
    """
    ensure_topic(config, audit, 3, topic_config=AUDIT_TOPIC_CONFIG)
    ensure_topic(config, state, 3, topic_config=STATE_TOPIC_CONFIG, minimums=LARGE_RECORD_MINIMUMS)
    ensure_topic(config, dlq, 1, topic_config=DLQ_TOPIC_CONFIG, minimums=LARGE_RECORD_MINIMUMS)


def _raise_to(admin: AdminClient, name: str, minimums: Mapping[str, int], timeout_s: float) -> None:
    """Set each config of ``minimums`` that ``name`` has lower (see :func:`ensure_topic`); log a refusal."""
    resource = ConfigResource(ResourceType.TOPIC, name)
    try:
        current = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(
            timeout_s + 5
        )
        low = {k: v for k, v in minimums.items() if k in current and int(current[k].value or 0) < v}
        if not low:
            return
        entries = [
            ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET) for k, v in low.items()
        ]
        change = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        admin.incremental_alter_configs([change], request_timeout=timeout_s)[change].result(timeout_s + 5)
        log.info("topic %s: raised %s", name, ", ".join(f"{k} to {v}" for k, v in low.items()))
    except (KafkaException, ValueError, TimeoutError) as exc:
        settings = ",".join(f"{k}={v}" for k, v in minimums.items())
        log.warning(
            "topic %s: could not raise %s (%s); run: kafka-configs --alter --entity-type topics"
            " --entity-name %s --add-config %s",
            name, settings, exc, name, settings,
        )  # fmt: skip


def read_to_end(
    config: Mapping[str, object],
    topic: str,
    *,
    group_id: str,
    read_committed: bool = True,
    timeout_s: float = 60.0,
    missing_ok: bool = False,
    batch_size: int = 1000,
) -> Iterator[Message]:
    """Yield every message of ``topic``, from the beginning of each partition to its end.

    The end is the partition EOF librdkafka reports: the high watermark, or the last stable offset
    with ``read_committed`` (so records of open transactions are not waited for). Nothing is committed.

    Args:
        config: librdkafka connection config (copied).
        topic: Topic to read.
        group_id: ``group.id`` for the reader (partitions are assigned, not subscribed).
        read_committed: ``isolation.level`` read_committed (default) or read_uncommitted.
        timeout_s: Deadline for reaching the end of every partition, s.
        missing_ok: Yield nothing (instead of raising) when the topic does not exist.
        batch_size: Messages per ``consume()`` call.

    Raises:
        TopicError: if the topic does not exist (unless ``missing_ok``), or an end is not reached in time.
        KafkaSecurityError: if the broker rejects the credentials or its certificate is not trusted.
        KafkaConnectionError: if no broker answers.
    """
    conf = client_config(config)
    errors: list[KafkaError] = []
    consumer = Consumer(
        {
            **conf,
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "error_cb": errors.append,
        }
    )
    try:
        wait_for_cluster(consumer, errors, conf, min(timeout_s, 30.0))
        md = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None or not md.partitions:
            if missing_ok:
                return
            raise TopicError(f"topic {topic!r} does not exist")
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in md.partitions])
        pending = set(md.partitions)
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TopicError(f"topic {topic!r} not read to its end in {timeout_s:.0f} s")
            for m in consumer.consume(batch_size, 0.5):
                err = m.error()
                if err is None:
                    yield m
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(m.partition())
    finally:
        consumer.close()


def watermarks(
    config: Mapping[str, object], topic: str, timeout_s: float = 10.0
) -> dict[int, tuple[int, int]]:
    """Low and high watermark offsets of every partition of ``topic``: ``{partition: (low, high)}``.

    ``high - low`` is the partition's message count when nothing was compacted or transactional.

    Raises:
        TopicError: if the topic does not exist or a broker does not answer within ``timeout_s``.
    """
    conf = client_config(config)
    consumer = Consumer({**conf, "group.id": "kafka-audit.watermarks", "enable.auto.commit": False})
    try:
        md = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if md is None or md.error is not None or not md.partitions:
            raise TopicError(f"topic {topic!r} does not exist")
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s, cached=False)
            for p in sorted(md.partitions)
        }
    except KafkaException as exc:
        raise TopicError(f"watermarks of topic {topic!r}: {exc.args[0].str()}") from exc
    finally:
        consumer.close()
