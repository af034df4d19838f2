"""Where each SLO stands, computed from the final window results (``kafka-audit slo status``).

The same quantities as the Prometheus rules of :mod:`alerts.slo_rules`, from the window results the
job writes (the results topic or its Parquet files) instead of its counters: for each SLO and each
(topic, tier) it matches, over the final windows that ended within a look-back ``w`` of ``now``
(``now - w < window_end_ms <= now``), events = sum of ``sent``, bad events = sum of
``max(0, sent - unique)`` (``kafka_audit_messages_lost_total``'s increment,
``spark_streaming/metrics.py``); for a freshness SLO of threshold S, events = the messages of the
tier's freshness histograms (``freshness_counts``, :mod:`audit_record.freshness`), bad events = those
held later than S (exact counts: S is a bucket bound; ``kafka_audit_freshness_messages_total``'s
increments). Then, with ``budget = 1 - objective``:

* actual = 1 - bad / events over the compliance period;
* budget left = 1 - (bad / events) / budget over the period (negative: overspent);
* burn rate over ``w`` = (bad / events over ``w``) / budget;
* state = ``page`` / ``ticket`` if a burn-rate alert's two windows both burn faster than its factor
  (a page also needing the low-traffic guard's events in its long window), else ``ok``; ``no data``
  without events in the period.

The counters move when a window's final result is emitted, a little after its end, so Prometheus'
numbers lag these by that delay.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from alerts.slo_rules import Slo, page_min_events
from alerts.slo_settings import FreshnessSlo, SloSettings, duration_seconds
from audit_record import freshness, window_result
from kafka_plumbing.errors import ConfigError

_COUNTED = ("sent", "unique", "freshness_counts")
"""What an SLO counts: completeness from sent and unique, freshness from the histogram."""
COLUMNS = (*window_result.KEY_FIELDS, "window_end_ms", "state", "result_at_ms", *_COUNTED)
"""The window-result fields the status reads (its key, end, state, counts, emission time, freshness)."""


@dataclass(frozen=True)
class Counts:
    """Events and bad events in a look-back.

    Completeness: ``sent`` = messages sent, ``lost`` = sent - unique (per window, at least 0).
    Freshness: ``sent`` = messages the tier held (freshness measured), ``lost`` = held later than S.
    :attr:`events` and :attr:`bad` name them for either kind.
    """

    sent: int = 0
    lost: int = 0

    @property
    def events(self) -> int:
        """Events of the SLO (``sent``)."""
        return self.sent

    @property
    def bad(self) -> int:
        """Bad events of the SLO (``lost``)."""
        return self.lost

    @property
    def error_ratio(self) -> float | None:
        """``lost / sent``, None without events."""
        return self.lost / self.sent if self.sent else None


@dataclass(frozen=True)
class SloStatus:
    """One SLO on one (topic, tier).

    Attributes:
        slo, topic, tier: What is judged.
        objective: The SLO's objective (fraction 0-1). period: its compliance period (``30d``).
        period_counts: Events and bad events over the period.
        actual: 1 - error ratio over the period (None without events).
        budget_left: 1 - error ratio / (1 - objective) over the period (None without events; < 0 overspent).
        burn_rates: Every alert window, long and short (``5m``, ``1h``...) -> error ratio / (1 - objective)
            (None without events).
        state: ``page``, ``ticket``, ``ok`` or ``no data``.
        firing: The burn-rate alerts firing, as ``<long>/<short> <factor>x``.
        kind: ``completeness`` or ``freshness``.
    """

    slo: str
    topic: str
    tier: str
    objective: float
    period: str
    period_counts: Counts
    actual: float | None
    budget_left: float | None
    burn_rates: dict[str, float | None]
    state: str
    firing: tuple[str, ...]
    kind: str = "completeness"


def final_windows(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Return the final results, one per (topic, window_start_ms, tier): the newest ``result_at_ms``."""
    newest: dict[tuple[str, int, str], Mapping[str, Any]] = {}
    for row in rows:
        if row.get("state") != "final":
            continue
        key = (row["topic"], int(row["window_start_ms"]), row["tier"])
        seen = newest.get(key)
        if seen is None or (row.get("result_at_ms") or 0) >= (seen.get("result_at_ms") or 0):
            newest[key] = row
    return list(newest.values())


def _counts(slo: Slo, rows: list[Mapping[str, Any]], now_ms: int, window: str) -> Counts:
    start = now_ms - duration_seconds(window) * 1000
    inside = [r for r in rows if start < int(r["window_end_ms"]) <= now_ms]
    if isinstance(slo, FreshnessSlo):
        fresh = held = 0
        for r in inside:
            within, total = freshness.fresh_and_total(r.get("freshness_counts") or [], slo.threshold_ms)
            fresh, held = fresh + within, held + total
        return Counts(held, held - fresh)
    return Counts(
        sum(int(r["sent"] or 0) for r in inside),
        sum(max(0, int(r["sent"] or 0) - int(r["unique"] or 0)) for r in inside),
    )


def _judge(slo: Slo, rows: list[Mapping[str, Any]], settings: SloSettings, now_ms: int) -> SloStatus:
    alert_windows = {w for a in settings.burn_rate_alerts for w in (a.long_window, a.short_window)}
    windows = alert_windows | {slo.period}
    counts = {w: _counts(slo, rows, now_ms, w) for w in windows}
    budget = slo.error_budget

    def burn(w: str) -> float | None:
        ratio = counts[w].error_ratio
        return None if ratio is None else ratio / budget

    firing: list[tuple[str, str]] = []
    for alert in settings.burn_rate_alerts:
        long_burn, short_burn = burn(alert.long_window), burn(alert.short_window)
        if long_burn is None or short_burn is None:
            continue
        guard = page_min_events(slo, alert, settings)
        if long_burn > alert.factor and short_burn > alert.factor and counts[alert.long_window].sent >= guard:
            firing.append((alert.urgency, f"{alert.long_window}/{alert.short_window} {alert.factor:g}x"))
    period = counts[slo.period]
    ratio = period.error_ratio
    if ratio is None:
        state = "no data"
    else:
        state = next((u for u in ("page", "ticket") if any(f[0] == u for f in firing)), "ok")
    first = rows[0]
    return SloStatus(
        slo=str(slo.name),
        topic=str(first["topic"]),
        tier=str(first["tier"]),
        objective=slo.objective,
        period=slo.period,
        period_counts=period,
        actual=None if ratio is None else 1.0 - ratio,
        budget_left=None if ratio is None else 1.0 - ratio / budget,
        burn_rates={w: burn(w) for w in sorted(alert_windows, key=duration_seconds)},
        state=state,
        firing=tuple(f[1] for f in firing),
        kind="freshness" if isinstance(slo, FreshnessSlo) else "completeness",
    )


def slo_status(rows: Iterable[Mapping[str, Any]], settings: SloSettings, now_ms: int) -> list[SloStatus]:
    """Return each SLO's status on each (topic, tier) it matches, sorted by SLO, topic, tier.

    Args:
        rows: Window results (any state; only final ones count, the newest per window).
        settings: The SLOs and burn-rate alerts.
        now_ms: The end of every look-back, ms since the epoch.
    """
    finals = final_windows(rows)
    out: list[SloStatus] = []
    for slo in settings.slos():
        period_start = now_ms - duration_seconds(slo.period) * 1000
        groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for r in finals:
            if (
                period_start < int(r["window_end_ms"]) <= now_ms
                and re.fullmatch(slo.topic_pattern, r["topic"])
                and re.fullmatch(slo.tier_pattern, r["tier"])
            ):
                groups.setdefault((r["topic"], r["tier"]), []).append(r)
        out.extend(_judge(slo, groups[key], settings, now_ms) for key in sorted(groups))
    return out


def read_parquet_results(root: Path, since_ms: int) -> list[dict[str, Any]]:
    """Return the window results in the job's Parquet files (``<root>/date=YYYY-MM-DD/*.parquet``).

    Only the :data:`COLUMNS` (those a file has) of the files of days that may hold windows ending after
    ``since_ms``.

    Raises:
        ConfigError: ``root`` is not a directory.
    """
    import pyarrow.parquet as pq

    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"--results-dir {root}: no such directory (the spark-job --parquet-dir)")
    first_day = (datetime.fromtimestamp(since_ms / 1000, UTC) - timedelta(days=1)).strftime("%Y-%m-%d")
    rows: list[dict[str, Any]] = []
    for path in sorted(root.rglob("*.parquet")):
        day = next((p.split("=", 1)[1] for p in path.parent.parts if p.startswith("date=")), None)
        if day is not None and day < first_day:
            continue
        present = set(pq.read_schema(path).names)  # files written before freshness_counts lack it
        columns = [c for c in COLUMNS if c in present]
        rows.extend(pq.read_table(path, columns=columns, partitioning=None).to_pylist())
    return rows
