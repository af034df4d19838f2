"""Live reconfiguration of an :class:`~audit_producer.AuditedProducer`: swap, probation, rollback, history.

Autotuned, a producer follows the control topic for its group (:class:`~audit_producer.autotune.
ControlFollower`, a background thread) and swaps its inner ``confluent_kafka.Producer`` for one with
the configuration asked for, keeping the producer id and the sequence, so the audit stays exact across
the swap (docs/DESIGN.md, "Autotuned producer"). :class:`LiveReconfiguration` is that part of the
producer, held by it as ``_reconfiguration``:

* the follower's side (any thread): build a candidate configuration, offer it in a one-slot hand-over,
  queue the report of one that could not take over;
* the caller's side (the thread that calls ``produce``/``poll``/``flush``): at every reconfiguration tick,
  report the follower's events, swap in the configuration handed over, judge the one on probation
  (:mod:`~audit_producer.probation`) and roll it back if the brokers reject it;
* the bookkeeping: which configuration ran from which sequence number on
  (:class:`~audit_producer.config_history.ConfigHistory`), the replaced inner producers still
  delivering (:class:`~audit_producer.draining.Draining`), the hints for the application and the
  configuration events (``applied``, ``rejected``, ``rolled_back``).

The producer keeps the data path (inner producer, sequence numbers, windows): a swap asks it to send the
next messages to another inner producer (``AuditedProducer._switch_inner``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import Counter, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError

from audit_producer.autotune import Candidate, ControlFollower, inner_config
from audit_producer.config_history import ConfigHistory
from audit_producer.draining import Draining, drain_deadline_ms
from audit_producer.librdkafka_config import reliability_config
from audit_producer.probation import Probation
from audit_record import ProducerConfig, now_ms
from audit_record.control_record import ControlRecord

if TYPE_CHECKING:
    from audit_producer.producer import AuditedProducer

log = logging.getLogger(__name__)

NO_HINTS: dict[str, Any] = {"poll_interval_ms": None, "producers": None}
"""The hints reported when none apply (the application's own settings do)."""

_Previous = tuple[Any, ProducerConfig, int | None, dict[str, Any] | None, object]
"""What a rollback restores: inner producer, reliability, control version, hints, statistics token."""


class LiveReconfiguration:
    """The configuration changes of one :class:`~audit_producer.AuditedProducer`, applied while it runs.

    Thread use: the follower thread calls :meth:`build_candidate`, :meth:`offer` and
    :meth:`follower_rejected`, and writes only the hand-over slot (under a lock) and the event queue;
    everything else runs on the producer's caller's thread.

    Args:
        producer: The producer reconfigured; its data path is switched by ``_switch_inner``.
        autotune: Whether to follow the control topic (the follower starts at the first tick or check).
        on_reconfigure: Called with every configuration event (see ``AuditedProducer``); an exception it
            raises is logged, not propagated.
        on_hints: Called when the hints for the application change (see ``AuditedProducer``); an
            exception it raises is logged, not propagated.
    """

    def __init__(
        self,
        producer: AuditedProducer,
        *,
        autotune: bool,
        on_reconfigure: Callable[[dict[str, Any]], None] | None = None,
        on_hints: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._owner = producer
        self._autotune = autotune
        self._on_reconfigure = on_reconfigure
        self._on_hints = on_hints
        self.history = ConfigHistory(producer.reliability)
        """Which configuration ran from which sequence number on (read by the snapshots)."""
        self.draining = Draining()
        """Replaced inner producers still delivering their messages."""
        self.follower: ControlFollower | None = None
        self._slot_lock = threading.Lock()
        self._pending: Candidate | None = None
        self._incoming: deque[dict[str, Any]] = deque()  # events from the follower thread
        self._closed = False
        self.probation: Probation | None = None
        """The configuration on probation (None: none is)."""
        self._previous: _Previous | None = None
        self.version: int | None = None
        """Version of the control record whose configuration runs; None: the constructor's config."""
        self._hints: dict[str, Any] | None = None
        self.config_events: Counter[str] = Counter()
        """Configuration events so far by kind: ``applied``, ``rejected``, ``rolled_back``."""

    # ------------------------------------------------------------------ what runs
    @property
    def hints(self) -> dict[str, Any] | None:
        """The hints for the application (a copy); None: none given."""
        return dict(self._hints) if self._hints is not None else None

    @property
    def dead_lettered(self) -> int:
        """Malformed control records of the group sent to the dead-letter topic so far."""
        return self.follower.dead_lettered if self.follower is not None else 0

    # ------------------------------------------------------------------ the follower
    def start_follower(self) -> None:
        """Start following the control topic (once; not after :meth:`close`)."""
        p = self._owner
        with self._slot_lock:
            if self.follower is not None or self._closed:
                return
            self.follower = ControlFollower(
                conn=p._conn,
                group=p.group,
                control_topic=p.settings.control_topic,
                dlq_topic=p.settings.dlq_topic,
                dead_letters=p._audit_topic.producer,
                build=self.build_candidate,
                offer=self.offer,
                reject=self.follower_rejected,
                running=lambda: p.current_config,
                connect_timeout_s=p.settings.autotune_connect_timeout_ms / 1000,
                name=f"{p.client_id}.autotune",
            )
        self.follower.start()

    def build_candidate(self, record: ControlRecord) -> Candidate:
        """Return the inner config for ``record`` (follower thread; no I/O).

        Raises:
            ConfigError: if a reliability setting of the result is invalid.
        """
        p = self._owner
        config = inner_config(p._base_config, record)
        candidate = Candidate(record, config, reliability_config(config, p.reliability.poll_interval_ms))
        config["stats_cb"] = p._statistics.callback(candidate.token)
        return candidate

    def offer(self, candidate: Candidate) -> None:
        """Put a prepared configuration in the slot (follower thread); the caller's thread swaps it in."""
        with self._slot_lock:
            replaced, self._pending = self._pending, candidate
            closed = self._closed
            if closed:
                self._pending = None
        if replaced is not None and replaced.producer is not None:
            log.info("control version %d superseded before it was applied", replaced.record.version)
            replaced.producer.close()
        if closed and candidate.producer is not None:
            candidate.producer.close()
        self._owner._wake()

    def follower_rejected(self, record: ControlRecord, reason: str) -> None:
        """Queue the report that a configuration could not take over (follower thread)."""
        p = self._owner
        self._incoming.append(
            self._event(
                "rejected", record.version, p.current_config, record.librdkafka_config(), reason, record
            )
        )
        p._wake()

    def stop_follower(self) -> None:
        """Stop following the control topic (if started; it can be started again)."""
        if self.follower is not None:
            self.follower.stop()

    def close(self) -> None:
        """Close a configuration handed over but not applied; offer nothing more (idempotent)."""
        with self._slot_lock:
            self._closed = True
            pending, self._pending = self._pending, None
        if pending is not None and pending.producer is not None:
            pending.producer.close()

    # ------------------------------------------------------------------ the caller's side
    def tick(self, now: int) -> None:
        """Start the follower, report its events, swap in a handed-over configuration, judge probation.

        Args:
            now: The caller's clock, ms since the epoch UTC.
        """
        if self.follower is None and self._autotune:
            self.start_follower()
        while self._incoming:
            self._report(self._incoming.popleft())
        if self._pending is not None:
            with self._slot_lock:
                candidate, self._pending = self._pending, None
            if candidate is not None:
                self.apply(candidate, now)
        if self.probation is not None:
            self.judge(now)
        if self.draining:
            self.draining.reap(now)

    def on_failure(self, generation: int, err: KafkaError) -> None:
        """Judge a failed delivery against the configuration on probation (librdkafka's callback).

        Args:
            generation: First sequence number given to the inner producer that failed the message.
            err: librdkafka's error.
        """
        probation = self.probation
        if probation is not None:
            probation.on_failure(generation, err)
            if probation.rejected >= probation.reports:
                self._owner._wake()  # judged (and rolled back) on the caller's thread, outside the callback

    def apply(self, candidate: Candidate, now: int) -> None:
        """Make ``candidate`` the running configuration: new messages go to its inner producer."""
        p = self._owner
        record = candidate.record
        if record.expired(now):
            if candidate.producer is not None:
                candidate.producer.close()
            self._report(
                self._event(
                    "rejected",
                    record.version,
                    p.current_config,
                    record.librdkafka_config(),
                    "expired before it could be applied",
                    record,
                )
            )
            return
        before = p.current_config
        hints = self._merge_hints(record)
        if candidate.producer is not None:
            if self.probation is not None:
                self._end_probation()  # a newer configuration: the one on probation is the base now
            self._previous = (p._producer, p.reliability, self.version, self._hints, p._statistics.token)
            self.swap(candidate.producer, candidate.reliability, candidate.token, now, pinned=True)
            self.probation = Probation(
                p.last_sequence + 1,
                p.settings.autotune_probation_reports,
                now + p.settings.autotune_probation_ms,
            )
        self.version = record.version
        self._set_hints(hints)
        self._report(self._event("applied", record.version, before, p.current_config, "applied", record))

    def swap(self, producer: Any, reliability: ProducerConfig, token: object, now: int, pinned: bool) -> None:
        """Send messages from the next sequence number on to ``producer``; drain the replaced one.

        Args:
            producer: The inner producer taking over.
            reliability: Its configuration (the polling interval stays the running one).
            token: Its statistics token (only the running inner producer's statistics count).
            now: The caller's clock, ms since the epoch UTC.
            pinned: Keep the replaced producer open after it drained (it may be rolled back to).
        """
        p = self._owner
        old, old_config = p._producer, p.reliability
        self.draining.add(
            old,
            drain_deadline_ms(now, old_config.message_timeout_ms),
            f"control version {self.version}",
            old_config.message_timeout_ms,
            pinned=pinned,
        )
        reliability = dataclasses.replace(reliability, poll_interval_ms=old_config.poll_interval_ms)
        p._switch_inner(producer, reliability, token, now)
        self.history.change(p.last_sequence + 1, reliability)

    def judge(self, now: int) -> None:
        """Pass or fail the configuration on probation; a failed one is rolled back."""
        probation = self.probation
        assert probation is not None
        p = self._owner
        handed = p.last_sequence - probation.first_sequence + 1
        verdict = probation.verdict(handed, len(p._producer), now)
        if verdict == "pass":
            self._end_probation()
        elif verdict == "fail":
            self._rollback(now, f"the brokers rejected it: {probation.last_rejection}")

    def _end_probation(self) -> None:
        self.probation = None
        self._previous = None
        self.draining.unpin()

    def _rollback(self, now: int, reason: str) -> None:
        """Go back to the configuration before the one on probation (its inner producer, still open)."""
        assert self._previous is not None
        p = self._owner
        producer, reliability, version, hints, token = self._previous
        failed_version, before = self.version, p.current_config
        self.draining.take(producer)
        self.swap(producer, reliability, token, now, pinned=False)
        self._end_probation()
        self.version = version
        self._set_hints(hints)
        self._report(self._event("rolled_back", failed_version, before, p.current_config, reason))

    # ------------------------------------------------------------------ hints and events
    def _merge_hints(self, record: ControlRecord) -> dict[str, Any] | None:
        given = {"poll_interval_ms": record.poll_interval_ms, "producers": record.producers}
        if all(v is None for v in given.values()):
            return self._hints
        base = self._hints or NO_HINTS
        return {k: (v if v is not None else base[k]) for k, v in given.items()}

    def _set_hints(self, hints: dict[str, Any] | None) -> None:
        if hints == self._hints:
            return
        self._hints = hints
        if self._on_hints is not None:  # withdrawn hints (a rollback) are reported as None each
            try:
                self._on_hints(dict(hints) if hints is not None else dict(NO_HINTS))
            except Exception:
                log.exception("on_hints callback failed")

    def _event(
        self,
        kind: str,
        version: int | None,
        before: dict[str, Any],
        after: dict[str, Any],
        reason: str,
        record: ControlRecord | None = None,
    ) -> dict[str, Any]:
        return {
            "kind": kind,
            "group": self._owner.group,
            "producer_id": self._owner.producer_id,
            "version": version,
            "from": before,
            "to": after,
            "reason": reason,
            "record_reason": record.reason if record is not None else None,
            "at_ms": now_ms(),
        }

    def _report(self, event: dict[str, Any]) -> None:
        """Count, log and hand one configuration event to ``on_reconfigure``."""
        self.config_events[event["kind"]] += 1
        level = logging.INFO if event["kind"] == "applied" else logging.WARNING
        log.log(
            level,
            "producer group %r, control version %s %s: %s -> %s (%s)",
            self._owner.group,
            event["version"],
            event["kind"].replace("_", " "),
            event["from"],
            event["to"],
            event["reason"],
        )
        if self._on_reconfigure is not None:
            try:
                self._on_reconfigure(event)
            except Exception:
                log.exception("on_reconfigure callback failed")


__all__ = ["NO_HINTS", "LiveReconfiguration"]
