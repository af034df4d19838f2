"""The alert engine: window results in, alert events (firing / resolved) out.

Called on the Spark driver once per micro-batch (``foreachBatch``) with that batch's window results,
provisional and final::

    engine = AlertEngine(AlertSettings())
    events = engine.observe(results, now_ms=int(time.time() * 1000))

* Window rules (completeness, gamma, prediction drift, unaudited producers) judge each **new final**
  window of a (topic, tier), in the order windows become final: window order, except that a window
  that waited longer (its producers' ``message.timeout.ms`` was longer, or an audit consumer had not
  closed it: docs/DESIGN.md, invariant 8) is judged when it is final, after newer ones. A final window
  already judged (a micro-batch Spark re-runs after a driver crash) is skipped, so replays emit nothing
  twice.
* The audit-lag rule judges, at every call, the windows of each (topic, tier) still provisional at
  wall clock ``now_ms`` (it learns of them from the provisional results; a final result ends them).
* Each (alertname, topic, tier) has its own state machine (:mod:`alerts.state_machine`); only its FIRE and
  RESOLVE transitions become events, so a firing alert is reported once and resolved once.

The state lives in memory; :meth:`AlertEngine.to_state` / :meth:`AlertEngine.restore` carry it over
a restart (:class:`alerts.batch_listener.AlertPipeline` keeps it in a file next to the Spark checkpoint), so
a firing alert stays firing, resolves once, and a window judged before the restart is not judged again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from alerts.audit_lag_rule import AuditLagRule
from alerts.delivery_rules import CompletenessRule
from alerts.event import AlertEvent, AlertStatus, Severity
from alerts.observation import Observation
from alerts.rules import audit_lag_rule, window_rules
from alerts.settings import AlertSettings
from alerts.state_machine import AlertState, AlertStateMachine, Transition
from alerts.unaudited_rules import TOPIC_AUDITED
from alerts.window_rule import WindowRule

log = logging.getLogger(__name__)

AlertKey = tuple[str, str, str]
"""(alertname, topic, tier)."""

_REQUIRED = ("topic", "tier", "state", "window_start_ms", "window_end_ms")
MAX_JUDGED_AHEAD = 1_000
"""How many final windows of a (topic, tier) may be judged while an older one is still open; beyond
that the oldest open ones are given up (counted as judged), so a window that never becomes final cannot
grow the engine's memory."""


def _observed(obs: Observation) -> dict[str, Any]:
    """Return what a firing or resolved event carries of its observation (:class:`AlertEvent` fields)."""
    return {
        "description": obs.description,
        "window_start_ms": obs.window_start_ms,
        "window_end_ms": obs.window_end_ms,
        "value": obs.value,
        "threshold": obs.threshold,
        "numbers": dict(obs.numbers),
        "suggestion": obs.suggestion,
        "attribution": [dict(a) for a in obs.attribution],
    }


class AlertEngine:
    """Evaluates the rules of :mod:`alerts.rules` over window results; not thread-safe (one driver thread).

    Args:
        settings: Thresholds and counts (default: ``AlertSettings()``, i.e. the environment).
    """

    def __init__(self, settings: AlertSettings | None = None) -> None:
        self.settings = settings or AlertSettings()
        self.window_rules: list[WindowRule] = window_rules(self.settings)
        self.lag_rule: AuditLagRule | None = audit_lag_rule(self.settings)
        self.skipped_rows = 0
        """Rows without the required fields (``topic, tier, state, window_start_ms, window_end_ms``)."""
        self._machines: dict[AlertKey, AlertStateMachine] = {}
        self._firing: dict[AlertKey, AlertEvent] = {}
        self._last_end: dict[AlertKey, int] = {}
        self._last_final: dict[tuple[str, str], int] = {}
        """Per (topic, tier): every window starting at or before this has been judged final, ms."""
        self._judged_ahead: dict[tuple[str, str], set[int]] = {}
        """Per (topic, tier): windows judged final that start after ``_last_final`` (an older one is open)."""
        self._open: dict[tuple[str, str], dict[int, int]] = {}
        self._waits: dict[tuple[str, str], dict[int, int]] = {}
        """``final_wait_ms`` of open windows that have one, by (topic, tier) and window start, ms."""
        self._audited_end: dict[tuple[str, str], int] = {}
        """End of the newest final window with audited producers, by (topic, tier), ms."""
        self._lagging: dict[tuple[str, str], dict[int, Mapping[str, Any]]] = {}
        """Newest provisional row of each open window of a downstream tier, awaiting its lag judgement."""
        self._lag_judged: dict[tuple[str, str], set[int]] = {}
        """Open windows of a downstream tier already judged by the completeness rule's lag check."""

    # ------------------------------------------------------------------------------------------ API
    def observe(self, results: Iterable[Mapping[str, Any]], now_ms: int) -> list[AlertEvent]:
        """Evaluate one micro-batch of window results; return the alerts that started firing or resolved.

        Args:
            results: Window-result dicts (``window_result.avsc`` fields plus ``p_loss, p_loss_lo,
                p_loss_hi, gamma_actual, gamma_predicted, gamma_target, suggestion``...), provisional
                and final, in any order. Rows with a ``kind`` other than ``result`` are ignored; rows
                missing a required field are skipped, logged and counted in :attr:`skipped_rows`.
            now_ms: Wall clock of this evaluation, ms since the Unix epoch (UTC): the events'
                ``starts_at_ms`` / ``ends_at_ms`` and the audit-lag reference.

        Returns:
            Events in evaluation order (per (topic, tier) in window order); empty if nothing changed.
        """
        finals: dict[tuple[str, str], dict[int, Mapping[str, Any]]] = {}
        for row in results:
            if row.get("kind", "result") != "result":
                continue
            if any(row.get(k) is None for k in _REQUIRED):
                self.skipped_rows += 1
                log.warning("alert engine: skipped a window result without %s: %r", _REQUIRED, dict(row))
                continue
            key = (str(row["topic"]), str(row["tier"]))
            start = int(row["window_start_ms"])
            if row["state"] == "final":
                finals.setdefault(key, {})[start] = row
            elif not self._is_judged(key, start):
                self._open.setdefault(key, {})[start] = int(row["window_end_ms"])
                if row.get("final_wait_ms") is not None:
                    self._waits.setdefault(key, {})[start] = int(row["final_wait_ms"])
                if row.get("previous_tier") not in (None, "producer") and start not in self._lag_judged.get(
                    key, ()
                ):
                    self._lagging.setdefault(key, {})[start] = row
        events: list[AlertEvent] = []
        for key, by_start in finals.items():
            for start in sorted(by_start):
                if self._is_judged(key, start):
                    continue  # judged before (a re-run micro-batch)
                self._mark_judged(key, start)
                row = self._with_audited(key, by_start[start])
                for rule in self.window_rules:
                    machine = self._machine(rule.alertname, key, rule.for_count, rule.keep_firing_count)
                    obs = rule.evaluate(row, firing=machine.firing)
                    events.extend(self._step(rule.alertname, rule.severity, key, machine, obs, now_ms))
            open_ = self._open.get(key, {})
            waits = self._waits.get(key, {})
            for start in [s for s in open_ if self._is_judged(key, s)]:
                del open_[start]
                waits.pop(start, None)
            lagging = self._lagging.get(key, {})
            for start in [s for s in lagging if self._is_judged(key, s)]:
                del lagging[start]
            judged = self._lag_judged.get(key)
            if judged:
                judged -= {s for s in judged if self._is_judged(key, s)}
        events.extend(self._judge_lagging(now_ms))
        if self.lag_rule is not None:
            rule = self.lag_rule
            for key in sorted(set(self._open) | set(self._last_final)):
                machine = self._machine(rule.alertname, key, rule.for_count, rule.keep_firing_count)
                obs = rule.evaluate(*key, self._open.get(key, {}), now_ms, self._waits.get(key))
                events.extend(self._step(rule.alertname, rule.severity, key, machine, obs, now_ms))
        return events

    def to_state(self) -> dict[str, Any]:
        """Return the engine's state as JSON-compatible data (see :meth:`restore`).

        Holds per (alertname, topic, tier) the state machine (state, streaks), the firing event and the
        last episode's end; per (topic, tier) the newest final window judged, the open windows and their
        ``final_wait_ms`` (``open_waits``; states saved before it existed restore without).
        """
        return {
            "machines": [
                [*k, m.state.value, m.bad_streak, m.good_streak] for k, m in sorted(self._machines.items())
            ],
            "firing": [e.to_dict() for e in self._firing.values()],
            "last_end": [[*k, v] for k, v in sorted(self._last_end.items())],
            "last_final": [[*k, v] for k, v in sorted(self._last_final.items())],
            "judged_ahead": [[*k, sorted(v)] for k, v in sorted(self._judged_ahead.items()) if v],
            "open": [[*k, sorted(v.items())] for k, v in sorted(self._open.items())],
            "open_waits": [[*k, sorted(v.items())] for k, v in sorted(self._waits.items()) if v],
            "lag_judged": [[*k, sorted(v)] for k, v in sorted(self._lag_judged.items()) if v],
            "audited_end": [[*k, v] for k, v in sorted(self._audited_end.items())],
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`to_state`'s data (of this or an earlier process).

        The for / keep-firing counts come from the current settings, not the saved state. Alerts of
        rules no longer configured keep their state but are not evaluated.

        Raises:
            ValueError: the data is not what :meth:`to_state` returns (nothing is changed then).
        """
        try:
            counts = {r.alertname: (r.for_count, r.keep_firing_count) for r in self.window_rules}
            if self.lag_rule is not None:
                counts[self.lag_rule.alertname] = (self.lag_rule.for_count, self.lag_rule.keep_firing_count)
            machines: dict[AlertKey, AlertStateMachine] = {}
            for name, topic, tier, st, bad, good in state["machines"]:
                for_count, keep = counts.get(name, (1, 1))
                machines[(name, topic, tier)] = AlertStateMachine(
                    for_count, keep, AlertState(st), int(bad), int(good)
                )
            firing = {(e.alertname, e.topic, e.tier): e for e in map(AlertEvent.from_dict, state["firing"])}
            last_end = {(n, t, r): int(v) for n, t, r, v in state["last_end"]}
            last_final = {(t, r): int(v) for t, r, v in state["last_final"]}
            ahead = {(t, r): {int(a) for a in v} for t, r, v in state.get("judged_ahead", [])}
            open_ = {(t, r): {int(a): int(b) for a, b in v} for t, r, v in state["open"]}
            waits = {(t, r): {int(a): int(b) for a, b in v} for t, r, v in state.get("open_waits", [])}
            lag_judged = {(t, r): {int(a) for a in v} for t, r, v in state.get("lag_judged", [])}
            audited_end = {(t, r): int(v) for t, r, v in state.get("audited_end", [])}
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not an alert engine state: {type(exc).__name__}: {exc}") from exc
        if any(machines.get(k) is None or not machines[k].firing for k in firing):
            raise ValueError("not an alert engine state: a firing event without a firing state machine")
        self._machines, self._firing, self._last_end = machines, firing, last_end
        self._last_final, self._open, self._waits = last_final, open_, waits
        self._judged_ahead = ahead
        self._lag_judged, self._lagging = lag_judged, {}
        self._audited_end = audited_end

    def firing(self) -> list[AlertEvent]:
        """Return the firing event of every alert firing now."""
        return list(self._firing.values())

    def states(self) -> dict[AlertKey, AlertState]:
        """Return the state of every (alertname, topic, tier) seen so far."""
        return {k: m.state for k, m in self._machines.items()}

    # ------------------------------------------------------------------------------------- internals
    def _is_judged(self, key: tuple[str, str], start: int) -> bool:
        """Return True if the window of ``key`` starting at ``start`` (ms) has been judged final."""
        return start <= self._last_final.get(key, -1) or start in self._judged_ahead.get(key, ())

    def _mark_judged(self, key: tuple[str, str], start: int) -> None:
        """Record a judged final window; move ``_last_final`` up to just before the oldest open window."""
        ahead = self._judged_ahead.setdefault(key, set())
        ahead.add(start)
        newest = max(ahead)
        waiting = sorted(s for s in self._open.get(key, {}) if s < newest and not self._is_judged(key, s))
        if len(ahead) > MAX_JUDGED_AHEAD:
            waiting = [s for s in waiting if s > sorted(ahead)[-MAX_JUDGED_AHEAD]]
        floor = waiting[0] - 1 if waiting else newest
        self._last_final[key] = max(self._last_final.get(key, -1), floor)
        ahead -= {s for s in ahead if s <= self._last_final[key]}

    def _with_audited(self, key: tuple[str, str], row: Mapping[str, Any]) -> Mapping[str, Any]:
        """Return ``row`` with :data:`alerts.unaudited_rules.TOPIC_AUDITED`: its (topic, tier) is audited.

        The (topic, tier) has audited producers: true if this window has some (``producers`` > 0) or a
        final window of the (topic, tier) that ended at most ``audited_producers_memory_ms`` before this
        one started had some (a kcat burst in a window of its own still belongs to an audited topic).
        """
        if (row.get("producers") or 0) > 0:
            self._audited_end[key] = max(self._audited_end.get(key, -1), int(row["window_end_ms"]))
            return {**row, TOPIC_AUDITED: True}
        last = self._audited_end.get(key)
        memory = self.settings.audited_producers_memory_ms
        recent = last is not None and int(row["window_start_ms"]) - last <= memory
        return {**row, TOPIC_AUDITED: recent}

    def _judge_lagging(self, now_ms: int) -> list[AlertEvent]:
        """Judge downstream tiers' open windows whose allowed lag has passed (once per window).

        :meth:`alerts.delivery_rules.CompletenessRule.evaluate_lagging` on the newest provisional row of
        each: a bad one is an observation of the completeness alert of its (topic, tier); one that caught
        up in time is left to its final window. Pending rows are not kept across a restart
        (``to_state`` keeps only which windows were judged).
        """
        rule = next((r for r in self.window_rules if isinstance(r, CompletenessRule)), None)
        if rule is None or rule.tier_lag_ms is None:
            self._lagging.clear()
            return []
        events: list[AlertEvent] = []
        for key in sorted(self._lagging):
            pending = self._lagging[key]
            for start in sorted(pending):
                row = pending[start]
                if now_ms <= int(row["window_end_ms"]) + rule.tier_lag_ms:
                    continue
                del pending[start]
                self._lag_judged.setdefault(key, set()).add(start)
                obs = rule.evaluate_lagging(row, now_ms)
                if obs.bad:
                    machine = self._machine(rule.alertname, key, rule.for_count, rule.keep_firing_count)
                    events.extend(self._step(rule.alertname, rule.severity, key, machine, obs, now_ms))
        return events

    def _machine(self, alertname: str, key: tuple[str, str], for_count: int, keep: int) -> AlertStateMachine:
        akey = (alertname, *key)
        machine = self._machines.get(akey)
        if machine is None:
            machine = self._machines[akey] = AlertStateMachine(for_count, keep)
        return machine

    def _step(
        self,
        alertname: str,
        severity: Severity,
        key: tuple[str, str],
        machine: AlertStateMachine,
        obs: Observation,
        now_ms: int,
    ) -> list[AlertEvent]:
        transition = machine.step(obs.bad)
        akey: AlertKey = (alertname, *key)
        if transition is Transition.FIRE:
            # a new episode starts after the previous one ended, so (fingerprint, starts_at_ms) is unique
            starts_at_ms = max(now_ms, self._last_end.get(akey, -1) + 1)
            event = AlertEvent(
                alertname=alertname,
                topic=key[0],
                tier=key[1],
                severity=severity,
                status=AlertStatus.FIRING,
                starts_at_ms=starts_at_ms,
                event_at_ms=now_ms,
                summary=obs.summary,
                **_observed(obs),
                generator_url=str(self.settings.generator_url) if self.settings.generator_url else None,
            )
            self._firing[akey] = event
            return [event]
        if transition is Transition.RESOLVE:
            fired = self._firing.pop(akey)
            ends_at_ms = self._last_end[akey] = max(now_ms, fired.starts_at_ms)
            return [
                fired.resolved(
                    ends_at_ms,
                    event_at_ms=now_ms,
                    summary=f"resolved: {obs.summary}",
                    **_observed(obs),
                )
            ]
        return []
