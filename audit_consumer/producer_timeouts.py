"""The producers' ``message.timeout.ms`` per topic, read from their snapshots in the audit topic.

The audit consumer counts data messages; it learns how long a window's messages may still arrive from
the producer-tier snapshots in the audit topic, which carry each producer's configuration
(``AuditRecord.producer_config.message_timeout_ms``). :class:`ProducerTimeouts` reads them in a
background thread with its own consumer (no group membership, nothing committed): from
``lookback_ms`` before its start, every partition, ``read_uncommitted`` (producer snapshots are not
transactional; the audit consumer's own open transaction must not hold them back). Only records whose
Kafka key starts with ``producer|`` are decoded (:meth:`audit_record.AuditRecord.key`).

:meth:`ProducerTimeouts.wait_ms` answers, for (topic, window), the delivery bound of
:class:`audit_record.finality.Finality` for the largest timeout of the producers active around that
window: 0 when none reported (the grace alone), and the maximum while it cannot know yet (before it has
read to the end once, or for windows older than what it read), so a window never closes early.

A producer that watches its TCP connections (``in_flight_bytes`` not null in its snapshots,
:mod:`audit_producer.tcp_backlog`) sends a window's final snapshot only once the bytes it wrote have
reached the brokers: until its final snapshot of a window is read, that window waits, at most
``producer_final_wait_ms`` past its bound, and :data:`FINAL_SNAPSHOT_SETTLE_MS` after it is read (the
data the final snapshot vouches for is fetched meanwhile).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

from audit_record import MalformedRecordError, decode, now_ms
from audit_record.finality import DEFAULT_PRODUCER_FINAL_WAIT_MS, Finality
from kafka_plumbing.topics import connection_config

log = logging.getLogger(__name__)

PRODUCER_KEY_PREFIX = b"producer|"
"""Kafka keys of producer-tier snapshots start with this (``tier|source|...``)."""

PRUNE_INTERVAL_S = 60.0
"""How often producers long gone are forgotten, s."""

FINAL_SNAPSHOT_SETTLE_MS = 2_000
"""After a watching producer's final snapshot of a window is read, the window waits this much longer, ms:
the data fetch (``fetch.wait.max.ms`` 500 ms) reads what the brokers appended before it."""


@dataclass
class _Seen:
    """One producer of one topic: the windows it reported and its largest ``message.timeout.ms``."""

    first_window_ms: int
    last_window_ms: int
    message_timeout_ms: int


class ProducerTimeouts:
    """Largest ``message.timeout.ms`` of each producer per topic, from the audit topic; thread-safe.

    Args:
        config: librdkafka connection config of the cluster holding the audit topic.
        audit_topic: The audit topic.
        window_ms: Window length, ms.
        finality: The consumer's finality rule (delivery margin, bound).
        group_id: ``group.id`` of the reader (librdkafka needs one; it never joins or commits).
        lookback_ms: Read the snapshots emitted this long before :meth:`start`, ms (default: the bound
            plus three windows).
        producer_final_wait_ms: How long past its delivery bound a window waits for the final snapshot of
            a producer that watches its TCP connections, ms (0: it does not wait for them).
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        audit_topic: str,
        window_ms: int,
        finality: Finality,
        group_id: str,
        lookback_ms: int | None = None,
        producer_final_wait_ms: int = DEFAULT_PRODUCER_FINAL_WAIT_MS,
    ) -> None:
        self._config = connection_config(config)
        self.audit_topic = audit_topic
        self.window_ms = window_ms
        self.finality = finality
        self.group_id = group_id
        self.lookback_ms = lookback_ms if lookback_ms is not None else finality.max_wait_ms + 3 * window_ms
        self.covered_from_ms = -1
        """Snapshots emitted from here on are read, ms since epoch UTC (-1 before :meth:`start`)."""
        self.ready = threading.Event()
        """Set once every partition of the audit topic has been read to its end."""
        self.records_read = 0
        self._lock = threading.Lock()
        self._topics: dict[str, dict[str, _Seen]] = {}
        self.producer_final_wait_ms = producer_final_wait_ms
        # (topic, window start) -> producer ids whose snapshot of it said they watch TCP and is not final;
        # and when the last of them sent its final snapshot (wall clock, ms)
        self._unclosed: dict[tuple[str, int], set[str]] = {}
        self._closed_at: dict[tuple[str, int], int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ answers
    def observe(self, topic: str, producer_id: str, window_start_ms: int, message_timeout_ms: int) -> None:
        """Record one producer snapshot (the reader thread calls this; tests may too)."""
        with self._lock:
            producers = self._topics.setdefault(topic, {})
            seen = producers.get(producer_id)
            if seen is None:
                producers[producer_id] = _Seen(window_start_ms, window_start_ms, message_timeout_ms)
                return
            seen.first_window_ms = min(seen.first_window_ms, window_start_ms)
            seen.last_window_ms = max(seen.last_window_ms, window_start_ms)
            if message_timeout_ms <= 0 or seen.message_timeout_ms <= 0:  # 0 = infinite
                seen.message_timeout_ms = 0
            else:
                seen.message_timeout_ms = max(seen.message_timeout_ms, message_timeout_ms)

    def observe_final(
        self, topic: str, producer_id: str, window_start_ms: int, final: bool, at_ms: int
    ) -> None:
        """Record whether a watching producer's snapshot of a window is final (read at ``at_ms``, ms)."""
        key = (topic, window_start_ms)
        with self._lock:
            waiting = self._unclosed.get(key)
            if not final:  # one key's snapshots are read in order: never after its final one
                self._unclosed.setdefault(key, set()).add(producer_id)
                return
            if waiting is not None:
                waiting.discard(producer_id)
                if not waiting:
                    del self._unclosed[key]
            self._closed_at[key] = at_ms

    def unclosed_wait_ms(self, topic: str, window_start_ms: int, bound_ms: int) -> int:
        """Return the wait a window needs for its watching producers' final snapshots, ms after its end.

        While one has not sent it: ``bound_ms + producer_final_wait_ms``; once the last has, the time it was
        read + :data:`FINAL_SNAPSHOT_SETTLE_MS`; 0 without watching producers.
        """
        if self.producer_final_wait_ms <= 0:
            return 0
        key = (topic, window_start_ms)
        with self._lock:
            if self._unclosed.get(key):
                return bound_ms + self.producer_final_wait_ms
            closed_at = self._closed_at.get(key)
        if closed_at is None:
            return 0
        return max(0, closed_at + FINAL_SNAPSHOT_SETTLE_MS - (window_start_ms + self.window_ms))

    def message_timeout_ms(self, topic: str, window_start_ms: int) -> int | None:
        """Return the largest ``message.timeout.ms`` of the topic's producers around a window (None: none).

        A producer counts for the windows from one before its first reported window to two after its
        last (its snapshot of a window may come late, through the same network as its messages);
        0 (infinite) wins.
        """
        w = self.window_ms
        with self._lock:
            timeouts = [
                s.message_timeout_ms
                for s in self._topics.get(topic, {}).values()
                if s.first_window_ms - w <= window_start_ms <= s.last_window_ms + 2 * w
            ]
        if not timeouts:
            return None
        return 0 if 0 in timeouts else max(timeouts)

    def wait_ms(self, topic: str, window_start_ms: int) -> int:
        """Return how long after its end the window's messages may still be appended, ms.

        The delivery bound (:meth:`audit_record.finality.Finality.delivery_bound_ms`) of the producers
        around the window; 0 when none reported one; the bound's maximum while unknown (not read to the
        end yet, or a window that ended before the snapshots read).
        """
        if not self.ready.is_set() or window_start_ms + self.window_ms < self.covered_from_ms:
            return self.finality.max_wait_ms
        bound = self.finality.delivery_bound_ms(self.message_timeout_ms(topic, window_start_ms))
        bound = 0 if bound is None else bound
        return max(bound, self.unclosed_wait_ms(topic, window_start_ms, bound))

    # ------------------------------------------------------------------ reading
    def start(self) -> None:
        """Start the reader thread (it stops with :meth:`stop`)."""
        self.covered_from_ms = now_ms() - self.lookback_ms
        self._thread = threading.Thread(target=self._run, name="producer-timeouts", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the reader thread and close its consumer."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        consumer = Consumer(
            {
                **self._config,
                "group.id": self.group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "isolation.level": "read_uncommitted",
                "client.id": f"{self.group_id}.producer-timeouts",
                "log_level": 3,
            }
        )
        try:
            pending = self._assign(consumer)
            next_prune = time.monotonic() + PRUNE_INTERVAL_S
            while not self._stop.is_set():
                if pending is None:  # the topic's metadata was not there yet
                    if self._stop.wait(1.0):
                        break
                    pending = self._assign(consumer)
                    continue
                for m in consumer.consume(500, 0.5):
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            pending.discard(m.partition())
                            if not pending:
                                self.ready.set()
                        continue
                    self._read(m.key(), m.value())
                if time.monotonic() >= next_prune:
                    self._prune(now_ms())
                    next_prune = time.monotonic() + PRUNE_INTERVAL_S
        except Exception:  # never take the audit consumer down: windows then wait the maximum
            log.exception("reading the producers' message.timeout.ms from %s failed", self.audit_topic)
        finally:
            consumer.close()

    def _assign(self, consumer: Consumer) -> set[int] | None:
        """Assign every partition of the audit topic from ``covered_from_ms``; return their numbers."""
        try:
            meta = consumer.list_topics(self.audit_topic, timeout=10)
        except KafkaException as exc:
            log.warning("audit topic %s not readable yet: %s", self.audit_topic, exc)
            return None
        topic = meta.topics.get(self.audit_topic)
        if topic is None or topic.error is not None or not topic.partitions:
            return None
        wanted = [TopicPartition(self.audit_topic, p, self.covered_from_ms) for p in sorted(topic.partitions)]
        try:
            offsets = consumer.offsets_for_times(wanted, timeout=10)
        except KafkaException as exc:
            log.warning("cannot look up offsets of %s: %s", self.audit_topic, exc)
            return None
        consumer.assign(
            [
                TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END)
                for tp in offsets
            ]
        )
        return {tp.partition for tp in offsets}

    def _read(self, key: bytes | None, value: bytes | None) -> None:
        if not key or not value or not key.startswith(PRODUCER_KEY_PREFIX):
            return
        try:
            record = decode(value)
        except MalformedRecordError:  # the Spark job dead-letters it; here it is simply not a report
            return
        self.records_read += 1
        if record.producer_id and record.producer_config is not None:
            self.observe(
                record.topic,
                record.producer_id,
                record.window_start_ms,
                record.producer_config.message_timeout_ms,
            )
        if record.producer_id and record.in_flight_bytes is not None:
            self.observe_final(
                record.topic, record.producer_id, record.window_start_ms, record.final, now_ms()
            )

    def _prune(self, now: int) -> None:
        """Forget producers whose last window started more than the look-back plus a window before ``now``."""
        cutoff = now - self.lookback_ms - self.window_ms
        with self._lock:
            for topic in list(self._topics):
                producers = self._topics[topic]
                for pid in [p for p, s in producers.items() if s.last_window_ms < cutoff]:
                    del producers[pid]
                if not producers:
                    del self._topics[topic]
            for key in [k for k in self._closed_at if k[1] < cutoff]:
                del self._closed_at[key]
            for key in [k for k in self._unclosed if k[1] < cutoff]:
                del self._unclosed[key]
