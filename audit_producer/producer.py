"""The audited producer: ``confluent_kafka.Producer`` with per-window counts sent to the audit topic.

Every message gets the audit stamp header (producer instance id + sequence number, see
:mod:`audit_record.stamp`) and, unless the caller gives one, a CreateTime timestamp, so the producer
knows which event-time window it belongs to. Per (topic, window) it counts sent, acknowledged and
failed messages and value bytes, and emits cumulative snapshots (tier ``producer``) to the audit topic
every ``snapshot_interval_ms`` and a final one when the window closes (``grace_ms`` after its end, once
all its messages have delivery reports). A crash loses at most one snapshot interval of counts.

Snapshots go through a second, internal producer with ``acks=all`` and idempotence, so the audit
trail does not inherit an unreliable data configuration (``acks=0``) under test.

The constructor does no network I/O (librdkafka connects in its own threads, as for any producer). The
audit topic is checked (created if missing) by :meth:`AuditedProducer.check`: call it after
construction to fail fast on bad credentials or an unreachable cluster; otherwise the first produce
starts it in a background thread, and snapshots are held back (never lost: they are cumulative) until it
has succeeded. quix-streams' producer defers its topic checks the same way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from time import time_ns as _time_ns
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from audit_producer.librdkafka_config import reliability_config
from audit_producer.network_stats import TcpRetransmitMeter, parse_statistics
from audit_producer.settings import ProducerAuditSettings
from audit_record import PRODUCER_TIER, AuditRecord, NetworkStats, encode, now_ms
from audit_record.stamp import (
    SEQUENCE_BYTEORDER,
    SEQUENCE_BYTES,
    STAMP_HEADER,
    encode_prefix,
    new_producer_id,
)
from kafka_plumbing.errors import ConfigError
from kafka_plumbing.security import client_config
from kafka_plumbing.topics import AUDIT_TOPIC_CONFIG, connection_config, ensure_topic

log = logging.getLogger(__name__)

# Indices into the per-window count list (a list, not an object: this is the per-message hot path).
_SENT, _ACKED, _FAILED, _BYTES, _FIRST_SEQ, _LAST_SEQ, _LAST_PRODUCE_MS, _DIRTY = range(8)
_SETTLE_MARGIN_MS = 2_000
_CHECK_POLL_MS = 100  # while the audit topic check runs, look for its result this often, ms
_CHECK_RETRY_MS = 5_000  # after a failed background check, start the next one this much later, ms
_CALLBACK_KEYS = ("on_delivery", "delivery.report.cb", "dr_cb", "dr_msg_cb")


class AuditedProducer:
    """A drop-in ``confluent_kafka.Producer`` that audits what it sends.

    Same constructor config and methods as ``confluent_kafka.Producer`` (``produce``, ``poll``,
    ``flush``, ``len()``, and the rest by delegation); call :meth:`close` (or use ``with``) at the end so
    the last windows' final snapshots are sent. Like the wrapped producer, use it from one thread.

    Constructing it does no network I/O. Call :meth:`check` next to learn at once whether the cluster
    accepts the credentials and the audit topic is there (``kafka-audit produce`` and ``up`` do); if you
    do not, the first :meth:`produce` starts that check in the background, and its error, if any, is
    raised by the next :meth:`poll`, :meth:`flush` or :meth:`close`.

    Args:
        config: librdkafka producer config; copied, never mutated.
        audit: How to audit; defaults come from ``KAFKA_AUDIT_PRODUCER_*`` environment variables.

    Raises:
        ConfigError: if ``delivery_reports="errors"`` is combined with a delivery callback in ``config``,
            or a reliability setting has an invalid value (the message names the key).
    """

    def __init__(self, config: Mapping[str, Any], audit: ProducerAuditSettings | None = None) -> None:
        self.settings = audit or ProducerAuditSettings()
        cfg = client_config(config)  # security from KAFKA_AUDIT_KAFKA_* unless config names it
        self.client_id = str(cfg.get("client.id", "rdkafka"))
        self.producer_id = new_producer_id(self.client_id)
        self.reliability = reliability_config(cfg, self.settings.poll_interval_ms)
        self._user_stats_cb: Callable[[str], None] | None = cfg.pop("stats_cb", None)
        user_dr = next((cfg.pop(k) for k in _CALLBACK_KEYS if k in cfg), None)
        self._user_dr: Callable[[KafkaError | None, Message], None] | None = user_dr
        mode = self.settings.delivery_reports
        if mode == "errors" and user_dr is not None:
            raise ConfigError(
                "delivery_reports='errors' cannot be combined with a delivery callback in the config "
                "(allowed: delivery_reports='all' when you pass on_delivery)"
            )
        if mode == "errors":
            cfg["delivery.report.only.error"] = True
        cfg["on_delivery"] = self._on_delivery
        cfg["stats_cb"] = self._on_stats
        cfg.setdefault("statistics.interval.ms", 5_000)
        self._producer = Producer(cfg)

        conn = self._conn = connection_config(cfg)
        self._audit_producer = Producer(
            {
                **conn,
                "client.id": f"{self.client_id}.audit",
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 20,
                "message.timeout.ms": 120_000,
            }
        )
        # The audit topic check (network I/O) happens in check(), not here.
        self._checked = False
        self._check_lock = threading.Lock()
        self._check_thread: threading.Thread | None = None
        self._check_error: BaseException | None = None
        self._check_retry_ms = 0

        self._prefix = encode_prefix(self.producer_id)
        self._seq = 0
        self._window_ms = self.settings.window_ms
        self._windows: dict[tuple[str, int], list[int]] = {}
        self._network = NetworkStats()
        self._tcp = TcpRetransmitMeter()  # packet loss estimate L of this network namespace
        self._errors_only = mode == "errors"
        self._next_tick_ms = 0
        self._closed = False
        self._produce = self._producer.produce
        self._last_topic: str | None = None
        self._last_start = -1
        self._last_window: list[int] = []
        self.snapshots_sent = 0
        self.audit_delivery_failures = 0

    # ------------------------------------------------------------------ the caller's API
    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: Callable[..., None] | None = None,
        timestamp: int = 0,
        headers: Any = None,
        **kwargs: Any,
    ) -> None:
        """Produce one message, stamped and counted; same arguments as ``confluent_kafka.Producer.produce``.

        ``timestamp`` is CreateTime in ms since the Unix epoch UTC (0 = now). The stamp header goes first,
        before the caller's ``headers`` (list of tuples or dict).

        Raises:
            BufferError: if the local queue is full (nothing is counted; poll and retry, as usual).
            ConfigError: if a per-call ``on_delivery`` is given in ``delivery_reports="errors"`` mode.
            KafkaException: as ``confluent_kafka.Producer.produce``.
        """
        callback = on_delivery or kwargs.pop("callback", None)
        now = _time_ns() // 1_000_000
        ts = timestamp or now
        seq = self._seq + 1
        stamp = self._prefix + seq.to_bytes(SEQUENCE_BYTES, SEQUENCE_BYTEORDER)  # audit_record.stamp.encode
        if headers is None:
            hdrs: list[tuple[str, Any]] = [(STAMP_HEADER, stamp)]
        elif isinstance(headers, dict):
            hdrs = [(STAMP_HEADER, stamp), *headers.items()]
        else:
            hdrs = [(STAMP_HEADER, stamp), *headers]
        if callback is None:
            self._produce(topic, value, key, partition, timestamp=ts, headers=hdrs, **kwargs)
        elif self._errors_only:
            raise ConfigError("per-call on_delivery needs delivery_reports='all' (allowed: 'all', 'errors')")
        else:
            self._produce(
                topic,
                value,
                key,
                partition,
                on_delivery=self._wrap(callback),
                timestamp=ts,
                headers=hdrs,
                **kwargs,
            )
        self._seq = seq
        start = ts - ts % self._window_ms  # audit_record.windows.window_start, inlined
        if start == self._last_start and topic == self._last_topic:
            w = self._last_window
        else:
            w = self._windows.get((topic, start))
            if w is None:
                w = self._windows[(topic, start)] = [0, 0, 0, 0, seq, seq, 0, 1]
            self._last_topic, self._last_start, self._last_window = topic, start, w
        w[0] += 1  # _SENT
        if value is not None:
            w[3] += len(value)  # _BYTES
        w[5] = seq  # _LAST_SEQ
        w[6] = now  # _LAST_PRODUCE_MS
        w[7] = 1  # _DIRTY
        if now >= self._next_tick_ms:
            self._tick(now)

    @property
    def last_sequence(self) -> int:
        """Sequence number stamped on the last message produce() accepted (0 before the first)."""
        return self._seq

    def poll(self, timeout: float = 0) -> int:
        """Serve delivery reports and statistics (``confluent_kafka.Producer.poll``); may emit snapshots.

        Raises:
            KafkaAuditError: the error of a failed background audit topic check (see :meth:`check`),
                once; the check is tried again later.
        """
        served = self._producer.poll(timeout)
        if self._check_error is not None:
            self._raise_check_error()
        now = now_ms()
        if now >= self._next_tick_ms:
            self._tick(now)
        return served

    def flush(self, timeout: float = -1) -> int:
        """Wait for every queued message (``confluent_kafka.Producer.flush``), then emit due snapshots.

        Returns:
            Messages still queued (0 unless the timeout passed).

        Unless ``timeout`` is 0, it also waits (at most ``timeout`` s more) for the background audit topic
        check, so that the due snapshots are handed to the audit producer on return.

        Raises:
            KafkaAuditError: the error of a failed background audit topic check, as :meth:`poll`.
        """
        left = self._producer.flush(timeout) if timeout >= 0 else self._producer.flush()
        if timeout != 0 and self._windows and not self._checked:
            self._start_check(now_ms())
            if self._check_thread is not None:
                self._check_thread.join(None if timeout < 0 else timeout)
        if self._check_error is not None:
            self._raise_check_error()
        self._tick(now_ms())
        return left

    def check(self, timeout_s: float = 30.0) -> None:
        """Check the cluster and the audit topic now: create the topic if missing (network I/O).

        Idempotent: once it has succeeded it returns at once. Thread-safe; if the background check that
        the first :meth:`produce` starts is running, this waits for it.

        Args:
            timeout_s: Deadline of each admin request, s.

        Raises:
            KafkaAuthenticationError: if the broker rejects the SASL credentials.
            KafkaTlsError: if the TLS handshake fails (certificate not trusted).
            KafkaConnectionError: if no broker answers within ``timeout_s``.
            TopicError: if the audit topic is missing and cannot be created.
        """
        with self._check_lock:
            if self._checked:
                return
            ensure_topic(
                self._conn,
                self.settings.audit_topic,
                partitions=3,
                topic_config=AUDIT_TOPIC_CONFIG,
                timeout_s=timeout_s,
            )
            self._checked = True
            self._check_error = None

    def __len__(self) -> int:
        return len(self._producer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def __enter__(self) -> AuditedProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush data, then send final snapshots of every window and flush the audit producer.

        Windows still open are closed as final: this producer sends nothing more. Idempotent. The clients
        are closed even if it raises.

        Args:
            timeout_s: Deadline of each flush (and of the audit topic check if it has not run yet), s.

        Raises:
            KafkaAuditError: as :meth:`check`, if windows were counted but the audit topic check has not
                succeeded yet and fails now (their final snapshots cannot be sent).
        """
        if self._closed:
            return
        try:
            self._producer.flush(timeout_s)
            self._producer.poll(0)
            if self._windows and not self._checked:
                self._check_error = None
                self.check(timeout_s)  # the final snapshots need the audit topic
            self._tick(now_ms(), close_all=True)
            self._audit_producer.flush(timeout_s)
        finally:
            self._audit_producer.close()
            self._producer.close()
            self._closed = True

    # ------------------------------------------------------------------ delivery reports and stats
    def _count_report(self, err: KafkaError | None, msg: Message) -> None:
        ts = msg.timestamp()[1]
        w = self._windows.get((msg.topic(), ts - ts % self._window_ms))
        if w is not None:  # None only for a window force-closed by close() after its timeout
            w[_FAILED if err is not None else _ACKED] += 1
            w[_DIRTY] = 1

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        self._count_report(err, msg)
        if self._user_dr is not None:
            self._user_dr(err, msg)

    def _wrap(self, callback: Callable[..., None]) -> Callable[[KafkaError | None, Message], None]:
        def report(err: KafkaError | None, msg: Message) -> None:
            self._count_report(err, msg)
            callback(err, msg)

        return report

    def _on_stats(self, stats_json: str) -> None:
        self._network = parse_statistics(stats_json, self._tcp.sample())
        if self._user_stats_cb is not None:
            self._user_stats_cb(stats_json)

    # ------------------------------------------------------------------ the audit topic check
    def _start_check(self, now: int) -> None:
        """Start :meth:`check` in a background thread unless one runs, failed unreported, or failed lately."""
        running = self._check_thread is not None and self._check_thread.is_alive()
        if running or self._check_error is not None or now < self._check_retry_ms:
            return
        self._check_thread = threading.Thread(
            target=self._background_check, name=f"{self.client_id}.audit-topic-check", daemon=True
        )
        self._check_thread.start()

    def _background_check(self) -> None:
        try:
            self.check()
        except Exception as exc:  # handed to the caller's thread by poll/flush
            self._check_retry_ms = now_ms() + _CHECK_RETRY_MS
            self._check_error = exc
            log.warning("audit topic %r not ready: %s", self.settings.audit_topic, exc)

    def _raise_check_error(self) -> None:
        exc, self._check_error = self._check_error, None
        if exc is not None:
            raise exc

    # ------------------------------------------------------------------ snapshots
    def _settled(self, w: list[int], now: int, queue_empty: bool) -> bool:
        if not self._errors_only:
            return w[_ACKED] + w[_FAILED] >= w[_SENT]
        return (
            queue_empty or now - w[_LAST_PRODUCE_MS] > self.reliability.message_timeout_ms + _SETTLE_MARGIN_MS
        )

    def _tick(self, now: int, close_all: bool = False) -> None:
        """Emit snapshots of changed windows; close windows past end + grace whose messages are settled."""
        self._next_tick_ms = now + self.settings.snapshot_interval_ms
        self._producer.poll(0)
        if not self._checked:  # no snapshot before the audit topic is known to be there
            if self._windows and not close_all:  # close() checks itself, synchronously
                self._start_check(now)
            self._next_tick_ms = now + min(_CHECK_POLL_MS, self.settings.snapshot_interval_ms)
            return
        queue_empty = len(self._producer) == 0
        for (topic, start), w in list(self._windows.items()):
            end = start + self._window_ms
            settled = self._settled(w, now, queue_empty)
            closing = close_all or (now >= end + self.settings.grace_ms and settled)
            if not (w[_DIRTY] or closing):
                continue
            if self._errors_only:
                in_flight = 0 if settled else len(self._producer)
                w[_ACKED] = max(0, w[_SENT] - w[_FAILED] - in_flight)
            self._emit(topic, start, end, w, final=closing)
            w[_DIRTY] = 0
            if closing:
                del self._windows[(topic, start)]
                if self._last_window is w:
                    self._last_topic, self._last_start = None, -1
        self._audit_producer.poll(0)

    def _emit(self, topic: str, start: int, end: int, w: list[int], final: bool) -> None:
        record = AuditRecord(
            tier=PRODUCER_TIER,
            source=self.client_id,
            producer_id=self.producer_id,
            topic=topic,
            window_start_ms=start,
            window_end_ms=end,
            final=final,
            sent=w[_SENT],
            acknowledged=min(w[_ACKED], w[_SENT] - w[_FAILED]),
            failed=w[_FAILED],
            bytes=w[_BYTES],
            first_sequence=w[_FIRST_SEQ],
            last_sequence=w[_LAST_SEQ],
            producer_config=self.reliability,
            network=self._network,
        )
        self._audit_producer.produce(
            self.settings.audit_topic,
            encode(record),
            record.key().encode(),
            timestamp=record.emitted_at_ms,
            on_delivery=self._on_audit_delivery,
        )
        self.snapshots_sent += 1

    def _on_audit_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.audit_delivery_failures += 1
            log.warning(
                "audit snapshot for %s not delivered: %s (the next snapshot heals it)", msg.key(), err
            )


__all__ = ["AuditedProducer"]
