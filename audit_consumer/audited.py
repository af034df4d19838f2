"""``AuditedConsumer``: a ``confluent_kafka.Consumer`` that reports what its application consumed.

The application consumer tier of the audit (``docs/DESIGN.md``, "Tiers"), as
:class:`audit_producer.AuditedProducer` is the producer tier: a thin wrapper with the same API
(``subscribe``, ``poll``, ``consume``, ``commit``, ``close``, ...; everything else is delegated to the
inner consumer). Every message it hands to the application is counted per (topic, partition, window,
producer id) by the audit consumer's code (:func:`audit_consumer.counts.count_batch`: the stamp
header, CreateTime windows, Roaring bitmaps of sequence numbers), and cumulative snapshots of tier
``consumer:<group.id>`` go to the audit topic (:mod:`audit_consumer.snapshots`): ``received`` =
consumed, ``unique`` = distinct (producer id, sequence) pairs, ``duplicated`` = further copies.

Durability and duplicates. Every ``snapshot_interval_ms`` (from ``poll``/``consume``), on ``commit()``
(before the offsets are committed), on a revoked assignment and on ``close()``, the changed snapshots
and the per-partition state (counters and sequence sets, compacted state topic, keyed
``consumer:<group>|topic|partition``) are written in one Kafka transaction. A restarted or newly
assigned instance reads the state back, so a message the group consumed before is recognised:

* an at-least-once application that crashes and re-reads from its last committed offset sees real
  duplicates, and they are counted as ``duplicated`` at this tier (as many as it re-reads of what was
  recorded; the audit's state is at least as new as every commit);
* what it consumed after the last state write (at most ``snapshot_interval_ms`` of consumption) was
  never recorded, so its re-read counts as the first read;
* with librdkafka's ``enable.auto.commit`` (offsets committed in the background) a crash can lose up to
  ``snapshot_interval_ms`` of counts whose offsets were already committed; commit explicitly for exact
  counts.

A replicated copy (MirrorMaker 2's ``A.orders``) is counted under its source topic (``orders``;
``replication_*`` settings). Failures of the audit never reach the application: they are logged,
counted in :attr:`AuditedConsumer.stats` and retried at the next write (invariant 7).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from audit_consumer import counts
from audit_consumer.counts import PartitionCounts, count_batch
from audit_consumer.settings import DEFAULT_STATE_TOPIC, ReplicationNamingSettings
from audit_consumer.snapshots import dirty_buckets, read_position, snapshot_record
from audit_consumer.state_codec import decode_state, encode_state_within_limit, newest_values, state_key
from audit_record import DEFAULT_AUDIT_TOPIC, DEFAULT_DLQ_TOPIC, DEFAULT_WINDOW_MS, DeadLetter, encode, now_ms
from audit_record.record import consumer_tier
from kafka_plumbing.errors import ConfigError, KafkaAuditError
from kafka_plumbing.security import KafkaSecurity, client_config
from kafka_plumbing.topics import (
    STATE_KEY_PLACEMENT,
    STATE_PRODUCER_LIMITS,
    TopicError,
    connection_config,
    ensure_consumer_tier_topics,
    read_to_end,
)

log = logging.getLogger(__name__)
COMPONENT = "audited-consumer"
"""``component`` of its dead letters (``kafka-audit.dlq.component``)."""


class ConsumerAuditSettings(ReplicationNamingSettings):
    """How an :class:`AuditedConsumer` audits (the librdkafka config of the consumer is separate).

    Attributes:
        window_ms: Window length, ms; must equal the producers'.
        grace_ms: A window closes when the partition's newest CreateTime (or, while the application is
            caught up, the wall clock) passes its end + grace, ms; messages of a closed window count as
            late. Downstream of a replication, set it above the longest outage to count through.
        snapshot_interval_ms: Changed counts and the state are written at least this often, ms.
        late_retention_ms: Counters of closed windows are kept this long to count late messages, ms.
        flush_on_commit: ``commit()`` first writes the counts and state (so re-reads after a crash are
            duplicates, see the module docstring); off: only every ``snapshot_interval_ms``.
        audit_topic, state_topic, dlq_topic: Output topics (on the audit cluster).
        audit_bootstrap_servers: ``bootstrap.servers`` of the cluster holding those topics (where the
            reconciliation reads); None: the consumer's own cluster, with its security settings.
        instance_id: Stable id of this instance, part of the ``transactional.id``
            ``kafka-audit.consumer.<group>.<instance_id>``: a restart with the same id fences the previous
            incarnation and aborts its open transaction at once. None: ``group.instance.id`` if set, else
            ``<host>.<pid>.<random>`` (a crashed incarnation's open transaction is then aborted by the
            broker after ``transaction_timeout_ms``).
        transaction_timeout_ms: ``transaction.timeout.ms`` of the audit's transactional producer, and
            the timeout of each transactional call, ms.
        replication_policy, replication_sources, replication_separator: As the audit consumer's
            (:class:`audit_consumer.settings.AuditConsumerSettings`): copies named ``<alias>.<topic>``
            for ``default`` (aliases in ``replication_sources``) are counted under the source topic.
        extra_config: librdkafka properties of the audit's producer and state reader (e.g. security for
            an audit cluster other than the consumer's), passed through.
        kafka: TLS / SASL settings of the audit clients when ``audit_bootstrap_servers`` is set
            (default: ``KAFKA_AUDIT_KAFKA_*``).

    Example:
        >>> from audit_consumer import ConsumerAuditSettings
        >>> audit = ConsumerAuditSettings(window_ms=10_000, instance_id="billing-1")
        >>> audit.window_ms, audit.flush_on_commit
        (10000, True)
    """

    model_config = SettingsConfigDict(env_prefix="KAFKA_AUDIT_APP_CONSUMER_", frozen=True)

    window_ms: int = Field(DEFAULT_WINDOW_MS, gt=0)
    grace_ms: int = Field(30_000, ge=0)
    snapshot_interval_ms: int = Field(1_000, gt=0)
    late_retention_ms: int = Field(3_600_000, ge=0)
    flush_on_commit: bool = True
    audit_topic: str = DEFAULT_AUDIT_TOPIC
    state_topic: str = DEFAULT_STATE_TOPIC
    dlq_topic: str = DEFAULT_DLQ_TOPIC
    audit_bootstrap_servers: str | None = None
    instance_id: str | None = None
    transaction_timeout_ms: int = Field(10_000, gt=0)
    extra_config: dict[str, str] = Field(default_factory=dict)
    kafka: KafkaSecurity = Field(default_factory=KafkaSecurity.from_env)


@dataclass
class AuditStats:
    """Running totals of one :class:`AuditedConsumer` (since it was created).

    Attributes:
        messages: Messages counted (handed to the application; errors and dead letters excluded).
        dead_letters: Messages with a broken stamp or no timestamp (sent to the dead-letter topic).
        transactions: Audit writes committed (snapshots + state).
        snapshots: Snapshots written (in committed or aborted transactions).
        failures: Audit writes that failed (retried at the next write; the application is not told).
    """

    messages: int = 0
    dead_letters: int = 0
    transactions: int = 0
    snapshots: int = 0
    failures: int = 0


Callback = Callable[[Consumer, list[TopicPartition]], None]


class AuditedConsumer:
    """``confluent_kafka.Consumer`` with the application consumer tier's audit (see the module docstring).

    Args:
        config: librdkafka consumer configuration, as for ``confluent_kafka.Consumer``; ``group.id`` is
            required (the tier is ``consumer:<group.id>``).
        audit: Audit settings (default: :class:`ConsumerAuditSettings` from the environment,
            ``KAFKA_AUDIT_APP_CONSUMER_*``).
        **kwargs: Passed to ``confluent_kafka.Consumer`` (e.g. ``logger``).

    The constructor does no network I/O beyond the inner consumer's own; the audit's transactional
    producer starts with the first write.

    Raises:
        ConfigError: ``group.id`` is missing.

    Example:
        Needs a broker at ``localhost:9092``; commit after processing for exact counts::

            >>> from audit_consumer import AuditedConsumer
            >>> config = {"bootstrap.servers": "localhost:9092", "group.id": "billing"}
            >>> consumer = AuditedConsumer(config)  # doctest: +SKIP
            >>> consumer.subscribe(["orders"])  # doctest: +SKIP
            >>> msg = consumer.poll(1.0)  # doctest: +SKIP
            >>> consumer.commit(asynchronous=False)  # doctest: +SKIP
            >>> consumer.close()  # writes the last counts and state  # doctest: +SKIP
    """

    def __init__(
        self, config: Mapping[str, Any], audit: ConsumerAuditSettings | None = None, **kwargs: Any
    ) -> None:
        group = config.get("group.id")
        if not group:
            raise ConfigError("AuditedConsumer needs group.id: its tier is consumer:<group.id>")
        self.audit = audit or ConsumerAuditSettings()
        self.group = str(group)
        self.tier = consumer_tier(self.group)
        self.stats = AuditStats()
        self._consumer = Consumer(dict(config), **kwargs)
        a = self.audit
        if a.audit_bootstrap_servers:
            self._audit_conf = client_config(
                {"bootstrap.servers": a.audit_bootstrap_servers, **a.extra_config}, a.kafka
            )
        else:  # the consumer's own cluster, with its security settings
            self._audit_conf = {**connection_config(config), **a.extra_config}
        instance = (
            a.instance_id
            or config.get("group.instance.id")
            or f"{socket.gethostname()[:40]}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        )
        self.transactional_id = f"kafka-audit.consumer.{self.group}.{instance}"
        self._naming = a.replication_naming
        self._producer: Producer | None = None
        self._parts: dict[tuple[str, int], PartitionCounts] = {}
        self._valid_pids: dict[bytes, bool] = {}
        self._pending_dead: list[DeadLetter] = []
        self._caught_up = False
        self._disabled = False
        self._topics_ready = False
        self._next_write = time.monotonic() + a.snapshot_interval_ms / 1000
        self._app_on_assign: Callback | None = None
        self._app_on_revoke: Callback | None = None
        self._app_on_lost: Callback | None = None

    # ------------------------------------------------------------------ the Consumer API
    def subscribe(
        self,
        topics: list[str],
        on_assign: Callback | None = None,
        on_revoke: Callback | None = None,
        on_lost: Callback | None = None,
    ) -> None:
        """Subscribe as ``Consumer.subscribe``; the audit loads (assign) and writes (revoke) its state.

        The application's callbacks are called after the audit's, with the same arguments.
        """
        self._app_on_assign, self._app_on_revoke, self._app_on_lost = on_assign, on_revoke, on_lost
        self._consumer.subscribe(
            topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Assign as ``Consumer.assign``; the audit loads the partitions' state first."""
        try:
            self._load([(p.topic, p.partition) for p in partitions])
        except KafkaAuditError:
            log.exception("audit state of %s not loaded; counting them afresh", partitions)
        self._consumer.assign(partitions)

    def unsubscribe(self) -> None:
        """Write the counts and state, forget the partitions, then ``Consumer.unsubscribe``."""
        self.flush_audit()
        self._parts.clear()
        self._consumer.unsubscribe()

    def poll(self, timeout: float | None = None) -> Message | None:
        """``Consumer.poll``; the message returned (if any) is counted."""
        m = self._consumer.poll() if timeout is None else self._consumer.poll(timeout)
        if m is None:
            self._caught_up = True
        else:
            self._count([m])
        self._tick()
        return m

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """``Consumer.consume``; every message returned is counted."""
        msgs = self._consumer.consume(num_messages, timeout)
        self._caught_up = len(msgs) < num_messages
        if msgs:
            self._count(msgs)
        self._tick()
        return msgs

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        """``Consumer.commit``, after the counts and state are written (``flush_on_commit``)."""
        if self.audit.flush_on_commit:
            self.flush_audit()
        return self._consumer.commit(*args, **kwargs)

    def close(self) -> None:
        """Write the counts and state, close the consumer (leaving its group), then the audit's producer."""
        self.flush_audit()
        try:
            self._consumer.close()
        finally:
            producer, self._producer = self._producer, None
            if producer is not None:
                producer.flush(10)
                producer.close()  # no client of the audit outlives the consumer

    def __getattr__(self, name: str) -> Any:
        """Everything else (``assignment``, ``position``, ``store_offsets``, ...) is the inner consumer's."""
        if name == "_consumer":  # not set: the constructor failed
            raise AttributeError(name)
        return getattr(self._consumer, name)

    def __enter__(self) -> AuditedConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ rebalancing
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            self._load([(p.topic, p.partition) for p in partitions])
        except KafkaAuditError:
            log.exception("audit state of %s not loaded; counting them afresh", partitions)
        if self._app_on_assign is not None:
            self._app_on_assign(consumer, partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.flush_audit()
        for p in partitions:
            self._parts.pop((p.topic, p.partition), None)
        if self._app_on_revoke is not None:
            self._app_on_revoke(consumer, partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for p in partitions:  # another member owns them now: its state is the truth
            self._parts.pop((p.topic, p.partition), None)
        if self._app_on_lost is not None:
            self._app_on_lost(consumer, partitions)

    def _load(self, keys: list[tuple[str, int]]) -> None:
        """Read the newest state of each new partition from the state topic (read_committed)."""
        keys = [k for k in keys if k not in self._parts]
        if not keys:
            return
        wanted = {state_key(self.tier, t, p): (t, p) for t, p in keys}
        try:
            found = newest_values(
                read_to_end(
                    self._audit_conf,
                    self.audit.state_topic,
                    group_id=f"kafka-audit.consumer.{self.group}.state-reader",
                    missing_ok=True,
                ),
                wanted,
            )
        except TopicError as exc:
            raise KafkaAuditError(f"cannot read the audit state topic: {exc}") from exc
        a = self.audit
        for key in keys:
            value = found.get(key)
            self._parts[key] = (
                decode_state(value, a.window_ms, a.grace_ms)
                if value is not None
                else PartitionCounts(key[0], key[1], a.window_ms, a.grace_ms)
            )

    # ------------------------------------------------------------------ counting
    def _count(self, msgs: list[Message]) -> None:
        unknown = {
            (m.topic(), m.partition())
            for m in msgs
            if m.error() is None and (m.topic(), m.partition()) not in self._parts
        }
        if unknown:  # assigned without subscribe() callbacks (e.g. incremental_assign): load lazily
            try:
                self._load(sorted(unknown))
            except KafkaAuditError:
                log.exception("audit state of %s not loaded; counting them afresh", sorted(unknown))
                a = self.audit
                for t, p in unknown:
                    self._parts.setdefault((t, p), PartitionCounts(t, p, a.window_ms, a.grace_ms))
        self.stats.messages += count_batch(
            msgs,
            self._parts,
            now_ms(),
            self._valid_pids,
            lambda key: None,
            lambda m: None,  # errors are the application's to handle
            self._dead_letter,
        )

    def _dead_letter(self, m: Message, reason: str, detail: str) -> None:
        """Send a message the audit cannot count to the dead-letter topic (invariant 7), best effort."""
        self.stats.dead_letters += 1
        dl = DeadLetter(COMPONENT, reason, detail, m.topic(), m.partition(), m.offset(), m.key(), m.value())
        self._pending_dead.append(dl)  # written with the next snapshots, in their transaction

    def _tick(self) -> None:
        if time.monotonic() >= self._next_write:
            self.flush_audit()

    # ------------------------------------------------------------------ writing
    def _ensure_producer(self) -> Producer | None:
        """Return the audit's transactional producer, created on first use (None: auditing disabled)."""
        if self._disabled:
            return None
        if self._producer is None:
            if not self._topics_ready:
                try:
                    ensure_consumer_tier_topics(
                        self._audit_conf, self.audit.audit_topic, self.audit.state_topic, self.audit.dlq_topic
                    )
                    self._topics_ready = True
                except KafkaAuditError:
                    log.exception("audit topics not ready; retrying at the next write")
                    self.stats.failures += 1
                    return None
            producer = Producer(
                {
                    **STATE_PRODUCER_LIMITS,
                    **self._audit_conf,
                    "transactional.id": self.transactional_id,
                    "client.id": self.transactional_id,
                    "transaction.timeout.ms": self.audit.transaction_timeout_ms,
                    "linger.ms": 20,
                    "enable.idempotence": True,
                    "acks": "all",
                    **STATE_KEY_PLACEMENT,
                }
            )
            try:
                producer.init_transactions(self.audit.transaction_timeout_ms / 1000 * 3)
            except KafkaException as exc:
                log.error(
                    "audit producer not initialised (%s); retrying at the next write", exc.args[0].str()
                )
                self.stats.failures += 1
                return None
            self._producer = producer
        return self._producer

    def flush_audit(self) -> int:
        """Write the snapshots of every changed window and the changed partitions' state: one transaction.

        Called every ``snapshot_interval_ms`` from ``poll``/``consume``, by ``commit()``, on a revoked
        assignment and by ``close()``; an application may call it too. Never raises: a failed write is
        logged, counted in ``stats.failures`` and repeated in full at the next call.

        Returns:
            Snapshots written (0 when nothing changed or the write failed).
        """
        a = self.audit
        self._next_write = time.monotonic() + a.snapshot_interval_ms / 1000
        now = now_ms()
        closing: dict[tuple[str, int], set[tuple[int, bytes | None]]] = {}
        for key, st in self._parts.items():
            closed = st.advance(now if self._caught_up else None, a.late_retention_ms)
            if closed:
                closing[key] = {(s, p) for s, p, _ in closed}
        dirty = [st for st in self._parts.values() if st.dirty]
        dead = self._pending_dead
        if not dirty and not dead:
            return 0
        producer = self._ensure_producer()
        if producer is None:
            return 0
        written = 0
        try:
            producer.begin_transaction()
            for dl in dead:
                producer.produce(a.dlq_topic, dl.value, dl.key, headers=dl.headers())
            for st in dirty:
                topic = self._naming.source_topic(st.topic)  # a MirrorMaker 2 copy counts under its source
                for start, pid, b, final in dirty_buckets(
                    st, closing.get((st.topic, st.partition), set()), None
                ):
                    record = snapshot_record(
                        self.tier,
                        self.group,
                        topic,
                        st.partition,
                        a.window_ms,
                        start,
                        pid,
                        b,
                        final,
                        read_position(st, topic),  # the job's finality by proof (invariant 8)
                    )
                    producer.produce(
                        a.audit_topic, encode(record), record.key().encode(), timestamp=record.emitted_at_ms
                    )
                    written += 1
                state = encode_state_within_limit(
                    self.tier, st, "not written (after a restart, what was read since the last state written"
                    " counts as a first read)"
                )  # fmt: skip
                if state is not None:
                    producer.produce(a.state_topic, state, state_key(self.tier, st.topic, st.partition))
                st.dirty = False
            producer.commit_transaction(a.transaction_timeout_ms / 1000)
        except KafkaException as exc:
            self._write_failed(exc, dirty)
            return 0
        self._pending_dead = []
        self.stats.transactions += 1
        self.stats.snapshots += written
        return written

    def _write_failed(self, exc: KafkaException, dirty: list[PartitionCounts]) -> None:
        """Abort, mark everything of ``dirty`` to be written again; a fenced or fatal producer is replaced."""
        err: KafkaError = exc.args[0]
        self.stats.failures += 1
        for st in dirty:  # re-emit every bucket of these partitions: cumulative snapshots, harmless
            st.dirty = True
            for table in (st.open, st.closed):
                for b in table.values():
                    b[counts.DIRTY] = 1
        producer = self._producer
        if err.code() == KafkaError._FENCED or err.fatal():
            log.error(
                "audit writes of %s fenced or failed fatally (%s): another instance with transactional.id "
                "%r took over; auditing stops here",
                self.tier,
                err.str(),
                self.transactional_id,
            )
            self._disabled = True
            self._producer = None
            return
        log.warning("audit write of %s failed (%s); retrying at the next write", self.tier, err.str())
        if producer is not None:
            try:
                producer.abort_transaction(self.audit.transaction_timeout_ms / 1000)
            except KafkaException:
                self._producer = None  # a new producer (same transactional.id) fences the stuck one
