"""The audit consumer: reads every message of the monitored topics and counts what the cluster holds.

Exactly once across crashes (docs/DESIGN.md, invariant 4): the emitted snapshots, the dead letters, the
per-partition state (sequence sets and counters, in a compacted state topic) and the input offsets are
committed in one Kafka transaction (``send_offsets_to_transaction``, KIP-447 group fencing). On start
(and on every partition assignment) the state is read back with ``isolation.level=read_committed``, so
``kill -9`` at any moment and a restart yield the same final counts as an undisturbed run. Several
instances in one consumer group split the partitions; snapshots are keyed by the group, not the
instance, so counts follow a partition when it moves.

Topics are named, or matched by patterns and re-discovered every ``discovery_interval_ms``
(:mod:`audit_consumer.discovery`): a new match changes the subscription (a rebalance commits what is
pending and reloads the state). A window closes once none of its messages can still arrive: after the
grace, or after the largest ``message.timeout.ms`` its producers reported plus a margin
(:mod:`audit_consumer.producer_timeouts`; docs/DESIGN.md, invariant 8). A failed transaction or input
consumer is recovered from by starting over from the committed state
(:mod:`audit_consumer.transaction_recovery`).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_STORED,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from audit_consumer.counts import PartitionCounts, count_batch
from audit_consumer.discovery import select_topics
from audit_consumer.producer_timeouts import ProducerTimeouts
from audit_consumer.settings import AuditConsumerSettings
from audit_consumer.snapshots import dirty_buckets, read_position, snapshot_record
from audit_consumer.state_codec import decode_state, encode_state_within_limit, newest_values, state_key
from audit_consumer.transaction_recovery import AuditConsumerError, TransactionRecovery
from audit_consumer.watchdog import TransactionHungError, call_with_deadline
from audit_record import DeadLetter, cluster_tier, encode, now_ms
from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.security import client_config
from kafka_plumbing.topics import (
    STATE_KEY_PLACEMENT,
    STATE_PRODUCER_LIMITS,
    TopicError,
    ensure_consumer_tier_topics,
    read_to_end,
)

log = logging.getLogger(__name__)
COMPONENT = "audit-consumer"


FETCH_QUEUE_BACKOFF_MS = 10
"""librdkafka ``fetch.queue.backoff.ms`` of the audit consumer's input consumer, ms (librdkafka's default:
1000). When the pre-fetch queue holds ``queued.min.messages`` (100,000) messages or
``queued.max.messages.kbytes``, librdkafka postpones each partition's next fetch by this long
(``rdkafka_fetcher.c``, ``rd_kafka_toppar_fetch_decide``). With the default, a consumer that drains the
queue in under a second waits out the rest of that second with nothing to read: reading a backlog of
100-byte messages it ran at 120,000-250,000 msg/s depending on the phase, at a quarter of one core's
CPU (issue 17; ``bench/audit_consumer.py`` prints both). 10 ms keeps the same memory bound and costs
one fetch decision per partition every 10 ms while the queue is full. ``extra_config`` overrides it."""


END_CHECK_TIMEOUT_S = 2.0
"""How long the audit consumer waits for the end offsets of the partitions whose windows the wall clock
would close (one ListOffsets request, ``offsets_for_times``), s. No answer in time (the leader is cut
off, the host stalls): those windows stay open until a later commit confirms the end."""


@dataclass
class ConsumerStats:
    """Running totals of one instance (since it started), for progress output and tests."""

    messages: int = 0
    dead_letters: int = 0
    transactions: int = 0
    snapshots: int = 0
    aborted: int = 0


class AuditConsumer(TransactionRecovery):
    """One audit consumer instance for one cluster (tier ``cluster:<name>``).

    Args:
        settings: What to count and where to write; see :class:`AuditConsumerSettings`.

    Raises:
        AuditConsumerError: from :meth:`run` when fenced or on a fatal Kafka error.
    """

    def __init__(self, settings: AuditConsumerSettings) -> None:
        super().__init__()
        self.s = settings
        self.tier = cluster_tier(settings.cluster)
        self.stats = ConsumerStats()
        base = client_config(
            {"bootstrap.servers": settings.bootstrap_servers, **settings.extra_config}, settings.kafka
        )
        self._base = base
        # The audit, state and dead-letter topics (and the transactions) live on the audit cluster: this
        # one, or the one the reconciliation reads (settings.audit_bootstrap_servers).
        audit_base = (
            client_config(
                {"bootstrap.servers": settings.audit_bootstrap_servers, **settings.extra_config},
                settings.kafka,
            )
            if settings.external_offsets
            else base
        )
        self._audit_base = audit_base
        self._naming = settings.replication_naming
        self._consumer_config: dict[str, Any] = {
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,  # before base: extra_config overrides
            **base,
            "group.id": settings.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "client.id": f"{settings.transactional_id}.consumer",
            "partition.assignment.strategy": "range",
            # Static membership: a restarted instance takes its partitions back at once.
            "group.instance.id": settings.transactional_id,
            "session.timeout.ms": 15_000,
        }
        self._consumer = Consumer(self._consumer_config)
        self._producer_config = {
            **STATE_PRODUCER_LIMITS,
            **audit_base,
            "transactional.id": settings.transactional_id,
            "client.id": f"{settings.transactional_id}",
            "transaction.timeout.ms": 30_000,
            "linger.ms": 20,
            "enable.idempotence": True,
            "acks": "all",
            **STATE_KEY_PLACEMENT,
        }
        self._producer = Producer(self._producer_config)
        self._txn_timeout_s = settings.transaction_timeout_ms / 1000
        self._parts: dict[tuple[str, int], PartitionCounts] = {}
        self._at_end: dict[tuple[str, int], int] = {}
        """Partitions at their end: the end offset of their last PARTITION_EOF (since a message, seek or
        assignment)."""
        self._in_txn = False
        self._valid_pids: dict[bytes, bool] = {}
        self._next_commit = 0.0
        self.topics: list[str] = []
        """The topics subscribed to now (named ones and discovered matches)."""
        self._next_discovery = 0.0
        self.finality = settings.finality
        self.timeouts: ProducerTimeouts | None = (
            ProducerTimeouts(
                audit_base,
                settings.audit_topic,
                settings.window_ms,
                self.finality,
                f"{settings.group}.timeouts",
            )
            if self.finality.adaptive
            else None
        )
        """Where the producers' ``message.timeout.ms`` come from (None: fixed grace)."""

    # ------------------------------------------------------------------ lifecycle
    def ensure_topics(self) -> None:
        """Create the audit, state and dead-letter topics if missing."""
        s = self.s
        ensure_consumer_tier_topics(self._audit_base, s.audit_topic, s.state_topic, s.dlq_topic)

    def run(
        self, stop: threading.Event | None = None, on_commit: Callable[[ConsumerStats], None] | None = None
    ) -> None:
        """Consume and commit until ``stop`` is set; then commit what is pending and close.

        Raises:
            AuditConsumerError: when fenced by another instance with the same transactional id, or fatal.
            KafkaSecurityError: at start, if the broker rejects the credentials or certificate.
        """
        stop = stop or threading.Event()
        try:
            self.ensure_topics()
        except KafkaAuditError:  # e.g. KafkaAuthenticationError: close the clients, then say why
            self._close()
            raise
        try:
            self._producer.init_transactions(30)
        except KafkaException as exc:
            self._close()
            raise AuditConsumerError(f"cannot initialise transactions: {exc.args[0].str()}") from exc
        if self.timeouts is not None:
            self.timeouts.start()
        self._discover()
        interval = self.s.commit_interval_ms / 1000.0
        self._next_commit = time.monotonic() + interval
        try:
            while not stop.is_set():
                if self.s.topic_patterns and time.monotonic() >= self._next_discovery:
                    self._discover()
                if not self.topics:  # nothing matches yet
                    stop.wait(0.2)
                    continue
                msgs = self._consumer.consume(self.s.batch_size, 0.2)
                if msgs:
                    self._process(msgs)
                if self._consumer_failed is not None:
                    self._recover_consumer()
                    continue
                if time.monotonic() >= self._next_commit:
                    self._commit()
                    self._next_commit = time.monotonic() + interval
                    if on_commit is not None:
                        on_commit(self.stats)
            self._commit()
        finally:
            self._close()

    def _discover(self) -> None:
        """Subscribe to the named topics and the cluster's topics that match a pattern, if they changed.

        The cluster's topic list is read only with patterns (:mod:`audit_consumer.discovery`); when it
        cannot be read, the subscription stays as it is until the next try.
        """
        self._next_discovery = time.monotonic() + self.s.discovery_interval_ms / 1000
        available: list[str] = []
        if self.s.topic_patterns:
            try:
                available = list(self._consumer.list_topics(timeout=10).topics)
            except KafkaException as exc:
                log.warning("cannot list the topics (%s); keeping %s", exc.args[0].str(), self.topics)
                return
        own = (self.s.audit_topic, self.s.state_topic, self.s.dlq_topic)
        topics = select_topics(
            available, self.s.topics, self.s.topic_patterns, self.s.exclude_topic_patterns, own
        )
        if topics == self.topics:
            return
        added = sorted(set(topics) - set(self.topics))
        if topics:
            self._consumer.subscribe(
                topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
        else:
            self._consumer.unsubscribe()
        log.info("auditing %d topic(s)%s", len(topics), f"; new: {', '.join(added)}" if added else "")
        self.topics = topics

    def _wait_of(self, topic: str) -> Callable[[int], int] | None:
        """Return the delivery bound of ``topic``'s windows by start (None without adaptive finality)."""
        timeouts = self.timeouts
        if timeouts is None:
            return None
        source = self._naming.source_topic(topic)  # producers report the source topic of a copy
        return lambda start: timeouts.wait_ms(source, start)

    def _close(self) -> None:
        """Abort what is uncommitted (a restart re-reads it), leave the group, close the clients."""
        steps = [self._consumer.close, lambda: self._producer.flush(10), self._producer.close]
        if self._in_txn:
            steps.insert(0, lambda: self._producer.abort_transaction(10))
        if self.timeouts is not None:
            steps.append(self.timeouts.stop)
        for step in steps:
            try:
                step()
            except (KeyboardInterrupt, SystemExit):
                raise
            except:  # noqa: E722 - a fatal producer raises KafkaError itself, which is no Exception
                error = sys.exc_info()[1]  # after a broker failure: log it, close the rest
                log.warning("close step failed: %s", error, exc_info=isinstance(error, BaseException))

    # ------------------------------------------------------------------ rebalancing
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Load the assigned partitions' states and read each from where its state ends.

        A partition with a state resumes at the state's ``next_offset``, not at the group's committed
        offset: the state topic is read ``read_committed``, to its last stable offset, which another
        instance's open transaction (one hung in librdkafka, or a producer abandoned after it) holds back,
        so the newest state found can be older than the offsets committed with a newer one. Resuming at
        the committed offset with that older state lost the messages in between (the 5-minute soak: a
        window counted 111 of 338). From the state's own position every message after it is counted once,
        whatever the group committed; a partition without a state starts at the committed offset.
        """
        keys = [(p.topic, p.partition) for p in partitions]
        loaded = self._load_states(keys)
        for key in keys:
            self._parts[key] = loaded.get(key) or PartitionCounts(
                key[0], key[1], self.s.window_ms, self.s.grace_ms
            )
        consumer.assign([self._state_position(key) for key in keys])
        log.info("assigned %s", keys)

    def _state_position(self, key: tuple[str, int], committed: int = OFFSET_STORED) -> TopicPartition:
        """Where to read ``key`` from: its state's ``next_offset``.

        Without a state: ``committed`` (default ``OFFSET_STORED``: the group's committed offset), or the
        start where the offsets are kept in the state or ``committed`` is no offset.
        """
        st = self._parts.get(key)
        if st is not None and st.next_offset >= 0:
            off = st.next_offset
        elif self.s.external_offsets or (committed < 0 and committed != OFFSET_STORED):
            off = OFFSET_BEGINNING
        else:
            off = committed
        return TopicPartition(key[0], key[1], off)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._commit()
        for p in partitions:
            self._parts.pop((p.topic, p.partition), None)
            self._at_end.pop((p.topic, p.partition), None)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._in_txn:
            self._producer.abort_transaction(10)
            self._in_txn = False
        for p in partitions:
            self._parts.pop((p.topic, p.partition), None)
            self._at_end.pop((p.topic, p.partition), None)

    def _load_states(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], PartitionCounts]:
        """Read the state topic to its end (read_committed) and return the newest state of each key."""
        wanted = {state_key(self.s.group, t, p): (t, p) for t, p in keys}
        try:
            found = newest_values(
                read_to_end(self._audit_base, self.s.state_topic, group_id=f"{self.s.group}.state-reader"),
                wanted,
            )
        except TopicError as exc:
            raise AuditConsumerError(f"cannot read the state topic: {exc}") from exc
        return {k: decode_state(v, self.s.window_ms, self.s.grace_ms) for k, v in found.items()}

    # ------------------------------------------------------------------ counting (hot path)
    def _process(self, msgs: list[Message]) -> None:
        self.stats.messages += count_batch(
            msgs,
            self._parts,
            time.time_ns() // 1_000_000,
            self._valid_pids,
            self._enter_partition,
            self._on_error,
            self._dead_letter,
        )

    def _enter_partition(self, key: tuple[str, int]) -> None:
        """Begin the transaction before counting a partition's messages; it is no longer at its end."""
        if not self._in_txn:
            self._begin()
        self._at_end.pop(key, None)

    def _on_error(self, m: Message) -> None:
        err = m.error()
        if err.code() == KafkaError._PARTITION_EOF:
            self._at_end[(m.topic(), m.partition())] = m.offset()  # the end offset it reached
            return
        if err.fatal() or err.code() == KafkaError._FATAL:
            # librdkafka's consumer is dead (e.g. FENCED_INSTANCE_ID after a group coordinator moved:
            # found by the soak). Message errors report it as code _FATAL with fatal() False: before, it
            # was logged and the instance went on polling a consumer that never delivered again.
            self._consumer_failed = err
            return
        log.warning("consumer error on %s[%s]: %s", m.topic(), m.partition(), err.str())

    def _dead_letter(self, m: Message, reason: str, detail: str) -> None:
        dl = DeadLetter(COMPONENT, reason, detail, m.topic(), m.partition(), m.offset(), m.key(), m.value())
        self._producer.produce(self.s.dlq_topic, dl.value, dl.key, headers=dl.headers())
        self.stats.dead_letters += 1

    # ------------------------------------------------------------------ committing
    def _begin(self) -> bool:
        self._producer.begin_transaction()
        self._in_txn = True
        return True

    def _stale_after(self, topic: str) -> int | None:
        source = self._naming.source_topic(topic)
        return self.s.timeliness_ms.get(topic, self.s.timeliness_ms.get(source, self.s.default_timeliness_ms))

    def _commit(self) -> None:
        """Emit snapshots of changed buckets and the states, send offsets, commit: one transaction."""
        now = now_ms()
        caught_up = self._caught_up(now)
        closing: dict[tuple[str, int], list[tuple[int, bytes | None, list]]] = {}
        for key, st in self._parts.items():
            closed = st.advance(
                now if key in caught_up else None,
                self.s.late_retention_ms,
                self._wait_of(st.topic),
                self.finality.max_wait_ms,
            )
            if closed:
                closing[key] = closed
        dirty = [st for st in self._parts.values() if st.dirty]
        if not dirty:
            return
        if not self._in_txn:
            self._begin()
        offsets = []
        for st in dirty:
            stale_after = self._stale_after(st.topic)
            closed_keys = {(s, p) for s, p, _ in closing.get((st.topic, st.partition), [])}
            for start, pid, b, final in dirty_buckets(st, closed_keys, stale_after):
                self._emit(st, start, pid, b, final=final)
            state = encode_state_within_limit(
                self.s.group, st, "neither it nor the partition's offset is committed (a restart reads on"
                " from the last state)"
            )  # fmt: skip
            if state is None:
                continue
            self._producer.produce(self.s.state_topic, state, state_key(self.s.group, st.topic, st.partition))
            if st.next_offset >= 0:
                offsets.append(TopicPartition(st.topic, st.partition, st.next_offset))
            st.dirty = False
        timeout = self._txn_timeout_s
        try:
            if offsets and not self.s.external_offsets:  # else the state's next_offset is the offset
                call_with_deadline(
                    self._producer.send_offsets_to_transaction,
                    offsets,
                    self._consumer.consumer_group_metadata(),
                    timeout,
                    deadline_s=timeout * 1.5 + 5,
                )
            call_with_deadline(self._producer.commit_transaction, timeout, deadline_s=timeout * 1.5 + 5)
            self.stats.transactions += 1
        except KafkaException as exc:
            self._transaction_failed(exc)
        except TransactionHungError as exc:
            self._replace_producer(exc)
        finally:
            self._in_txn = False

    def _caught_up(self, now: int) -> set[tuple[str, int]]:
        """Return the partitions whose windows the wall clock ``now`` may close (DESIGN.md, invariant 8).

        A PARTITION_EOF says the consumer held the partition's end when it was fetched, not that nothing
        was appended since: the fetch from a leader that stopped answering (a broker cut off: the soak's
        ``cut_broker``) or that moved hangs without an event, and after a rewind the EOF was of the old
        position. A window closed on the wall clock then makes its messages read afterwards late and its
        final snapshot short (the likeliest cause of a 5-minute soak failure: a window whose final
        result counted 918 of the 941 messages in the topic, the broker cut starting in it).
        So when the wall clock would move a partition at its end past a window boundary, the partition's
        end offset is asked for (ListOffsets, ``read_committed``: the last stable offset, as the EOF's):
        the wall clock counts only where it is still the EOF's offset. Elsewhere it would change nothing.

        Returns:
            The partitions whose end was confirmed now (none without an answer within
            :data:`END_CHECK_TIMEOUT_S`).
        """
        caught_up: set[tuple[str, int]] = set()
        ask: list[TopicPartition] = []
        for key in self._at_end:
            st = self._parts.get(key)
            if st is not None and st.crosses_window(now, self._wait_of(st.topic), self.finality.max_wait_ms):
                ask.append(TopicPartition(key[0], key[1], OFFSET_END))  # a timestamp: the latest offset
        if not ask:
            return caught_up
        try:
            ends = self._consumer.offsets_for_times(ask, END_CHECK_TIMEOUT_S)
        except KafkaException as exc:
            log.info("end offsets not known (%s); windows stay open", exc.args[0].str())
            return caught_up
        for e in ends:
            eof = self._at_end.get((e.topic, e.partition))
            if e.error is None and eof is not None and 0 <= e.offset <= eof:
                caught_up.add((e.topic, e.partition))
        return caught_up

    def _emit(self, st: PartitionCounts, start: int, pid: bytes | None, b: list, final: bool) -> None:
        topic = self._naming.source_topic(st.topic)  # a MirrorMaker 2 copy counts under its source topic
        record = snapshot_record(
            self.tier,
            self.s.group,
            topic,
            st.partition,
            self.s.window_ms,
            start,
            pid,
            b,
            final,
            read_position(st, topic),  # read_offsets: the job's finality by proof (invariant 8)
        )
        self._producer.produce(
            self.s.audit_topic, encode(record), record.key().encode(), timestamp=record.emitted_at_ms
        )
        self.stats.snapshots += 1


def describe(settings: AuditConsumerSettings) -> dict[str, Any]:
    """Summarise what an instance with these settings will do (for the CLI's start-up line)."""
    return {
        "tier": cluster_tier(settings.cluster),
        "group": settings.group,
        "topics": settings.topics,
        "topic_patterns": settings.topic_patterns,
        "transactional.id": settings.transactional_id,
        "window_ms": settings.window_ms,
        "grace_ms": settings.grace_ms,
        "max_final_wait_ms": settings.max_final_wait_ms if settings.finality.adaptive else None,
        "audit_bootstrap_servers": settings.audit_bootstrap_servers if settings.external_offsets else None,
        "replication": (
            {"policy": settings.replication_policy, "sources": settings.replication_sources}
            if settings.replication_sources
            else None
        ),
    }
