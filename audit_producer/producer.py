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
has succeeded. quix-streams' producer defers its topic checks the same way. The audit topic's side
(the check, the internal producer) is :mod:`~audit_producer.audit_topic_writer`'s; the statistics
(network, partition leaders) are :mod:`~audit_producer.client_statistics`'.

Autotuned (``autotune=True`` or ``KAFKA_AUDIT_PRODUCER_AUTOTUNE=1``), it follows the control topic for its
group (:mod:`audit_producer.autotune`) and swaps its inner producer for one with the configuration asked
for, keeping the producer id and the sequence, so the audit stays exact across the swap (docs/DESIGN.md,
"Autotuned producer"; the bookkeeping is in :mod:`~audit_producer.config_history`,
:mod:`~audit_producer.draining` and :mod:`~audit_producer.probation`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from time import time_ns as _time_ns
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from audit_producer.application_callbacks import ApplicationCallbacks, take_application_callbacks
from audit_producer.audit_topic_writer import AuditTopicWriter, close_client
from audit_producer.client_statistics import ClientStatistics
from audit_producer.delivery_reports import DeliveryReports
from audit_producer.inner_forwarding import InnerProducerMethods
from audit_producer.librdkafka_config import reliability_config
from audit_producer.network_stats import TcpRetransmitMeter
from audit_producer.producer_status import ProducerStatus
from audit_producer.reconfiguration import LiveReconfiguration
from audit_producer.settings import ProducerAuditSettings
from audit_producer.snapshot_emitter import SnapshotEmitter
from audit_producer.stamp_packer import stamp_blocks
from audit_producer.tcp_backlog import open_backlog
from audit_producer.tcp_drain import TcpDrainWait
from audit_producer.window_counts import BYTES as _BYTES
from audit_producer.window_counts import COUNT_CB as _COUNT_CB
from audit_producer.window_counts import DIRTY as _DIRTY
from audit_producer.window_counts import LAST_PRODUCE_MS as _LAST_PRODUCE_MS
from audit_producer.window_counts import LAST_SEQ as _LAST_SEQ
from audit_producer.window_counts import REPORT_CB as _REPORT_CB
from audit_producer.window_counts import SENT as _SENT
from audit_producer.window_counts import (
    chain,
    new_window,
)
from audit_record import ProducerConfig, now_ms
from audit_record.stamp import encode_prefix, header_key, new_producer_id
from kafka_plumbing.errors import ConfigError
from kafka_plumbing.security import client_config
from kafka_plumbing.topics import connection_config

log = logging.getLogger(__name__)

_NO_WINDOW = -(1 << 62)  # the hot window's end when there is none: no clock reading falls before it
_CHECK_POLL_MS = 100  # while the audit topic check runs, look for its result this often, ms
_RECONFIGURE_TICK_MS = 250  # with autotune: look for a handed-over configuration this often, ms
_NEVER = 1 << 62  # a tick time that never comes, ms


class AuditedProducer(ProducerStatus, InnerProducerMethods):
    """A drop-in ``confluent_kafka.Producer`` that audits what it sends.

    Same constructor config and methods as ``confluent_kafka.Producer`` (``produce``, ``poll``,
    ``flush``, ``len()``, and the rest by delegation); call :meth:`close` (or use ``with``) at the end so
    the last windows' final snapshots are sent. Like the wrapped producer, use it from one thread.

    Constructing it does no network I/O. Call :meth:`check` next to learn at once whether the cluster
    accepts the credentials and the audit topic is there (``kafka-audit produce`` and ``up`` do); if you
    do not, the first :meth:`produce` starts that check in the background, and its error, if any, is
    raised by the next :meth:`poll`, :meth:`flush` or :meth:`close`.

    Autotuned, it applies the configurations the control topic asks for its group (see the module
    docstring and docs/DESIGN.md, "Autotuned producer"); :attr:`current_config`,
    :attr:`active_control_version`, :attr:`hints` and :attr:`config_events` say what runs and what
    happened. Windows that ran with several configurations are reported with one extra snapshot per
    extra configuration (see :meth:`~audit_producer.snapshot_emitter.SnapshotEmitter.emit`).

    Args:
        config: librdkafka producer config; copied, never mutated.
        audit: How to audit; defaults come from ``KAFKA_AUDIT_PRODUCER_*`` environment variables.
        autotune: Follow the control topic (overrides ``audit.autotune``; None = the setting).
        on_reconfigure: Called as ``on_reconfigure(event)`` on the caller's thread (from ``produce``,
            ``poll``, ``flush``) for every configuration event: a dict with ``kind`` (``applied``,
            ``rejected``, ``rolled_back``), ``group``, ``producer_id``, ``version`` (the control record's),
            ``from`` and ``to`` (the librdkafka properties of
            :func:`~audit_producer.librdkafka_config.controlled_properties`),
            ``reason`` (why, in words), ``record_reason`` (the record's label) and ``at_ms`` (ms since the
            epoch UTC). An exception it raises is logged, not propagated.
        on_hints: Called as ``on_hints(hints)`` on the caller's thread when the hints for the application
            change (``{"poll_interval_ms": ms or None, "producers": n or None}``; see :attr:`hints`);
            both None when a rollback withdraws them (the application's own settings apply again).

    Raises:
        ConfigError: if ``delivery_reports="errors"`` is combined with a delivery callback in ``config``,
            a reliability setting has an invalid value (the message names the key), or ``autotune`` is
            combined with ``transactional.id`` (a swap would fence the running transaction).

    Example:
        Needs a broker at ``localhost:9092``; the audit topic is created if missing::

            >>> from audit_producer import AuditedProducer, ProducerAuditSettings
            >>> audit = ProducerAuditSettings(window_ms=10_000)
            >>> with AuditedProducer({"bootstrap.servers": "localhost:9092"}, audit) as p:  # doctest: +SKIP
            ...     p.check()  # fail fast on bad credentials or an unreachable cluster
            ...     p.produce("orders", b'{"id": 1}', key=b"1")
            ...     p.flush(10)  # leaving the block closes it: the final snapshots are sent
            0
    """

    # Slots, not a __dict__: an instance with more than 30 attributes gets a real dict, and CPython 3.11
    # then specialises no LOAD_METHOD on it, so every caller's p.produce(...) would take the generic
    # lookup. A new attribute must be named here.
    __slots__ = (
        "__weakref__",
        "_audit_topic",
        "_autotune",
        "_base_config",
        "_closed",
        "_conn",
        "_draining",
        "_errors_only",
        "_generation",
        "_history",
        "_hot_bytes",
        "_hot_end",
        "_hot_hi",
        "_hot_lo",
        "_hot_report",
        "_hot_seq",
        "_hot_start",
        "_hot_topic",
        "_hot_w",
        "_next_reconfigure_ms",
        "_next_snapshot_ms",
        "_prefix",
        "_produce",
        "_producer",
        "_reconfiguration",
        "_reports",
        "_seq",
        "_snapshots",
        "_stamp_block",
        "_stamp_key",
        "_stamps",
        "_statistics",
        "_tcp_drain",
        "_tick_at",
        "_window_ms",
        "_windows",
        "client_id",
        "group",
        "producer_id",
        "reliability",
        "settings",
    )

    def __init__(
        self,
        config: Mapping[str, Any],
        audit: ProducerAuditSettings | None = None,
        *,
        autotune: bool | None = None,
        on_reconfigure: Callable[[dict[str, Any]], None] | None = None,
        on_hints: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.settings = audit or ProducerAuditSettings()
        cfg = client_config(config)  # security from KAFKA_AUDIT_KAFKA_* unless config names it
        self.client_id = str(cfg.get("client.id", "rdkafka"))
        self.producer_id = new_producer_id(self.client_id, self.settings.stamp_version)
        self.reliability = reliability_config(cfg, self.settings.poll_interval_ms)
        self.group = self.settings.group or self.client_id
        self._autotune = self.settings.autotune if autotune is None else autotune
        if self._autotune and "transactional.id" in cfg:
            raise ConfigError("autotune cannot be combined with transactional.id (allowed: one or the other)")
        # Autotune (docs/DESIGN.md, "Autotuned producer"): swap, probation, rollback and the configuration
        # history are the reconfiguration's; the history and the draining producers are read here too;
        # a failed delivery is judged against the configuration on probation.
        self._reconfiguration = LiveReconfiguration(
            self, autotune=self._autotune, on_reconfigure=on_reconfigure, on_hints=on_hints
        )
        self._history = self._reconfiguration.history
        self._draining = self._reconfiguration.draining

        # The application's callbacks are called after the audit's have counted
        app = take_application_callbacks(cfg, self.settings.delivery_reports)
        self._window_ms = self.settings.window_ms
        self._windows: dict[tuple[str, int], list[Any]] = {}
        self._reports = DeliveryReports(
            self._windows, self._window_ms, app.on_delivery, self._reconfiguration.on_failure
        )
        # The statistics of the active inner producer: network (D, L) per window, partition leaders
        self._statistics = ClientStatistics(app.statistics_interval_ms, TcpRetransmitMeter(), app.stats_cb)
        self._set_inner_callbacks(cfg, app)
        self._base_config = dict(cfg)  # what inner producers of other configurations start from
        self._producer = Producer(cfg)

        self._conn = connection_config(cfg)
        # The audit topic check (network I/O) happens in check(), not here.
        self._audit_topic = AuditTopicWriter(self._conn, self.client_id, self.settings.audit_topic)

        self._prefix, self._stamp_key = encode_prefix(self.producer_id), header_key(self.producer_id)
        self._stamp_block = stamp_blocks(self._prefix, self.settings.stamp_version)  # stamp.encode, by 128
        self._seq = 0
        self._stamps = self._stamp_block(1)  # the stamps of the block of _seq + 1
        # The hot window (see "The hot path" below): the (topic, window) of the last message produced,
        # with the counts not yet added to its list.
        self._hot_w: list[Any] | None = None
        self._hot_topic: str | None = None
        self._hot_start = 0
        self._hot_end = _NO_WINDOW
        self._hot_lo = _NEVER  # produce() takes the fast path while _hot_lo <= now < _hot_hi
        self._hot_hi = _NO_WINDOW
        self._hot_seq = 0  # _seq when the hot window's counts were last added to its list
        self._hot_bytes = 0  # value bytes produced into the hot window since then
        self._hot_report: Callable[[KafkaError | None, Message], None] | None = None
        self._generation = 1  # first sequence number of the running inner producer
        self._tick_at = 0
        self._errors_only = self.settings.delivery_reports == "errors"
        self._next_tick_ms = 0  # produce()/poll() call _due() from then on: min of the two below
        self._next_snapshot_ms = 0
        self._next_reconfigure_ms = 0 if self._autotune else _NEVER
        self._closed = False
        self._produce = self._producer.produce

        # TCP drain (docs/DESIGN.md, invariant 8): per settled window, the mark of every byte written when
        # it settled, when that was (ms) and the bytes still unacknowledged at the last tick.
        wait_ms = self.settings.tcp_drain_wait_ms
        self._tcp_drain = TcpDrainWait(open_backlog() if wait_ms > 0 else None, wait_ms)
        self._snapshots = SnapshotEmitter(
            windows=self._windows,
            window_ms=self._window_ms,
            grace_ms=self.settings.grace_ms,
            errors_only=self._errors_only,
            client_id=self.client_id,
            producer_id=self.producer_id,
            history=self._history,
            statistics=self._statistics,
            tcp_drain=self._tcp_drain,
            audit_topic=self._audit_topic,
        )

    def __new__(cls, config: Mapping[str, Any], audit: ProducerAuditSettings | None = None, **_: Any) -> Any:
        """Return a new instance: a ``PluginAuditedProducer`` (the plugin counts) if ``counting="plugin"``."""
        if cls is AuditedProducer and (audit or ProducerAuditSettings()).counting == "plugin":
            from audit_producer.rdkafka_plugin_producer import PluginAuditedProducer

            cls = PluginAuditedProducer
        return super().__new__(cls)

    def _set_inner_callbacks(self, cfg: dict[str, Any], app: ApplicationCallbacks) -> None:
        """Set the inner producers' delivery and statistics callbacks in ``cfg``: the audit's, which count."""
        cfg["on_delivery"] = self._reports.on_delivery
        cfg["stats_cb"] = self._statistics.callback(self._statistics.token)

    # ------------------------------------------------------------------ the caller's API
    # The hot path. produce() costs what CPython makes it cost, so it does as little as it can; every
    # trick keeps the counts exactly those of counting each message at once (a property test compares
    # them with that plain reference: tests/unit/test_hot_path_properties.py).
    #
    # * Positional call of the inner produce: confluent-kafka parses keywords by name, about 0.04 us per
    #   keyword slot before the one given, so timestamp= and headers= by keyword cost more than the
    #   header itself. Its positional slots are (topic, value, key, partition, callback, on_delivery,
    #   timestamp, headers); a callback goes in the 5th (``None`` there would also disable the 6th).
    # * The hot window: the (topic, window) bucket of the last message produced is cached with the
    #   interval of clock readings ``[_hot_lo, _hot_hi)`` in which a message without a timestamp of its
    #   own belongs to it: from its window start to the earlier of its window end and the next tick.
    #   One clock reading per message gives both the CreateTime (set explicitly, so the window counted
    #   is the window of the CreateTime the consumer reads, whatever the clock does) and, with one
    #   chained comparison, the bucket and whether a tick is due; no modulo, no dict lookup. Anything
    #   else (another topic, a timestamp, headers, a per-call callback, the clock past the window end or
    #   the tick) takes _produce_slow, which also makes its message's bucket the hot one.
    # * Counts added per window, not per message: the messages produced since the hot window was
    #   entered or last flushed are ``_seq - _hot_seq`` (every message produced goes to the hot window,
    #   so they are consecutive and the last one is ``_seq``); only the value bytes are added up per
    #   message. _flush_hot adds them to the window's list when the hot window changes and at every
    #   tick, before anything reads the lists. ``_LAST_PRODUCE_MS`` becomes the flush time, never earlier
    #   than the last produce: an errors-only window that still has messages held settles no earlier.
    # * The stamp by index in the block of 128 stamps of the sequence (stamp_blocks: no call per message),
    #   the sequence number committed only after the inner produce returned: BufferError (or any error)
    #   uses none up and counts nothing.
    # * Delivery reports need no lookup: each (window, inner producer) has its own callback, bound to the
    #   window's list, passed with every message (librdkafka keeps one per message anyway). A report
    #   adds 1 to acknowledged or failed of that list; it reads neither the message's timestamp nor its
    #   topic (a failed report has no timestamp: librdkafka gives -1) nor its headers (None in reports).
    #   With delivery_reports="errors" librdkafka calls it for failures only.
    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: Callable[..., None] | None = None,
        timestamp: int = 0,
        headers: Any = None,
        callback: Callable[..., None] | None = None,
    ) -> None:
        """Produce one message, stamped and counted; same arguments as ``confluent_kafka.Producer.produce``.

        ``timestamp`` is CreateTime in ms since the Unix epoch UTC (0 = now). The stamp header goes first,
        before the caller's ``headers`` (list of tuples or dict). ``callback`` is an alias of
        ``on_delivery``, as in confluent-kafka (pass it by keyword; it is not keyword-only here because
        CPython looks keyword-only defaults up in a dict on every call).

        Raises:
            BufferError: if the local queue is full (nothing is counted; poll and retry, as usual).
            ConfigError: if a per-call ``on_delivery`` is given in ``delivery_reports="errors"`` mode.
            KafkaException: as ``confluent_kafka.Producer.produce``.
        """
        now = _time_ns() // 1_000_000
        if (
            self._hot_lo <= now < self._hot_hi
            and topic == self._hot_topic
            and not timestamp
            and headers is None
            and on_delivery is None
            and callback is None
        ):
            seq = self._seq + 1
            low = seq & 0x7F
            if not low:  # the block of the next 128 sequences
                self._stamps = self._stamp_block(seq)
            # Callables held in instance attributes are called through locals: CPython 3.11 specialises
            # LOAD_ATTR for them, but not the LOAD_METHOD that self._produce(...) would compile to.
            produce, stamp = self._produce, [(self._stamp_key, self._stamps[low])]
            produce(topic, value, key, partition, self._hot_report, None, now, stamp)
            self._seq = seq
            if value is not None:
                self._hot_bytes += len(value)
            return
        self._produce_slow(topic, value, key, partition, on_delivery or callback, timestamp, headers, now)

    def _produce_slow(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int,
        callback: Callable[..., None] | None,
        timestamp: int,
        headers: Any,
        now: int,
    ) -> None:
        """produce() for every message the fast path does not take; makes its window the hot one."""
        if callback is not None and self._errors_only:
            raise ConfigError("per-call on_delivery needs delivery_reports='all' (allowed: 'all', 'errors')")
        ts = timestamp or now
        start = ts - ts % self._window_ms  # audit_record.windows.window_start, inlined
        seq = self._seq + 1
        hot = start == self._hot_start and topic == self._hot_topic
        known = w = self._hot_w
        if not hot or w is None:
            hot = False
            known = self._windows.get((topic, start))
            w = known if known is not None else self._snapshots.reopen((topic, start)) or new_window(seq, now)
            self._reports.bind(w, self._generation)
        if not seq & 0x7F:
            self._stamps = self._stamp_block(seq)
        stamp = (self._stamp_key, self._stamps[seq & 0x7F])
        if headers is None:
            hdrs: list[tuple[str, Any]] = [stamp]
        elif isinstance(headers, dict):
            hdrs = [stamp, *headers.items()]
        else:
            hdrs = [stamp, *headers]
        report = w[_REPORT_CB] if callback is None else chain(w[_COUNT_CB], callback)
        self._produce(topic, value, key, partition, report, None, ts, hdrs)
        if not hot:  # the message is out: its window becomes the hot one (a new one is kept from now on)
            self._flush_hot(now)
            if known is None:
                self._windows[(topic, start)] = w
            self._hot_w, self._hot_topic, self._hot_start = w, topic, start
            self._hot_report = w[_REPORT_CB]
            self._hot_seq, self._hot_bytes = self._seq, 0
            self._hot_lo, self._hot_end = start, start + self._window_ms
            # A wake from the follower thread between this read of _tick_at and the write may be missed by
            # the fast path until the tick time read here (at most 250 ms away when autotuned).
            self._hot_hi = min(self._hot_end, self._tick_at)
        self._seq = seq
        if value is not None:
            self._hot_bytes += len(value)
        if now >= self._tick_at:
            self._due(now)

    def _flush_hot(self, now: int) -> None:
        """Add the hot window's counts since the last flush to its list (before anything reads it)."""
        w = self._hot_w
        n = self._seq - self._hot_seq
        if w is None or n == 0:
            return
        w[_SENT] += n
        w[_BYTES] += self._hot_bytes
        w[_LAST_SEQ] = self._seq  # the last message produced is the hot window's (see "The hot path")
        if now > w[_LAST_PRODUCE_MS]:
            w[_LAST_PRODUCE_MS] = now
        w[_DIRTY] = 1
        self._hot_seq, self._hot_bytes = self._seq, 0

    def _drop_hot(self, now: int) -> None:
        """Flush the hot window and forget it: the next produce() takes the slow path."""
        self._flush_hot(now)
        self._hot_w = self._hot_topic = self._hot_report = None
        self._hot_lo, self._hot_end, self._hot_hi = _NEVER, _NO_WINDOW, _NO_WINDOW

    @property
    def _next_tick_ms(self) -> int:
        """produce() and poll() call _due() from this time on, ms: min(next snapshot, next reconfigure)."""
        return self._tick_at

    @_next_tick_ms.setter
    def _next_tick_ms(self, ms: int) -> None:
        # Any thread (the autotune follower sets 0 to wake the caller's thread); the fast path reads only
        # _hot_hi, so it is kept at min(hot window end, tick time) with every change of the tick time.
        self._tick_at = ms
        self._hot_hi = ms if ms < self._hot_end else self._hot_end

    def poll(self, timeout: float = 0) -> int:
        """Serve delivery reports and statistics (``confluent_kafka.Producer.poll``); may emit snapshots.

        Raises:
            KafkaAuditError: the error of a failed background audit topic check (see :meth:`check`),
                once; the check is tried again later.
        """
        served = self._producer.poll(timeout)
        if self._draining:
            served += self._draining.poll()
        if self._audit_topic.check_error is not None:
            self._audit_topic.raise_check_error()
        now = now_ms()
        if now >= self._next_tick_ms:
            self._due(now)
        return served

    def flush(self, timeout: float = -1) -> int:
        """Wait for every queued message (``confluent_kafka.Producer.flush``), then emit due snapshots.

        Returns:
            Messages still queued (0 unless the timeout passed), inner producers replaced by a
            configuration change included.

        Unless ``timeout`` is 0, it also waits (at most ``timeout`` s more) for the background audit topic
        check, so that the due snapshots are handed to the audit producer on return.

        Raises:
            KafkaAuditError: the error of a failed background audit topic check, as :meth:`poll`.
        """
        left = self._producer.flush(timeout) if timeout >= 0 else self._producer.flush()
        if self._draining:
            left += self._draining.flush(timeout)
        if timeout != 0 and self._windows and not self._audit_topic.checked:
            self._audit_topic.start_check(now_ms(), self.check)
            self._audit_topic.join_check(None if timeout < 0 else timeout)
        if self._audit_topic.check_error is not None:
            self._audit_topic.raise_check_error()
        self._tick(now_ms())
        return left

    def check(self, timeout_s: float = 30.0) -> None:
        """Check the cluster and the audit topic now: create the topic if missing (network I/O).

        Idempotent: once it has succeeded it returns at once. Thread-safe; if the background check that
        the first :meth:`produce` starts is running, this waits for it. Autotuned, it also starts
        following the control topic (in the background).

        Args:
            timeout_s: Deadline of each admin request, s.

        Raises:
            KafkaAuthenticationError: if the broker rejects the SASL credentials.
            KafkaTlsError: if the TLS handshake fails (certificate not trusted).
            KafkaConnectionError: if no broker answers within ``timeout_s``.
            TopicError: if the audit topic is missing and cannot be created.
        """
        if self._autotune:
            self._reconfiguration.start_follower()
        self._audit_topic.check(timeout_s)

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush data, then send final snapshots of every window and flush the audit producer.

        Windows still open are closed as final: this producer sends nothing more. Idempotent. The clients
        are closed even if it raises; what they still hold after the flushes is purged first
        (``confluent_kafka.Producer.close`` would otherwise wait for it without a deadline).

        Args:
            timeout_s: Deadline of each flush (and of the audit topic check if it has not run yet), s.

        Raises:
            KafkaAuditError: as :meth:`check`, if windows were counted but the audit topic check has not
                succeeded yet and fails now (their final snapshots cannot be sent).
        """
        if self._closed:
            return
        try:
            self._reconfiguration.stop_follower()
            self._producer.flush(timeout_s)
            self._producer.poll(0)
            self._draining.close_all(timeout_s)  # their last reports counted before the final snapshots
            self._tcp_drain.await_all(self._windows, timeout_s)
            if self._windows and not self._audit_topic.checked:
                self._audit_topic.check_error = None
                self.check(timeout_s)  # the final snapshots need the audit topic
            self._tick(now_ms(), close_all=True)
            self._audit_topic.flush(timeout_s)
        finally:
            self._closed = True
            self._draining.close_all(0)
            self._reconfiguration.close()
            self._audit_topic.close()
            close_client(self._producer)
            self._tcp_drain.close()

    # ------------------------------------------------------------------ snapshots
    def _due(self, now: int) -> None:
        """Run what is due at ``now`` (ms): configuration changes, then snapshots (from produce/poll)."""
        if now >= self._next_reconfigure_ms:
            self._reconfigure_tick(now)
        if now >= self._next_snapshot_ms:
            self._tick(now)
        self._next_tick_ms = min(self._next_snapshot_ms, self._next_reconfigure_ms)

    def _tick(self, now: int, close_all: bool = False) -> None:
        """Emit snapshots of changed windows; close windows past end + grace whose messages are settled."""
        self._flush_hot(now)
        self._next_snapshot_ms = self._snapshots.next_tick_ms(now, self.settings.snapshot_interval_ms)
        self._next_tick_ms = min(self._next_snapshot_ms, self._next_reconfigure_ms)
        self._producer.poll(0)
        if self._draining:
            self._draining.poll()
        if not self._audit_topic.checked:  # no snapshot before the audit topic is known to be there
            if self._windows and not close_all:  # close() checks itself, synchronously
                self._audit_topic.start_check(now, self.check)
            self._next_snapshot_ms = now + min(_CHECK_POLL_MS, self.settings.snapshot_interval_ms)
            self._next_tick_ms = min(self._next_snapshot_ms, self._next_reconfigure_ms)
            return
        timeout_ms = max(self.reliability.message_timeout_ms, self._draining.max_message_timeout_ms())
        for w in self._snapshots.emit_due(
            now, len(self), close_all=close_all, timeout_ms=timeout_ms, next_sequence=self.last_sequence + 1
        ):
            if self._hot_w is w:
                self._drop_hot(now)

    # ------------------------------------------------------------------ autotune (LiveReconfiguration)
    # Its read-only status (current_config, active_control_version, hints, config_events,
    # control_records_dead_lettered) is ProducerStatus's.
    def set_poll_interval(self, poll_interval_ms: float | None) -> None:
        """Report that the application now polls every ``poll_interval_ms`` ms (the paper's delta).

        Snapshots report it with the configuration from the next message on; a window that ran with
        two polling intervals ran with two configurations (see
        :meth:`~audit_producer.snapshot_emitter.SnapshotEmitter.emit`).
        """
        if poll_interval_ms == self.reliability.poll_interval_ms:
            return
        self.reliability = dataclasses.replace(self.reliability, poll_interval_ms=poll_interval_ms)
        self._history.change(self.last_sequence + 1, self.reliability)

    def _wake(self) -> None:
        """Make the caller's next produce/poll run the reconfiguration tick (any thread)."""
        self._next_reconfigure_ms = 0
        self._next_tick_ms = 0

    def _reconfigure_tick(self, now: int) -> None:
        """Run the reconfiguration's tick (:meth:`LiveReconfiguration.tick`) and schedule the next one."""
        self._next_reconfigure_ms = now + _RECONFIGURE_TICK_MS
        self._reconfiguration.tick(now)

    def _switch_inner(self, producer: Any, reliability: ProducerConfig, token: object, now: int) -> None:
        """Send messages from the next sequence number on to ``producer`` (the data path's part of a swap).

        Args:
            producer: The inner producer taking over (the caller drains the replaced one).
            reliability: Its configuration.
            token: Its statistics token: only its statistics count from now on.
            now: The caller's clock, ms since the epoch UTC.
        """
        self._drop_hot(now)  # the windows' messages get callbacks of the new generation from here on
        self._generation = self._seq + 1
        self._producer, self._produce = producer, producer.produce
        self.reliability = reliability
        self._statistics.switch(token)


__all__ = ["AuditedProducer"]
