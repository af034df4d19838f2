"""How a soak is judged (issue 18's acceptance), as pure functions of its records.

* **Windows** (:func:`compare_windows`): every final window result of a cluster tier must hold exactly
  what the verifier (:mod:`audit_consumer.ground_truth`) counts in the topic for that window: ``sent``
  (from the producers' final snapshots), ``unique`` and ``duplicated`` (from the stamps in the topic);
  a window the verifier saw sent messages in must have a final result.
* **Alerts** (:func:`classify_alerts`): each chaos event covers ``[start, end + settle_ms]``
  (``end``: the faulty component is back). A firing alert is a *chaos* alert when the window it judged
  overlaps a covered span, or when it started inside a covered span extended by ``judge_ms`` (how long
  a window hit by the fault takes to be judged: the window, its final wait); any other firing alert is
  a *false* alert. Info events (model and control-loop decisions) are not alerts.
* **Memory** (:func:`rss_growth`): per component, its RSS *level* at the end against its level at
  ``baseline_minute`` (10), on the same process. A level is the median of the samples in a
  ``level_span_min`` (5) minute span: centred on the baseline minute, the last 5 minutes of the load at
  the end. A sawtooth shorter than half the span (Prometheus's 5-minute TSDB compaction holds +5-30 MiB
  for about 2 of every 5 minutes; a garbage collector's cycle) does not move a median, a leak does: it
  raises every sample. The single samples at those minutes are reported beside it (``raw_growth``). A
  component restarted after the baseline is measured from 10 minutes after its last start, when it
  lived at least ``min_span_min`` more minutes, else not judged.
* **Micro-batches** (:func:`batch_stats`): p50 / p99 / max of Spark's ``triggerExecution`` durations,
  over all micro-batches, without the first of each driver start (query start-up and state reload
  after a SIGKILL: "steady"), and over the healthy periods (no chaos event plus settle margin); the
  acceptance judges the healthy p99; when no micro-batch ran in a healthy period (a short soak), the p99 of
  the steady ones that overlap no chaos event; only when there are none either, the steady p99. A
  micro-batch the driver's SIGKILL cut short reports no duration: the report shows the longest time
  without a finished micro-batch beside them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

INFO_ALERTS = (
    "KafkaAuditModelPromoted",
    "KafkaAuditModelRejected",
    "KafkaAuditConfigChanged",
    "KafkaAuditConfigRolledBack",
    "KafkaAuditConfigKept",
    "KafkaAuditConfigAdvice",
    "KafkaAuditConfigNotApplied",
)
"""Decision events on the alerts topic (``docs/DESIGN.md``, "Alert events"): events, not alerts."""

COMPARED = ("sent", "unique", "duplicated")
"""Counts of a window result that must equal the verifier's."""


@dataclass(frozen=True)
class WindowCheck:
    """One final window against the verifier.

    Attributes:
        topic, window_start_ms, tier: The window result's key.
        exact: True when every count of :data:`COMPARED` equals the verifier's.
        counted: The result's counts, and its ``late`` (messages its tier read after closing the window,
            not compared: a non-zero ``late`` in a short window says the tier closed it too early);
            None: no final result for a window the verifier has.
        truth: The verifier's counts.
    """

    topic: str
    window_start_ms: int
    tier: str
    exact: bool
    counted: dict[str, int] | None
    truth: dict[str, int]


def compare_windows(
    results: Iterable[Mapping[str, Any]],
    truth: Mapping[str, Mapping[int, Mapping[str, int]]],
    tiers: Sequence[str],
) -> list[WindowCheck]:
    """Compare final window results with the verifier, per (topic, window, cluster tier).

    Args:
        results: Final window results (newest per key), any tiers; rows of other tiers are ignored.
        truth: topic -> window start -> the verifier's totals
            (``audit_consumer.ground_truth.totals_by_window``).
        tiers: The cluster tiers that must have a result for every window, e.g. ``["cluster:soak"]``.

    Returns:
        One check per (topic, window, tier) the results or the verifier have (windows the verifier saw
        nothing sent in and no result names are not listed).
    """
    by_key = {(r["topic"], int(r["window_start_ms"]), r["tier"]): r for r in results if r["tier"] in tiers}
    keys = set(by_key)
    for topic, windows in truth.items():
        for start, t in windows.items():
            if t.get("sent", 0) or t.get("received", 0):
                keys |= {(topic, int(start), tier) for tier in tiers}
    checks = []
    for topic, start, tier in sorted(keys):
        t = {k: int(truth.get(topic, {}).get(start, {}).get(k, 0)) for k in COMPARED}
        row = by_key.get((topic, start, tier))
        counted = None if row is None else {k: int(row.get(k) or 0) for k in COMPARED}
        exact = counted == t
        if row is not None and counted is not None:  # late: what a tier counted after closing the window
            counted["late"] = int(row.get("late") or 0)
        checks.append(WindowCheck(topic, start, tier, exact, counted, t))
    return checks


@dataclass(frozen=True)
class ChaosSpan:
    """A chaos event as it happened: label, start and end (component back), ms since the epoch."""

    label: str
    started_ms: int
    ended_ms: int


@dataclass
class AlertVerdict:
    """One firing alert and its period.

    Attributes:
        alertname, topic, tier, source: Labels; ``source`` is ``job`` (alerts topic) or ``prometheus``.
        starts_at_ms: When it started firing, ms.
        window_start_ms, window_end_ms: The window it judged (None for alerts without one).
        chaos: The chaos event it is attributed to; None: a false alert (healthy period).
    """

    alertname: str
    topic: str
    tier: str
    source: str
    starts_at_ms: int
    window_start_ms: int | None = None
    window_end_ms: int | None = None
    chaos: str | None = None

    @property
    def false_alert(self) -> bool:
        """True when the alert fired in a healthy period."""
        return self.chaos is None


def classify_alerts(
    alerts: Iterable[Mapping[str, Any]], spans: Sequence[ChaosSpan], settle_ms: int, judge_ms: int
) -> list[AlertVerdict]:
    """Attribute each firing alert to a chaos event or call it false (see the module docstring).

    Args:
        alerts: Alert dicts with ``alertname``, ``topic``, ``tier``, ``starts_at_ms``, optional
            ``window_start_ms``/``window_end_ms``, ``status`` (only ``firing`` ones count; one per
            episode) and ``source``.
        spans: The chaos events.
        settle_ms: Extra time after each event's end that still counts as chaos, ms.
        judge_ms: How long after a window starts it is judged at the latest, ms (window + final wait).
    """
    out: list[AlertVerdict] = []
    seen: set[tuple[str, str, str, int]] = set()
    for a in sorted(alerts, key=lambda a: int(a["starts_at_ms"])):
        if a.get("status", "firing") != "firing" or a["alertname"] in INFO_ALERTS:
            continue
        key = (a["alertname"], a.get("topic") or "", a.get("tier") or "", int(a["starts_at_ms"]))
        if key in seen:
            continue
        seen.add(key)
        ws, we = a.get("window_start_ms"), a.get("window_end_ms")
        v = AlertVerdict(
            alertname=a["alertname"],
            topic=a.get("topic") or "",
            tier=a.get("tier") or "",
            source=a.get("source", "job"),
            starts_at_ms=int(a["starts_at_ms"]),
            window_start_ms=None if ws is None else int(ws),
            window_end_ms=None if we is None else int(we),
        )
        for s in spans:
            end = s.ended_ms + settle_ms
            window_hit = ws is not None and we is not None and int(ws) < end and int(we) > s.started_ms
            started_hit = s.started_ms <= v.starts_at_ms <= end + judge_ms
            if window_hit or started_hit:
                v.chaos = s.label
                break
        out.append(v)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Return the ``q``-th percentile (0-100) by nearest rank (NaN for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


@dataclass(frozen=True)
class BatchStats:
    """Micro-batch durations (Spark ``triggerExecution``), ms."""

    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    steady_count: int
    steady_p50_ms: float
    steady_p99_ms: float
    steady_max_ms: float
    healthy_count: int = 0
    healthy_p50_ms: float = math.nan
    healthy_p99_ms: float = math.nan
    healthy_max_ms: float = math.nan
    outside_count: int = 0
    """Steady micro-batches that overlap no chaos event (no settle margin): judged when none is healthy."""
    outside_p50_ms: float = math.nan
    outside_p99_ms: float = math.nan
    outside_max_ms: float = math.nan


def batch_stats(
    progress: Sequence[Mapping[str, Any]], spans: Sequence[ChaosSpan] = (), settle_ms: int = 0
) -> BatchStats:
    """Return p50 / p99 / max over every micro-batch, all but each driver's first, and healthy periods.

    *Steady* leaves out the first micro-batch of each driver process (query start, state reload);
    *healthy* also every micro-batch that overlaps a chaos event extended by ``settle_ms`` (a broker
    SIGKILL stalls the Kafka source, an executor loss re-runs tasks: the fault, not the job's pace).
    """
    ordered = sorted(progress, key=lambda r: (r["at_ms"], r["batch_id"]))
    all_ms = [float(r["duration_ms"]) for r in ordered]
    firsts: set[int] = set()
    seen_pids: set[int] = set()
    for i, r in enumerate(ordered):
        if r.get("pid") not in seen_pids:
            seen_pids.add(r.get("pid"))  # type: ignore[arg-type]
            firsts.add(i)
    steady = [d for i, d in enumerate(all_ms) if i not in firsts]

    def calm(r: Mapping[str, Any], settle: int) -> bool:
        start, end = r["at_ms"], r["at_ms"] + r["duration_ms"]
        return not any(start < s.ended_ms + settle and end > s.started_ms for s in spans)

    pairs = [(d, r) for i, (d, r) in enumerate(zip(all_ms, ordered, strict=True)) if i not in firsts]
    healthy = [d for d, r in pairs if calm(r, settle_ms)]
    outside = [d for d, r in pairs if calm(r, 0)]
    return BatchStats(
        len(all_ms),
        percentile(all_ms, 50),
        percentile(all_ms, 99),
        max(all_ms, default=math.nan),
        len(steady),
        percentile(steady, 50),
        percentile(steady, 99),
        max(steady, default=math.nan),
        len(healthy),
        percentile(healthy, 50),
        percentile(healthy, 99),
        max(healthy, default=math.nan),
        len(outside),
        percentile(outside, 50),
        percentile(outside, 99),
        max(outside, default=math.nan),
    )


@dataclass
class Growth:
    """RSS growth of one component.

    Attributes:
        component: Its name.
        from_minute, to_minute: The minutes compared (since the load started; None: not judged).
        rss_from, rss_to: Its RSS level there: the median of the samples in the span around each, bytes.
        growth: rss_to / rss_from - 1 (fraction; None: not judged). The acceptance judges this.
        raw_from, raw_to: The single samples nearest ``from_minute`` and at ``to_minute``, bytes.
        raw_growth: raw_to / raw_from - 1 (fraction; None: not judged); reported, not judged.
        note: Why it was not judged, or which incarnation was measured.
    """

    component: str
    from_minute: float | None = None
    to_minute: float | None = None
    rss_from: int | None = None
    rss_to: int | None = None
    growth: float | None = None
    raw_from: int | None = None
    raw_to: int | None = None
    raw_growth: float | None = None
    note: str = ""


def rss_growth(
    samples: Sequence[Mapping[str, Any]],
    load_start_ms: int,
    baseline_minute: float = 10.0,
    min_span_min: float = 15.0,
    end_minute: float | None = None,
    level_span_min: float = 5.0,
) -> list[Growth]:
    """RSS level growth per component from ``baseline_minute`` (or 10 min after its last start) to the end.

    Args:
        samples: Per-component samples with ``component``, ``at_ms``, ``pid``, ``rss_bytes``.
        load_start_ms: Minute 0.
        baseline_minute: The first minute compared.
        min_span_min: A restarted component's last incarnation is judged only when at least this many
            minutes lie between its baseline and the last sample.
        end_minute: The last minute compared (the load's end: minute 60 of a 60-minute soak); samples
            after it (while the last windows become final) are left out. None: every sample.
        level_span_min: Minutes of samples whose median is the level: centred on the baseline, ending
            at the last sample. 0: the single samples (``growth`` equals ``raw_growth``).

    Returns:
        One :class:`Growth` per component, sorted by name.
    """
    by_component: dict[str, list[Mapping[str, Any]]] = {}
    for s in samples:
        by_component.setdefault(s["component"], []).append(s)
    out = []
    half = level_span_min / 2
    for name, rows in sorted(by_component.items()):
        last_ms = None if end_minute is None else load_start_ms + (end_minute + 0.5) * 60_000
        rows = sorted(
            (r for r in rows if r.get("pid") and (last_ms is None or r["at_ms"] <= last_ms)),
            key=lambda r: r["at_ms"],
        )
        g = Growth(name)
        out.append(g)
        if not rows:
            g.note = "never sampled running"
            continue
        last = rows[-1]
        same = [r for r in rows if r["pid"] == last["pid"] and r["rss_bytes"]]
        if not same:
            g.note = "no RSS sampled"
            continue
        first_at = same[0]["at_ms"]
        minute = lambda ms: (ms - load_start_ms) / 60_000  # noqa: E731
        restarted = minute(first_at) > 1.0  # started (again) after the load began
        base_min = max(baseline_minute, minute(first_at) + 10.0) if restarted else baseline_minute
        end_min = minute(last["at_ms"])
        if end_min - base_min < (min_span_min if restarted else 0.0) or end_min <= base_min:
            g.note = f"last started at minute {minute(first_at):.0f}: too short to judge"
            continue
        base = min(same, key=lambda r: abs(minute(r["at_ms"]) - base_min))
        g.from_minute, g.to_minute = round(minute(base["at_ms"]), 1), round(end_min, 1)
        g.raw_from, g.raw_to = int(base["rss_bytes"]), int(last["rss_bytes"])
        g.raw_growth = g.raw_to / g.raw_from - 1
        around = [r["rss_bytes"] for r in same if abs(minute(r["at_ms"]) - minute(base["at_ms"])) <= half]
        ending = [r["rss_bytes"] for r in same if end_min - level_span_min < minute(r["at_ms"]) <= end_min]
        g.rss_from, g.rss_to = int(median(around)), int(median(ending or [g.raw_to]))
        g.growth = g.rss_to / g.rss_from - 1
        if restarted:
            g.note = f"incarnation started at minute {minute(first_at):.0f}"
    return out


@dataclass
class Verdict:
    """The soak's acceptance numbers (issue 18)."""

    windows_total: int = 0
    windows_exact: int = 0
    false_alerts: int = 0
    chaos_alerts: int = 0
    max_rss_growth: float | None = None
    rss_limit: float = 0.10
    batches: BatchStats | None = None
    trigger_ms: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when every criterion holds (``failures`` empty)."""
        return not self.failures


def judge(
    checks: Sequence[WindowCheck],
    alerts: Sequence[AlertVerdict],
    growth: Sequence[Growth],
    batches: BatchStats,
    trigger_ms: int,
    rss_limit: float = 0.10,
    judge_rss: bool = True,
) -> Verdict:
    """Apply the acceptance: all windows exact, no false alert, RSS level growth < limit, p99 < trigger."""
    v = Verdict(trigger_ms=trigger_ms, rss_limit=rss_limit, batches=batches)
    v.windows_total = len(checks)
    v.windows_exact = sum(c.exact for c in checks)
    v.false_alerts = sum(a.false_alert for a in alerts)
    v.chaos_alerts = len(alerts) - v.false_alerts
    judged = [g.growth for g in growth if g.growth is not None]
    v.max_rss_growth = max(judged) if judged else None
    if v.windows_total == 0:
        v.failures.append("no final windows")
    if v.windows_exact != v.windows_total:
        v.failures.append(
            f"{v.windows_total - v.windows_exact} of {v.windows_total} final windows differ from the verifier"
        )
    if v.false_alerts:
        v.failures.append(f"{v.false_alerts} false alert(s)")
    if judge_rss:
        for g in growth:
            if g.growth is not None and g.growth >= rss_limit:
                v.failures.append(
                    f"{g.component}: RSS level grew {100 * g.growth:.1f}% "
                    f"(minute {g.from_minute} to {g.to_minute})"
                )
    if batches.healthy_count:
        judged, which = batches.healthy_p99_ms, "in healthy periods"
    elif batches.outside_count:  # a short soak: every period within a chaos event's settle margin
        judged, which = batches.outside_p99_ms, "outside chaos events"
    else:
        judged, which = batches.steady_p99_ms, "(steady)"
    if not judged < trigger_ms:
        v.failures.append(f"micro-batch p99 {which} {judged:.0f} ms not below the trigger {trigger_ms} ms")
    return v


def rejudge(
    summary: dict[str, Any], samples: Sequence[Mapping[str, Any]], progress: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Judge a finished soak again from its records with this version's rules; return the new summary.

    The windows and the alert verdicts are taken as recorded (they need the cluster); the micro-batch
    statistics, the RSS growth and the verdict are computed again (``kafka-audit soak-report``).
    """
    s = summary["settings"]
    start = int(summary["load_started_ms"])
    spans = [
        ChaosSpan(e["label"], e["started_ms"], e["ended_ms"]) for e in summary["chaos"] if e.get("ended_ms")
    ]
    checks = [WindowCheck(**w) for w in summary["windows"]]
    alerts = [AlertVerdict(**{k: v for k, v in a.items() if k != "false_alert"}) for a in summary["alerts"]]
    growth = rss_growth(samples, start, end_minute=float(s["duration_s"]) / 60)
    stats = batch_stats([r for r in progress if r["at_ms"] >= start], spans, int(s["settle_ms"]))
    verdict = judge(
        checks, alerts, growth, stats, int(s["trigger_ms"]), judge_rss=float(s["duration_s"]) >= 30 * 60
    )
    from dataclasses import asdict

    return {
        **summary,
        "growth": [asdict(g) for g in growth],
        "batches": asdict(stats),
        "verdict": asdict(verdict) | {"passed": verdict.passed},
    }
