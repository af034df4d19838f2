"""Audited load generation: N messages/s of a workload profile through an :class:`AuditedProducer`.

The offered load is what the source makes available: message i is due at ``t0 + i / rate``. A message
the application cannot hand to the producer within the hand-over timeout (``message.timeout.ms``) of
its due time is given up and counted in :attr:`LoadResult.not_handed_over`: ``BufferError`` for that
long (a full queue, a throttled producer), or the application itself that far behind its schedule (its
thread busy: many producers on few cores). Every message due before the end is offered, so a load that
falls behind offers as many as one that does not. Such a message is lost like one librdkafka times out
(issue 14 item 4: lowering the rate is not a way to lose less).

Autotuned producers (``audit.autotune``) change their configuration under the load; the
polling-interval hint changes the pacing only with ``follow_hints=True``, because it changes the offered
load. The producer-count hint (``producers``: the group's producers) is followed by default
(``follow_producers``): the same offered stream is handed round-robin to that many audited producers,
the extra ones started with the configuration the first one runs (and, autotuned, following the control
topic like it), closed again when the hint drops; the offered load does not change.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from audit_producer.producer import AuditedProducer
from audit_producer.settings import ProducerAuditSettings
from audit_producer.workloads import Profile, message_pool

_BUFFER_WAIT_S = 0.05  # while the producer's queue is full, poll this long between attempts, s


@dataclass
class LoadResult:
    """What one load run did.

    Attributes:
        produced: Messages handed to the producer (each stamped and counted by the audit).
        seconds: Duration of the run, s.
        producer_id: The producer instance id (the audit stamp's).
        snapshots: Audit snapshots the producer sent.
        not_handed_over: Messages offered but never handed over (the producer's queue stayed full
            beyond the hand-over timeout); lost.
        config_events: The configuration events of an autotuned producer, in order (the dicts
            :class:`AuditedProducer` passes to ``on_reconfigure``; ``kind`` ``applied``, ``rejected``
            or ``rolled_back``).
        control_version: The control record version running at the end (None: the initial config).
        producer_ids: Every producer instance id that sent (the first is ``producer_id``; more when the
            load followed a ``producers`` hint).
        max_producers: The most producers that ran at once.
        started_at_ms: Wall clock when the load's clock started (after the producer's check), ms since
            the epoch UTC: no message has an earlier CreateTime.
        ended_at_ms: Wall clock when the last message was offered (before the producers closed), ms.
    """

    produced: int
    seconds: float
    producer_id: str
    snapshots: int
    not_handed_over: int = 0
    config_events: list[dict[str, Any]] = field(default_factory=list)
    control_version: int | None = None
    producer_ids: list[str] = field(default_factory=list)
    max_producers: int = 1
    started_at_ms: int | None = None
    ended_at_ms: int | None = None

    @property
    def offered(self) -> int:
        """Messages the source offered: handed over or not."""
        return self.produced + self.not_handed_over

    @property
    def rate(self) -> float:
        """Achieved produce rate, messages/s."""
        return self.produced / self.seconds if self.seconds > 0 else 0.0


@dataclass
class _Pace:
    """When offered message n is due: ``t_base + (n - n_base) / rate`` (monotonic s); rate 0 = now."""

    rate: float
    t_base: float
    n_base: float = 0.0

    def due(self, now: float) -> float:
        """Messages due by ``now`` (monotonic s)."""
        return self.n_base + (now - self.t_base) * self.rate

    def time_of(self, n: int) -> float:
        """When message ``n`` (0-based) was due, monotonic s (rate > 0)."""
        return self.t_base + (n - self.n_base) / self.rate

    def change(self, now: float, rate: float, offered: int) -> None:
        """Go on at ``rate`` messages/s from ``now``; a backlog at the old rate stays due."""
        self.n_base = self.due(now) if self.rate > 0 else float(offered)
        self.t_base, self.rate = now, rate


def _hand_over(group: _Producers, topic: str, value: bytes, due: float, timeout_ms: float) -> bool:
    """Produce ``value`` to the next producer with room, retrying while all queues are full.

    Round-robin from the next producer: one whose queue is full (``BufferError``) is passed over for the
    next, as an application with several producers would (waiting on one jammed producer while the others
    have room stalled a load on a lossy link). When every queue is full, their callbacks are served and it
    tries again; it gives the message up (returns False) when they are still full ``timeout_ms`` ms (0 =
    never) after ``due``, the time the message was offered (monotonic s).
    """
    while True:
        for _ in range(len(group.running)):
            try:
                group.pick().produce(topic, value)
                return True
            except BufferError:
                continue
        if timeout_ms > 0 and (time.monotonic() - due) * 1000 > timeout_ms:
            return False
        group.wait(_BUFFER_WAIT_S)


class _Producers:
    """The load's audited producers: the first one, plus extras while a ``producers`` hint asks for them.

    Messages go round-robin over the running ones. An extra producer starts with the configuration the
    first one runs (its librdkafka properties; autotuned, it follows the control topic too); one no longer
    wanted is closed on a thread of its own (it flushes within its ``message.timeout.ms``), so the offered
    load keeps its pace.
    """

    def __init__(self, first: AuditedProducer, config: Mapping[str, Any], audit: Any) -> None:
        self.first, self.config, self.audit = first, dict(config), audit
        self.running: list[AuditedProducer] = [first]
        self.retired: list[AuditedProducer] = []
        self.closing: list[threading.Thread] = []
        self.most = 1
        self._next = 0

    def scale(self, n: int) -> None:
        """Run ``n`` (>= 1) producers: start extras with the first's configuration, or retire the newest."""
        n = max(1, n)
        while len(self.running) < n:
            extra = AuditedProducer({**self.config, **self.first.current_config}, self.audit)
            extra.set_poll_interval(self.first.reliability.poll_interval_ms)
            self.running.append(extra)
        while len(self.running) > n:
            gone = self.running.pop()
            self.retired.append(gone)
            closer = threading.Thread(target=gone.close, name="load-producer-close", daemon=True)
            closer.start()
            self.closing.append(closer)
        self.most = max(self.most, len(self.running))

    def pick(self) -> AuditedProducer:
        """Return the producer for the next message (round-robin)."""
        self._next = (self._next + 1) % len(self.running)
        return self.running[self._next]

    def poll(self) -> None:
        """Serve every running producer's callbacks."""
        for p in self.running:
            p.poll(0)

    def wait(self, seconds: float) -> None:
        """Serve every running producer's callbacks while waiting ``seconds`` s for room in their queues."""
        self.poll()
        time.sleep(seconds)
        self.poll()

    def set_poll_interval(self, ms: float | None) -> None:
        """Report the application's polling interval on every running producer."""
        for p in self.running:
            p.set_poll_interval(ms)

    def close(self) -> None:
        """Close every producer, the first among them: the others each on a thread of its own, at once.

        In parallel because each close flushes within its deadline (on a lossy link a request in flight
        waits up to ``request.timeout.ms``): closing N producers one after another could take N times as
        long, and their final snapshots would come that much later. The first is closed on the calling
        thread, so its errors propagate; the others' are theirs (as for producers retired earlier).
        """
        for p in self.running[1:]:
            closer = threading.Thread(target=p.close, name="load-producer-close", daemon=True)
            closer.start()
            self.closing.append(closer)
        try:
            self.first.close()
        finally:
            for closer in self.closing:
                closer.join()

    def every(self) -> list[AuditedProducer]:
        """Return every producer that ran, the first first."""
        return [*self.running, *self.retired]


def run_load(
    config: Mapping[str, Any],
    topic: str,
    profile: Profile = "weblog",
    *,
    rate: float = 1000.0,
    duration_s: float | None = 60.0,
    count: int | None = None,
    audit: ProducerAuditSettings | None = None,
    message_bytes: int | None = None,
    seed: int = 0,
    stop: threading.Event | None = None,
    progress: Callable[[int], None] | None = None,
    follow_hints: bool = False,
    handover_timeout_ms: float | None = None,
    on_reconfigure: Callable[[dict[str, Any]], None] | None = None,
    follow_producers: bool = True,
    producers: int = 1,
    start_at: float | None = None,
) -> LoadResult:
    """Offer audited load until ``count`` messages or ``duration_s`` seconds, whichever comes first.

    Args:
        config: librdkafka producer config (copied).
        topic: Target topic.
        profile: Workload profile (``social``, ``weblog``, ``game``).
        rate: Offered rate, messages/s; 0 or less means as fast as possible.
        duration_s: Stop after this many seconds (None: only ``count`` stops it).
        count: Stop after this many messages offered (None: only ``duration_s`` stops it).
        audit: Audit settings for the producer (``autotune``, ``group`` among them).
        message_bytes: Fixed message size M in bytes (None: the profile's natural sizes).
        seed: Seed of the message pool.
        stop: Set it to stop early.
        progress: Called with the running count of messages handed over about 10 times a second.
        follow_hints: Follow an autotuned producer's ``poll_interval_ms`` hint: offer one message every
            that many ms from then on (0: as fast as possible) and report it with the configuration;
            back to ``rate`` when the hint is withdrawn (a rollback). Off by default: it changes the
            offered load.
        handover_timeout_ms: Give a message up when the producer's queue has been full for this long
            after it was due, ms (0: never); None: the running ``message.timeout.ms``.
        on_reconfigure: Also called with each configuration event of the first producer (see
            :class:`AuditedProducer`).
        follow_producers: Follow an autotuned producer's ``producers`` hint: hand the offered messages
            round-robin to that many producers (see the module docstring); the offered load is the same.
        producers: Audited producers the load starts with, N_p >= 1 (the application's own scale-out,
            paper Sec. IV-C); a ``producers`` hint replaces it while the hint stands.
        start_at: Wall-clock time (s since the Unix epoch) at which the load's clock starts; the
            producers are created and checked before it and wait, serving their callbacks. For loads
            that must begin on a schedule (a testbed stage: a running application does not restart when
            the network changes). None: at once.

    Raises:
        ValueError: if neither ``duration_s`` nor ``count`` is given.
        KafkaAuthenticationError, KafkaTlsError, KafkaConnectionError, TopicError: before the first
            message, from :meth:`AuditedProducer.check` (bad credentials or certificate, no broker, the
            audit topic cannot be created).
    """
    if duration_s is None and count is None:
        raise ValueError("give duration_s or count")
    if producers < 1:
        raise ValueError(f"producers={producers}: allowed values are whole numbers >= 1")
    pool = message_pool(profile, seed=seed, message_bytes=message_bytes)
    events: list[dict[str, Any]] = []

    def reconfigured(event: dict[str, Any]) -> None:
        events.append(event)
        if on_reconfigure is not None:
            on_reconfigure(event)

    producer = AuditedProducer(config, audit, on_reconfigure=reconfigured)
    try:
        producer.check()  # fail fast, before the clock starts
    except BaseException:
        producer.close()
        raise
    group = _Producers(producer, config, audit)

    def wanted(hints: dict[str, Any] | None) -> int:
        """Return how many producers to run: a followed hint's count while it stands, else ``producers``."""
        return ((hints or {}).get("producers") if follow_producers else None) or producers

    group.scale(wanted(producer.hints))
    while start_at is not None and time.time() < start_at and not (stop is not None and stop.is_set()):
        group.poll()
        time.sleep(min(0.05, max(0.0, start_at - time.time())))
    values = itertools.cycle(pool)
    offered = handed = lost = 0
    t0 = time.monotonic()
    started_at_ms = time.time_ns() // 1_000_000
    pace = _Pace(rate if rate > 0 else 0.0, t0)
    end = t0 + duration_s if duration_s is not None else float("inf")
    limit = count if count is not None else 1 << 62
    next_report = t0
    hints = None
    initial_rate, initial_interval = pace.rate, producer.reliability.poll_interval_ms

    def offer(n: int) -> None:
        """Offer the next ``n`` messages; one due longer than the hand-over timeout ago is lost unoffered."""
        nonlocal offered, handed, lost
        timeout_ms = (
            producer.reliability.message_timeout_ms if handover_timeout_ms is None else handover_timeout_ms
        )
        stale_s = timeout_ms / 1000 if timeout_ms > 0 and pace.rate > 0 else float("inf")
        for _ in range(n):
            due_at = pace.time_of(offered) if pace.rate > 0 else time.monotonic()
            if time.monotonic() - due_at > stale_s:  # the application fell that far behind its schedule
                lost += 1
            elif _hand_over(group, topic, next(values), due_at, timeout_ms):
                handed += 1
            else:
                lost += 1
            offered += 1

    try:
        while offered < limit and not (stop is not None and stop.is_set()):
            now = time.monotonic()
            if now >= end:
                if pace.rate > 0:  # what fell due before the end is offered too (or lost, if too late)
                    offer(max(0, min(limit, int(pace.due(end))) - offered))
                break
            if producer.hints != hints:
                hints = producer.hints
                if follow_producers:
                    group.scale(wanted(hints))
                if follow_hints:
                    interval = (hints or {}).get("poll_interval_ms")
                    if interval is None:  # no hint (any more): the caller's pace
                        pace.change(now, initial_rate, offered)
                        group.set_poll_interval(initial_interval)
                    else:
                        pace.change(now, 1000.0 / interval if interval > 0 else 0.0, offered)
                        group.set_poll_interval(interval)
            if pace.rate > 0:
                due = pace.due(now)
                if offered >= due:
                    time.sleep(min(0.01, (offered - due) / pace.rate + 0.0005))
                    group.poll()
                    continue
            step = max(1, int(pace.rate / 100)) if pace.rate > 0 else 1000
            offer(min(step, limit - offered))
            group.poll()
            if progress is not None and now >= next_report:
                progress(handed)
                next_report = now + 0.1
    finally:
        ended_at_ms = time.time_ns() // 1_000_000
        group.close()
    if progress is not None:
        progress(handed)
    every = group.every()
    return LoadResult(
        handed,
        time.monotonic() - t0,
        producer.producer_id,
        sum(p.snapshots_sent for p in every),
        not_handed_over=lost,
        config_events=events,
        control_version=producer.active_control_version,
        producer_ids=[p.producer_id for p in every],
        max_producers=group.most,
        started_at_ms=started_at_ms,
        ended_at_ms=ended_at_ms,
    )
