"""The SLOs evaluated in the Spark job: error budget and burn rates per micro-batch, burn-rate alerts.

For users without Prometheus (issue 40 item 4). The job's alert pipeline
(:class:`alerts.batch_listener.AlertPipeline`) hands every micro-batch's window results to
:meth:`SloEvaluator.observe`, which keeps the final windows' counts (:class:`WindowHistory`) and judges
them with :func:`alerts.slo_status.slo_status`, the arithmetic ``kafka-audit slo status`` uses (one
definition: a window counts in a look-back when it *ended* in it; events = ``sent``, bad =
``max(0, sent - unique)``; budget left = ``1 - error ratio / (1 - objective)`` over the period; burn
rate = error ratio over a look-back / ``(1 - objective)``; a pair fires when both its windows burn
faster than its factor, a page also needing the low-traffic guard's events in its long window).

Published two ways:

* **Prometheus gauges in the job's registry** (the exporter the job already serves, like
  :mod:`alerts.metrics`), labelled ``slo, topic, tier``: ``kafka_audit_slo_error_budget_remaining_ratio``,
  ``kafka_audit_slo_burn_rate{window}`` (every alert window), ``kafka_audit_slo_period_messages{kind}``
  (``sent``, ``lost`` over the period), ``kafka_audit_slo_error_budget_messages`` (``(1 - objective) x``
  period sent: what the budget is in messages), ``kafka_audit_slo_objective_ratio{slo}``,
  ``kafka_audit_slo_evaluated_at_seconds`` (when, UTC epoch s; ``kafka-audit slo status --at`` takes it).
* **Alert events** through the pipeline's sinks (Alertmanager, webhook, alerts topic):
  ``KafkaAuditCompletenessBudgetBurn`` (the Prometheus rule's name) per (topic, tier, severity): it fires
  while any SLO matching the (topic, tier) has a window pair of that severity burning (``firing`` of
  its :class:`~alerts.slo_status.SloStatus`), and resolves when none has. The event carries the SLO, the
  pairs, the budget left (``numbers``: ``budget_left``, ``burn_rate_<window>``, ``period_sent``,
  ``period_lost``), and the final windows that spent it (the long window's windows that lost the most,
  in the description; ``window_start_ms`` / ``window_end_ms``: the one that lost the most).

The alert event keeps ``alert.avsc``'s four labels (alertname, topic, tier, severity): route pages and
tickets on ``severity`` (the Workbook pairs: page ``critical``, ticket ``warning``).

Memory: the windows that ended within the longest alert window (3 d by default) are kept one by one;
older ones, up to the longest compliance period, are merged into buckets of ``period / 720`` (1 h for
30 d) counted as one window ending at its newest window's end. So the alert windows are exact, and the
period's count is exact except that the oldest bucket may hold up to one bucket of windows that ended
just before the period began (at most 1/720 of the period). On start the history is read back from the
job's Parquet results (:func:`alerts.slo_status.read_parquet_results`), so a restart continues with
the same numbers; the firing alerts are kept in the alert pipeline's state file.

Cost: ``slo_status`` is handed one summed result per ring between the nested look-backs
(:meth:`WindowHistory.rows`, numpy prefix sums per (topic, tier)), not every window: 100 topics x 30 days
of 1-minute windows evaluate in 0.08 s per micro-batch (6.7 s over the windows one by one).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Gauge

from alerts.event import AlertEvent, AlertStatus, rfc3339
from alerts.slo_rules import ALERT_NAME
from alerts.slo_settings import BurnRateAlert, CompletenessSlo, SloSettings, duration_seconds
from alerts.slo_status import SloStatus, final_windows, slo_status
from alerts.state_machine import AlertStateMachine, Transition

log = logging.getLogger(__name__)

PERIOD_BUCKETS = 720
"""Buckets a compliance period's older windows are merged into (1 h each for 30 d)."""
SPENDING_WINDOWS = 5
"""How many of the windows that lost the most an alert names."""
REPORT_SPENDING_WINDOWS = 10
"""How many of them the report lists per SLO, topic and tier."""

Key = tuple[str, str]
"""(topic, tier)."""


@dataclass
class _Window:
    start_ms: int
    end_ms: int
    sent: int
    lost: int
    freshness: list[int] = field(default_factory=list)
    """The tier's freshness histogram (``window_result.freshness_counts``; [] = not measured)."""


def _histogram_sum(a: list[int], b: list[int]) -> list[int]:
    """Return two freshness histograms added entry by entry (an empty one, not measured, adds nothing)."""
    if not a or not b:
        return list(a or b)
    return [x + y for x, y in zip(a, b, strict=True)]


class _PrefixSums:
    """One (topic, tier)'s windows sorted by end, with running sums (numpy, int64) to add up any run."""

    def __init__(self, windows: list[_Window]) -> None:
        windows = sorted(windows, key=lambda w: w.end_ms)
        self.windows = windows
        self.ends = np.array([w.end_ms for w in windows], dtype=np.int64)
        self.sent = np.concatenate(([0], np.cumsum([w.sent for w in windows], dtype=np.int64)))
        self.lost = np.concatenate(([0], np.cumsum([w.lost for w in windows], dtype=np.int64)))
        width = max((len(w.freshness) for w in windows), default=0)
        measured = np.array(
            [w.freshness if len(w.freshness) == width else [0] * width for w in windows], dtype=np.int64
        ).reshape(len(windows), width)
        self.fresh = np.vstack((np.zeros((1, width), dtype=np.int64), np.cumsum(measured, axis=0)))
        self.has_fresh = np.concatenate(([0], np.cumsum([bool(w.freshness) for w in windows])))

    def upto(self, end_ms: int) -> int:
        """Return how many windows ended at or before ``end_ms``."""
        return int(np.searchsorted(self.ends, end_ms, side="right"))

    def ring(self, key: Key, lo: int, hi: int) -> dict[str, Any]:
        """Return windows ``lo..hi-1`` (by end) as one final window result: sums, the newest end."""
        sent = int(self.sent[hi] - self.sent[lo])
        measured = self.has_fresh[hi] > self.has_fresh[lo]
        fresh = (self.fresh[hi] - self.fresh[lo]).tolist() if measured else []
        where = {"topic": key[0], "tier": key[1], "window_start_ms": self.windows[lo].start_ms}
        counted = {
            "sent": sent,
            "unique": sent - int(self.lost[hi] - self.lost[lo]),
            "freshness_counts": fresh,
        }
        end = self.windows[hi - 1].end_ms
        return {**where, **counted, "window_end_ms": end, "state": "final", "result_at_ms": 0}


class WindowHistory:
    """The final windows' counts per (topic, tier), exact for ``fine_ms``, bucketed up to ``keep_ms``.

    Args:
        fine_ms: Windows that ended within this of now are kept one by one (the longest alert window).
        keep_ms: Windows that ended more than this before now are forgotten (the longest period).
        bucket_ms: Width of the buckets older windows are merged into (by ``window_end_ms``).
    """

    def __init__(self, fine_ms: int, keep_ms: int, bucket_ms: int) -> None:
        self.fine_ms, self.keep_ms, self.bucket_ms = fine_ms, max(keep_ms, fine_ms), max(1, bucket_ms)
        self._fine: dict[Key, dict[int, _Window]] = {}
        self._buckets: dict[Key, dict[int, _Window]] = {}
        self._sums: dict[Key, _PrefixSums] = {}
        """Per (topic, tier), prefix sums of its windows by end; dropped when a window changes."""

    def add(self, rows: Iterable[Mapping[str, Any]], now_ms: int) -> int:
        """Add the final results among ``rows`` (a window seen again replaces itself); return how many.

        A window already merged into a bucket (a final result re-sent more than ``fine_ms`` after its
        end) is not added again.
        """
        n = 0
        for row in final_windows(rows):
            end = int(row["window_end_ms"])
            if end <= now_ms - self.keep_ms:
                continue
            sent = int(row.get("sent") or 0)
            window = _Window(
                int(row["window_start_ms"]),
                end,
                sent,
                max(0, sent - int(row.get("unique") or 0)),
                [int(n) for n in row.get("freshness_counts") or ()],
            )
            key = (str(row["topic"]), str(row["tier"]))
            self._sums.pop(key, None)
            if end <= now_ms - self.fine_ms:
                if window.start_ms not in self._fine.get(key, {}):
                    self._merge(key, window)
            else:
                self._fine.setdefault(key, {})[window.start_ms] = window
            n += 1
        return n

    def _merge(self, key: Key, w: _Window) -> None:
        bucket = self._buckets.setdefault(key, {})
        index = w.end_ms // self.bucket_ms
        b = bucket.get(index)
        if b is None:
            bucket[index] = _Window(w.start_ms, w.end_ms, w.sent, w.lost, list(w.freshness))
        else:
            b.start_ms, b.end_ms = min(b.start_ms, w.start_ms), max(b.end_ms, w.end_ms)
            b.sent, b.lost = b.sent + w.sent, b.lost + w.lost
            b.freshness = _histogram_sum(b.freshness, w.freshness)

    def prune(self, now_ms: int) -> None:
        """Merge windows older than ``fine_ms`` into their buckets; forget those older than ``keep_ms``."""
        for key, windows in list(self._fine.items()):
            for start in [s for s, w in windows.items() if w.end_ms <= now_ms - self.fine_ms]:
                self._merge(key, windows.pop(start))
                self._sums.pop(key, None)
            if not windows:
                del self._fine[key]
        for key, buckets in list(self._buckets.items()):
            for index in [i for i, b in buckets.items() if b.end_ms <= now_ms - self.keep_ms]:
                del buckets[index]
                self._sums.pop(key, None)
            if not buckets:
                del self._buckets[key]

    def rows(self, now_ms: int, lookbacks_ms: Iterable[int]) -> list[dict[str, Any]]:
        """Return the history as final window results for ``slo_status``, a few per (topic, tier).

        The look-backs ``(now - w, now]`` are nested, so they cut the past into rings; each ring's
        windows (and buckets) become one result holding their sums, ending at the ring's newest end.
        ``slo_status`` then counts every look-back exactly as over the windows themselves (a ring lies
        in a look-back or outside it), but reads at most one row per look-back and (topic, tier).
        """
        edges = sorted({int(w) for w in lookbacks_ms if w > 0})
        out: list[dict[str, Any]] = []
        for key in set(self._fine) | set(self._buckets):
            sums = self._sums.get(key)
            if sums is None:
                windows = [*self._buckets.get(key, {}).values(), *self._fine.get(key, {}).values()]
                sums = self._sums[key] = _PrefixSums(windows)
            hi = sums.upto(now_ms)
            for w in edges:
                lo = sums.upto(now_ms - w)
                if lo < hi:
                    out.append(sums.ring(key, lo, hi))
                hi = lo
        return out

    def spending(self, key: Key, since_ms: int, now_ms: int, limit: int = SPENDING_WINDOWS) -> list[_Window]:
        """Return the windows of ``key`` that ended in ``(since_ms, now_ms]`` and lost, most lost first."""
        inside = [w for w in self._fine.get(key, {}).values() if since_ms < w.end_ms <= now_ms and w.lost]
        return sorted(inside, key=lambda w: (-w.lost, w.start_ms))[:limit]


class SloMetrics:
    """The in-job SLO gauges (see the module doc), registered once in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ("slo", "topic", "tier")
        self.budget = Gauge(
            "kafka_audit_slo_error_budget_remaining_ratio",
            "1 - error ratio over the compliance period / (1 - objective); below 0 when overspent",
            labels,
            registry=registry,
        )
        self.burn = Gauge(
            "kafka_audit_slo_burn_rate",
            "Error ratio over the look-back window / (1 - objective) (final windows that ended in it)",
            (*labels, "window"),
            registry=registry,
        )
        self.period = Gauge(
            "kafka_audit_slo_period_messages",
            "Messages sent and lost (sent - unique) in the final windows of the compliance period",
            (*labels, "kind"),
            registry=registry,
        )
        self.budget_messages = Gauge(
            "kafka_audit_slo_error_budget_messages",
            "The error budget in messages: (1 - objective) x messages sent over the compliance period",
            labels,
            registry=registry,
        )
        self.objective = Gauge(
            "kafka_audit_slo_objective_ratio",
            "The SLO's objective (fraction 0-1)",
            ("slo",),
            registry=registry,
        )
        self.evaluated_at = Gauge(
            "kafka_audit_slo_evaluated_at_seconds",
            "When the job last evaluated its SLOs, s since the Unix epoch",
            registry=registry,
        )
        self._seen: set[tuple[str, str, str]] = set()

    def update(self, statuses: list[SloStatus], settings: SloSettings, now_ms: int) -> None:
        """Set every gauge from ``statuses``; series of a (slo, topic, tier) no longer judged are removed."""
        windows = _alert_windows(settings)
        now = {(s.slo, s.topic, s.tier) for s in statuses}
        for key in self._seen - now:
            for gauge in (self.budget, self.budget_messages):
                gauge.remove(*key)
            for w in windows:
                self.burn.remove(*key, w)
            for kind in ("sent", "lost"):
                self.period.remove(*key, kind)
        self._seen = now
        for slo in settings.slos():
            if isinstance(slo, CompletenessSlo):
                self.objective.labels(str(slo.name)).set(slo.objective)
        for s in statuses:
            key = (s.slo, s.topic, s.tier)
            self.budget.labels(*key).set(_nan(s.budget_left))
            self.period.labels(*key, "sent").set(s.period_counts.sent)
            self.period.labels(*key, "lost").set(s.period_counts.lost)
            self.budget_messages.labels(*key).set((1.0 - s.objective) * s.period_counts.sent)
            for w in windows:
                self.burn.labels(*key, w).set(_nan(s.burn_rates.get(w)))
        self.evaluated_at.set(now_ms / 1000)


def _nan(x: float | None) -> float:
    return float("nan") if x is None else x


def _alert_windows(settings: SloSettings) -> list[str]:
    windows = {w for a in settings.burn_rate_alerts for w in (a.long_window, a.short_window)}
    return sorted(windows, key=duration_seconds)


AlertKey = tuple[str, str, str, str]
"""(alertname, topic, tier, severity) of one in-job SLO alert: its :class:`AlertEvent` labels."""

FRESHNESS_ALERT_NAME = "KafkaAuditFreshnessBudgetBurn"
"""The freshness SLOs' burn-rate alert (the Prometheus rule's name, ``alerts.slo_rules``)."""


def alertname_of(status: SloStatus) -> str:
    """Return the burn-rate alert of a status' kind of SLO (completeness unless it says freshness)."""
    return FRESHNESS_ALERT_NAME if getattr(status, "kind", "completeness") == "freshness" else ALERT_NAME


class SloEvaluator:
    """Judges the SLOs over the job's final windows at every micro-batch; alerts on burn rates.

    Args:
        settings: The SLOs and their burn-rate alerts (``alerts.slo_settings.load_slo_settings``).
        registry: Where the gauges go (the job's registry); None: no gauges.
        generator_url: The alerts' link back (``AlertSettings.generator_url``).
    """

    def __init__(
        self,
        settings: SloSettings,
        registry: CollectorRegistry | None = None,
        generator_url: str | None = None,
    ) -> None:
        self.settings = settings
        longest = max(duration_seconds(a.long_window) for a in settings.burn_rate_alerts) * 1000
        period = max((duration_seconds(s.period) * 1000 for s in settings.slos()), default=longest)
        self.history = WindowHistory(longest, period, period // PERIOD_BUCKETS)
        self.lookbacks_ms = sorted(
            {duration_seconds(w) * 1000 for w in _alert_windows(settings)}
            | {duration_seconds(s.period) * 1000 for s in settings.slos()}
        )
        """Every look-back the SLOs are judged over (alert windows, periods), ms."""
        self.metrics = SloMetrics(registry) if registry is not None else None
        self.generator_url = generator_url
        self.statuses: list[SloStatus] = []
        """The latest evaluation (what the gauges show)."""
        self.evaluated_at_ms: int | None = None
        self._machines: dict[AlertKey, AlertStateMachine] = {}
        self._firing: dict[AlertKey, AlertEvent] = {}

    @property
    def keep_ms(self) -> int:
        """How far back the evaluation needs final windows (the longest compliance period), ms."""
        return self.history.keep_ms

    def load(self, rows: Iterable[Mapping[str, Any]], now_ms: int) -> int:
        """Add earlier final results (the job's Parquet files at start); return how many were kept."""
        n = self.history.add(rows, now_ms)
        self.history.prune(now_ms)
        return n

    def observe(self, rows: Iterable[Mapping[str, Any]], now_ms: int) -> list[AlertEvent]:
        """Add one micro-batch's results, evaluate every SLO at ``now_ms``; return the alert transitions.

        Args:
            rows: Window results of the micro-batch (only final ones count).
            now_ms: Wall clock, ms since the epoch: the end of every look-back.
        """
        self.history.add(rows, now_ms)
        self.history.prune(now_ms)
        self.statuses = slo_status(self.history.rows(now_ms, self.lookbacks_ms), self.settings, now_ms)
        self.evaluated_at_ms = now_ms
        if self.metrics is not None:
            self.metrics.update(self.statuses, self.settings, now_ms)
        return self._alerts(now_ms)

    def firing(self) -> list[AlertEvent]:
        """Return the firing event of every in-job SLO alert firing now."""
        return list(self._firing.values())

    # ------------------------------------------------------------------------------------ alerts
    def _pairs(self) -> dict[str, BurnRateAlert]:
        """Return the burn-rate alerts by the name ``SloStatus.firing`` gives them (``1h/5m 14.4x``)."""
        return {f"{a.long_window}/{a.short_window} {a.factor:g}x": a for a in self.settings.burn_rate_alerts}

    def _alerts(self, now_ms: int) -> list[AlertEvent]:
        pairs = self._pairs()
        severities = {a.severity for a in pairs.values()}
        bad: dict[AlertKey, list[tuple[SloStatus, BurnRateAlert]]] = {}
        judged: set[AlertKey] = set()
        for s in self.statuses:
            name = alertname_of(s)
            judged.update((name, s.topic, s.tier, severity) for severity in severities)
            for pair in s.firing:
                alert = pairs[pair]
                bad.setdefault((name, s.topic, s.tier, alert.severity), []).append((s, alert))
        events: list[AlertEvent] = []
        for key in sorted(judged | set(self._machines)):
            machine = self._machines.setdefault(key, AlertStateMachine())
            transition = machine.step(key in bad)
            if transition is Transition.FIRE:
                event = self._event(key, bad[key], now_ms, now_ms)
                self._firing[key] = event
                events.append(event)
            elif transition is Transition.RESOLVE:
                fired = self._firing.pop(key)
                ends = max(now_ms, fired.starts_at_ms)
                last = self._event(key, [], fired.starts_at_ms, now_ms) if key in judged else fired
                events.append(
                    fired.resolved(
                        ends,
                        event_at_ms=now_ms,
                        summary=f"resolved: {last.summary}",
                        description=last.description,
                        numbers=last.numbers,
                        value=last.value,
                    )
                )
        return events

    def _event(
        self, key: AlertKey, burning: list[tuple[SloStatus, BurnRateAlert]], starts_at_ms: int, now_ms: int
    ) -> AlertEvent:
        """Return the firing event of ``key`` (``burning``: its SLOs and pairs; empty: on resolving)."""
        alertname, topic, tier, severity = key
        alert: BurnRateAlert | None
        if burning:
            status, alert = max(burning, key=lambda sa: (sa[1].factor, -(sa[0].budget_left or 0.0)))
            long_window = alert.long_window
        else:
            mine = [s for s in self.statuses if (alertname_of(s), s.topic, s.tier) == key[:3]]
            status = min(mine, key=lambda s: 1.0 if s.budget_left is None else s.budget_left)
            alert = None
            long_window = max((a.long_window for a in self.settings.burn_rate_alerts), key=duration_seconds)
        since = now_ms - duration_seconds(long_window) * 1000
        freshness = alertname == FRESHNESS_ALERT_NAME  # bad = held later than S, not lost: no list yet
        spent = [] if freshness else self.history.spending((topic, tier), since, now_ms)
        bad_words = "messages held later than the SLO's threshold" if freshness else "messages lost"
        budget_messages = (1.0 - status.objective) * status.period_counts.sent
        numbers: dict[str, float] = {
            "objective": status.objective,
            "period_sent": float(status.period_counts.sent),
            "period_lost": float(status.period_counts.lost),
        }
        if status.budget_left is not None:
            numbers["budget_left"] = status.budget_left
        numbers.update({f"burn_rate_{w}": b for w, b in status.burn_rates.items() if b is not None})
        budget = "unknown" if status.budget_left is None else f"{100 * status.budget_left:.1f}%"
        names = sorted({f"{s.slo} ({a.long_window}/{a.short_window} {a.factor:g}x)" for s, a in burning})
        windows = "; ".join(
            f"{rfc3339(w.start_ms)} lost {w.lost} of {w.sent}"
            + (f" ({100 * w.lost / budget_messages:.2f}% of the budget)" if budget_messages else "")
            for w in spent
        )
        what = "no longer burning its error budget fast"
        if alert is not None:
            pair = f"{alert.long_window} and {alert.short_window}"
            what = f"burning its error budget {alert.factor:g}x over {pair}"
        summary = (
            f"{topic} on {tier}: SLO {status.slo} ({100 * status.objective:.6g}% over {status.period}) "
            + what
            + f"; {budget} of the budget left"
        )
        description = (
            f"SLOs burning: {', '.join(names) or 'none'}. Over {status.period}: "
            f"{status.period_counts.lost} of {status.period_counts.sent} {bad_words}, {budget} of the "
            f"error budget left. Windows that spent it in the last {long_window}: {windows or 'none'}."
        )
        return AlertEvent(
            alertname=alertname,
            topic=topic,
            tier=tier,
            severity=severity,  # type: ignore[arg-type]  # a BurnRateAlert's severity
            status=AlertStatus.FIRING,
            starts_at_ms=starts_at_ms,
            event_at_ms=now_ms,
            summary=summary,
            description=description,
            window_start_ms=spent[0].start_ms if spent else None,
            window_end_ms=spent[0].end_ms if spent else None,
            value=status.burn_rates.get(long_window),
            threshold=alert.factor if alert else None,
            numbers=numbers,
            generator_url=self.generator_url,
        )

    # ------------------------------------------------------------------------------------- state
    def to_state(self) -> dict[str, Any]:
        """Return the alerts' state as JSON-compatible data (the history is read back from Parquet)."""
        return {
            "machines": [[*k, m.state.value] for k, m in sorted(self._machines.items())],
            "firing": [e.to_dict() for e in self._firing.values()],
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`to_state`'s data: firing alerts stay firing and resolve once.

        Raises:
            ValueError: the data is not what :meth:`to_state` returns (nothing is changed then).
        """
        from alerts.state_machine import AlertState

        try:
            machines = {
                (n, t, r, s): AlertStateMachine(state=AlertState(st)) for n, t, r, s, st in state["machines"]
            }
            events = map(AlertEvent.from_dict, state["firing"])
            firing = {(e.alertname, e.topic, e.tier, e.severity): e for e in events}
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not an SLO evaluator state: {type(exc).__name__}: {exc}") from exc
        self._machines, self._firing = machines, firing


# ------------------------------------------------------------------------------------ the report
def report_data(rows: Iterable[Mapping[str, Any]], settings: SloSettings, now_ms: int) -> dict[str, Any]:
    """Return the SLO section of ``kafka-audit report`` as JSON-compatible data (``dashboards`` renders it).

    The same evaluation as the job's and ``slo status``'s (:class:`SloEvaluator` over ``rows`` at
    ``now_ms``), so the report shows their numbers.

    Returns:
        ``{"evaluated_at_ms", "windows": [alert windows], "statuses": [SloStatus as dicts], "spending":
        [per completeness status, the final windows of its period that lost the most (at most
        REPORT_SPENDING_WINDOWS): slo, topic, tier, window_start_ms, window_end_ms, sent, lost, budget_share
        (lost / the budget in messages)], "freshness": [per (topic, tier) with a measured histogram over
        the longest period: topic, tier, counts (the summed freshness_counts)]}``.
    """
    import dataclasses

    rows = list(rows)
    evaluator = SloEvaluator(settings)
    evaluator.observe(rows, now_ms)
    spending: list[dict[str, Any]] = []
    for s in evaluator.statuses:
        if alertname_of(s) != ALERT_NAME:
            continue
        budget = (1.0 - s.objective) * s.period_counts.sent
        since = now_ms - duration_seconds(s.period) * 1000
        for w in _all_spending(rows, s.topic, s.tier, since, now_ms):
            where = {"slo": s.slo, "topic": s.topic, "tier": s.tier}
            window = {"window_start_ms": w.start_ms, "window_end_ms": w.end_ms}
            share = w.lost / budget if budget else None
            spending.append({**where, **window, "sent": w.sent, "lost": w.lost, "budget_share": share})
    histograms: dict[Key, list[int]] = {}
    for r in final_windows(rows):
        if now_ms - evaluator.keep_ms < int(r["window_end_ms"]) <= now_ms and r.get("freshness_counts"):
            key = (str(r["topic"]), str(r["tier"]))
            histograms[key] = _histogram_sum(histograms.get(key, []), [int(n) for n in r["freshness_counts"]])
    return {
        "evaluated_at_ms": now_ms,
        "windows": _alert_windows(settings),
        "statuses": [dataclasses.asdict(s) for s in evaluator.statuses],
        "spending": spending,
        "freshness": [{"topic": t, "tier": r, "counts": c} for (t, r), c in sorted(histograms.items())],
    }


def _all_spending(
    rows: list[Mapping[str, Any]], topic: str, tier: str, since_ms: int, now_ms: int
) -> list[_Window]:
    """Return the final windows of (topic, tier) that ended in ``(since_ms, now_ms]`` and lost, most first."""
    history = WindowHistory(now_ms - since_ms, now_ms - since_ms, now_ms - since_ms)
    history.add([r for r in rows if (r["topic"], r["tier"]) == (topic, tier)], now_ms)
    return history.spending((topic, tier), since_ms, now_ms, REPORT_SPENDING_WINDOWS)
