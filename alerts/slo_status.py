"""Where each completeness SLO stands, computed from the final window results (``kafka-audit slo status``).

The same quantities as the Prometheus rules of :mod:`alerts.slo_rules`, from the window results the
job writes (the results topic or its Parquet files) instead of its counters: for each SLO and each
(topic, tier) it matches, over the final windows that ended within a look-back ``w`` of ``now``
(``now - w < window_end_ms <= now``), events = sum of ``sent``, bad events = sum of
``max(0, sent - unique)`` (``kafka_audit_messages_lost_total``'s increment,
``spark_streaming/metrics.py``). Then, with ``budget = 1 - objective``:

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

from alerts.slo_rules import page_min_events
from alerts.slo_settings import CompletenessSlo, SloSettings, duration_seconds
from audit_record import window_result
from kafka_plumbing.errors import ConfigError

COLUMNS = (*window_result.KEY_FIELDS, "window_end_ms", "state", "sent", "unique", "result_at_ms")
"""The window-result fields the status reads (its key, end, state, counts and emission time)."""


@dataclass(frozen=True)
class Counts:
    """Events (messages sent) and bad events (sent - unique, per window, at least 0) in a look-back."""

    sent: int = 0
    lost: int = 0

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
        burn_rates: Look-back (``1h``, ``5m``...) -> error ratio / (1 - objective) (None without events).
        state: ``page``, ``ticket``, ``ok`` or ``no data``.
        firing: The burn-rate alerts firing, as ``<long>/<short> <factor>x``.
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


def _counts(rows: list[Mapping[str, Any]], now_ms: int, window: str) -> Counts:
    start = now_ms - duration_seconds(window) * 1000
    inside = [r for r in rows if start < int(r["window_end_ms"]) <= now_ms]
    return Counts(
        sum(int(r["sent"] or 0) for r in inside),
        sum(max(0, int(r["sent"] or 0) - int(r["unique"] or 0)) for r in inside),
    )


def _judge(
    slo: CompletenessSlo, rows: list[Mapping[str, Any]], settings: SloSettings, now_ms: int
) -> SloStatus:
    windows = {w for a in settings.burn_rate_alerts for w in (a.long_window, a.short_window)} | {slo.period}
    counts = {w: _counts(rows, now_ms, w) for w in windows}
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
        burn_rates={a.long_window: burn(a.long_window) for a in settings.burn_rate_alerts},
        state=state,
        firing=tuple(f[1] for f in firing),
    )


def slo_status(rows: Iterable[Mapping[str, Any]], settings: SloSettings, now_ms: int) -> list[SloStatus]:
    """Return each completeness SLO's status on each (topic, tier) it matches, sorted by SLO, topic, tier.

    Args:
        rows: Window results (any state; only final ones count, the newest per window).
        settings: The SLOs and burn-rate alerts.
        now_ms: The end of every look-back, ms since the epoch.
    """
    finals = final_windows(rows)
    out: list[SloStatus] = []
    for slo in settings.slos():
        if not isinstance(slo, CompletenessSlo):
            continue
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

    Only the :data:`COLUMNS` of the files of days that may hold windows ending after ``since_ms``.

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
        rows.extend(pq.read_table(path, columns=list(COLUMNS), partitioning=None).to_pylist())
    return rows
