"""Following the control topic for one producer group: the autotuned producer's background thread.

:class:`ControlFollower` reads the compacted control topic (``audit_record.control_record``) with its
own ``confluent_kafka.Consumer``: every partition assigned from the beginning, no consumer group
commits. It keeps the newest valid record of its group (key = group, version newer than every version
tried so far, not expired) and, once it has read to the end of the topic, prepares that configuration
off the caller's produce path: it builds the new inner ``confluent_kafka.Producer`` (librdkafka rejects
an invalid property value there with ``KafkaException``) and checks that it reaches the cluster (a
metadata request) before it hands it over. The audited producer swaps it in on its own thread at its
next tick (docs/DESIGN.md, "Autotuned producer").

A malformed control record of the group (undecodable, values out of librdkafka's range, a group field
that is not its key) goes to the dead-letter topic with its reason (invariant 7), is counted in
:attr:`ControlFollower.dead_lettered`, and changes nothing. Tombstones (a deleted desired
configuration) and records of other groups are skipped. Each producer of a group reads the topic, so a
malformed record of a group of N producers is dead-lettered N times, once per ``producer_id``.

A version is tried once: a configuration that was rejected or rolled back is not tried again; the
controller sends a new version.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from audit_producer.librdkafka_config import canonical
from audit_record import DeadLetter, MalformedRecordError, ProducerConfig, now_ms
from audit_record.control_record import ControlRecord, decode_control
from kafka_plumbing.errors import ConfigError, KafkaAuditError
from kafka_plumbing.topics import CONTROL_TOPIC_CONFIG, ensure_topic

log = logging.getLogger(__name__)

COMPONENT = "audit-producer"
"""``kafka-audit.dlq.component`` of the control records an audited producer dead-letters."""
_RETRY_S = 5.0  # after the follower failed (no cluster, no topic), start over this much later, s
_CATCH_UP_S = 30.0  # at most this long reading the topic's backlog before the newest record is tried, s
_REFRESH_S = 30.0  # look for new partitions of the control topic this often, s
_CONSUME_TIMEOUT_S = 0.2


@dataclass(slots=True)
class Candidate:
    """A configuration on its way to the producer.

    Attributes:
        record: The control record that asks for it.
        config: The librdkafka config of the new inner producer (the base config with the record's
            properties; callbacks included).
        reliability: The reliability settings of ``config`` (what snapshots report).
        token: Identifies the new inner producer's callbacks (its ``stats_cb``).
        producer: The prepared inner ``confluent_kafka.Producer``, verified to reach the cluster; None
            when the record changes no librdkafka property (only its version and hints apply).
    """

    record: ControlRecord
    config: dict[str, Any]
    reliability: ProducerConfig
    token: object = field(default_factory=object)
    producer: Any = None


def inner_config(base: Mapping[str, Any], record: ControlRecord) -> dict[str, Any]:
    """Return the librdkafka config of an inner producer running ``record``.

    The base config with librdkafka aliases made canonical (``request.required.acks`` -> ``acks``,
    ``queue.buffering.max.ms`` -> ``linger.ms``, ``delivery.timeout.ms`` -> ``message.timeout.ms``),
    so the record's properties replace them instead of competing with them.
    """
    props = record.librdkafka_config()
    config = {k: v for k, v in canonical(base).items() if k not in props}
    config.update(props)
    return config


class ConfigRejectedError(KafkaAuditError):
    """A configuration cannot take over: librdkafka refuses a property, or the cluster is not reached."""


def prepare_producer(
    config: Mapping[str, Any],
    topic: str,
    timeout_s: float,
    factory: Callable[[dict[str, Any]], Any] = Producer,
) -> Any:
    """Create an inner producer with ``config`` and check it reaches the cluster (network I/O).

    Args:
        config: Its librdkafka config.
        topic: A topic to ask metadata for (the control topic, known to exist).
        timeout_s: Deadline of the metadata request, s.
        factory: Creates the producer (``confluent_kafka.Producer``; tests pass fakes).

    Raises:
        ConfigRejectedError: if librdkafka rejects a property value (``KafkaException`` ``_INVALID_ARG``)
            or no broker answers the metadata request within ``timeout_s``; the producer is closed.
    """
    try:
        producer = factory(dict(config))
    except (KafkaException, ValueError, TypeError) as exc:
        raise ConfigRejectedError(f"librdkafka rejected the configuration: {_text(exc)}") from exc
    try:
        producer.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        producer.close()
        raise ConfigRejectedError(f"cannot reach the cluster within {timeout_s:g} s: {_text(exc)}") from exc
    return producer


def _text(exc: BaseException) -> str:
    arg = exc.args[0] if exc.args else exc
    return arg.str() if hasattr(arg, "str") else str(arg)


class ControlFollower:
    """Reads the control topic in a daemon thread and hands newer configurations of ``group`` over.

    Construction does no I/O; :meth:`start` starts the thread, :meth:`stop` ends it.

    Args:
        conn: librdkafka connection config (servers, security).
        group: The producer group (the control records' key).
        control_topic: The control topic; created (compacted, 1 partition) if missing.
        dlq_topic: Where malformed records of the group go.
        dead_letters: Writes dead letters (``confluent_kafka.Producer``; thread-safe ``produce``).
        build: Returns the :class:`Candidate` for a record (its inner config), without I/O.
        offer: Takes a prepared :class:`Candidate` (called on the follower thread).
        reject: Called as ``reject(record, reason)`` when a configuration cannot take over.
        running: Returns the librdkafka properties now running (to skip a swap when only hints change).
        connect_timeout_s: Deadline for a prepared producer to reach the cluster, s.
        name: Thread name.
        producer_factory: Creates inner producers (tests pass fakes).
    """

    def __init__(
        self,
        *,
        conn: Mapping[str, Any],
        group: str,
        control_topic: str,
        dlq_topic: str,
        dead_letters: Any,
        build: Callable[[ControlRecord], Candidate],
        offer: Callable[[Candidate], None],
        reject: Callable[[ControlRecord, str], None],
        running: Callable[[], dict[str, Any]],
        connect_timeout_s: float = 10.0,
        name: str = "kafka-audit.autotune",
        producer_factory: Callable[[dict[str, Any]], Any] = Producer,
    ) -> None:
        self.conn = dict(conn)
        self.group = group
        self.control_topic = control_topic
        self.dlq_topic = dlq_topic
        self._key = group.encode()
        self._dead_letters = dead_letters
        self._build, self._offer, self._reject, self._running = build, offer, reject, running
        self._connect_timeout_s = connect_timeout_s
        self._factory = producer_factory
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._best: ControlRecord | None = None
        self._dlq_ready = False
        self.tried_version = 0
        """Highest version tried (applied, rejected or rolled back); only newer ones are tried."""
        self.dead_lettered = 0
        """Malformed control records of the group sent to the dead-letter topic."""
        self.records_read = 0
        """Control records of the group read (valid or not)."""

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start following (a daemon thread)."""
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop following; wait at most ``timeout_s`` s for the thread."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        """True while the thread runs."""
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow()
            except Exception as exc:  # never let the thread die: log, wait, start over
                log.warning("control topic %r of group %r: %s; retrying", self.control_topic, self.group, exc)
                self._stop.wait(_RETRY_S)

    def _follow(self) -> None:
        ensure_topic(self.conn, self.control_topic, partitions=1, topic_config=CONTROL_TOPIC_CONFIG)
        consumer = Consumer(
            {
                **self.conn,
                "group.id": f"kafka-audit.autotune.{self.group}",  # assign() only: nothing is committed
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
            }
        )
        try:
            assigned = self._partitions(consumer)
            consumer.incremental_assign(
                [TopicPartition(self.control_topic, p, OFFSET_BEGINNING) for p in assigned]
            )
            behind = set(assigned)
            caught_up_by = time.monotonic() + _CATCH_UP_S
            refresh_at = time.monotonic() + _REFRESH_S
            while not self._stop.is_set():
                for m in consumer.consume(100, _CONSUME_TIMEOUT_S):
                    err = m.error()
                    if err is None:
                        self.handle(m)
                    elif err.code() == KafkaError._PARTITION_EOF:
                        behind.discard(m.partition())
                    elif err.fatal():
                        raise KafkaException(err)
                if not behind or time.monotonic() > caught_up_by:
                    behind.clear()
                    self.try_newest()
                if time.monotonic() > refresh_at:
                    refresh_at = time.monotonic() + _REFRESH_S
                    new = self._partitions(consumer) - assigned
                    if new:
                        consumer.incremental_assign(
                            [TopicPartition(self.control_topic, p, OFFSET_BEGINNING) for p in new]
                        )
                        assigned |= new
        finally:
            consumer.close()

    def _partitions(self, consumer: Any) -> set[int]:
        md = consumer.list_topics(self.control_topic, timeout=10).topics.get(self.control_topic)
        if md is None or md.error is not None or not md.partitions:
            raise KafkaException(
                KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"{self.control_topic} not found")
            )
        return set(md.partitions)

    # ------------------------------------------------------------------ records (no Kafka I/O but the DLQ)
    def handle(self, message: Any) -> None:
        """Take one control-topic message (``confluent_kafka.Message``): keep, skip or dead-letter it."""
        if message.key() != self._key:
            return  # another group's
        value = message.value()
        if value is None:
            return  # a tombstone: the desired configuration was deleted; keep running what runs
        self.records_read += 1
        try:
            record = decode_control(value)
            if record.group != self.group:
                raise MalformedRecordError(
                    "bad_control", f"group={record.group!r} does not match the message key {self.group!r}"
                )
        except MalformedRecordError as exc:
            self._dead_letter(message, exc.reason, exc.detail)
            return
        if record.version <= self.tried_version:
            return
        if record.expired(now_ms()):
            log.info(
                "control record %s v%d of group %r has expired; ignored",
                record.reason,
                record.version,
                self.group,
            )
            return
        if self._best is None or record.version > self._best.version:
            self._best = record

    def try_newest(self) -> None:
        """Prepare the newest record kept (if any) and hand it over, or report why it cannot take over."""
        record, self._best = self._best, None
        if record is None or record.version <= self.tried_version or record.expired(now_ms()):
            return
        self.tried_version = record.version
        try:
            candidate = self._build(record)
        except (ConfigError, ValueError) as exc:
            self._reject(record, f"invalid configuration: {exc}")
            return
        props = record.librdkafka_config()
        if all(self._running().get(k) == v for k, v in props.items()):
            self._offer(candidate)  # hints and version only: the running producer stays
            return
        try:
            candidate.producer = prepare_producer(
                candidate.config, self.control_topic, self._connect_timeout_s, self._factory
            )
        except ConfigRejectedError as exc:
            self._reject(record, str(exc))
            return
        self._offer(candidate)

    def _dead_letter(self, message: Any, reason: str, detail: str) -> None:
        dl = DeadLetter(
            COMPONENT,
            reason,
            detail,
            message.topic(),
            message.partition(),
            message.offset(),
            message.key(),
            message.value(),
        )
        if not self._dlq_ready:
            try:
                ensure_topic(self.conn, self.dlq_topic, 1)
                self._dlq_ready = True
            except Exception as exc:  # produce anyway: the broker may auto-create it
                log.warning("dead-letter topic %r not ready: %s", self.dlq_topic, exc)
        self._dead_letters.produce(
            self.dlq_topic, dl.value, dl.key, headers=dl.headers(), on_delivery=_dlq_report
        )
        self.dead_lettered += 1
        log.warning(
            "malformed control record of group %r at %s[%d]@%d dead-lettered: %s: %s",
            self.group,
            message.topic(),
            message.partition(),
            message.offset(),
            reason,
            detail,
        )


def _dlq_report(err: KafkaError | None, msg: Any) -> None:
    if err is not None:
        log.warning("dead letter of a control record not delivered: %s", err)


__all__ = [
    "COMPONENT",
    "Candidate",
    "ConfigRejectedError",
    "ControlFollower",
    "inner_config",
    "prepare_producer",
]
