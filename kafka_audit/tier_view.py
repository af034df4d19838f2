"""The tier view of the live table: per (topic, window), every tier side by side, in flow order.

LinkedIn's audit UI shows, per topic and time bucket, the count at each tier; this table shows per
(topic, window) the messages the producers sent and, per tier (``producer`` -> ``cluster:A`` ->
``cluster:B`` -> ``consumer:<group>``, the order of ``tier_rank``; ``docs/DESIGN.md``, "Tiers"), the
tier's completeness against the producers, a mark when it holds less than the tier before it, the
duplicates it added and how long after the window's end it reached its counts. Used by
``kafka-audit tiers`` (from the results topic) and ``kafka-audit up --tiers``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from rich.table import Table

from audit_record import window_result


def tier_order(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Return the tiers of ``rows`` in flow order (``tier_rank``, then name; unranked last)."""
    rank: dict[str, float] = {}
    for r in rows:
        value = r.get("tier_rank")
        held = rank.get(r["tier"], math.inf)
        rank[r["tier"]] = min(held, float(value)) if value is not None else held
    return sorted(rank, key=lambda t: (rank[t], t))


def tier_cell(row: Mapping[str, Any] | None) -> str:
    """Return one tier's cell: completeness vs the producers, lag, duplicates added; red when short.

    ``99.95% 1.2s``; ``+12 dup`` when the tier added duplicates; red when the tier holds less than the
    tier before it (``completeness_vs_previous`` < 1), ``-`` without a result.
    """
    if row is None:
        return "-"
    value = row.get("completeness")
    text = "-" if value is None else f"{100 * value:.2f}%"
    lag = row.get("tier_lag_ms")
    if lag is not None:
        text += f" {lag / 1000:.1f}s"
    added = row.get("duplicates_added")
    if added:
        text += f" +{added:,} dup"
    behind = row.get("completeness_vs_previous")
    if behind is not None and behind < 1.0:
        return f"[red]{text}[/]"
    return text


def tiers_table(
    rows: Mapping[tuple[str, int, str], Mapping[str, Any]] | Iterable[Mapping[str, Any]],
    limit: int = 20,
    final_only: bool = False,
    title: str = "kafka-audit: completeness per tier",
) -> Table:
    """Build the tier view: one line per (topic, window), newest first, one column per tier.

    Args:
        rows: Window results (``window_result`` fields), as the live table's ``{key: row}`` or a list;
            the newest per (topic, window, tier) is shown.
        limit: At most this many (topic, window) lines.
        final_only: Only windows whose every tier is final.
        title: The table's title.
    """
    values = list(rows.values()) if isinstance(rows, Mapping) else list(rows)
    newest: dict[tuple[str, int, str], Mapping[str, Any]] = {}
    for r in values:
        key = (r["topic"], int(r["window_start_ms"]), r["tier"])
        held = newest.get(key)
        if held is None or (r.get("result_at_ms") or 0) >= (held.get("result_at_ms") or 0):
            newest[key] = r
    tiers = tier_order(newest.values())
    windows: dict[tuple[str, int], dict[str, Mapping[str, Any]]] = {}
    for (topic, start, tier), r in newest.items():
        windows.setdefault((topic, start), {})[tier] = r
    if final_only:
        windows = {
            k: v for k, v in windows.items() if all(r["state"] == window_result.FINAL for r in v.values())
        }
    chosen = sorted(windows, key=lambda k: (k[1], k[0]), reverse=not final_only)[:limit]
    table = Table(title=title)
    for col in ("topic", "window (UTC)", "sent", *tiers, "state"):
        table.add_column(col, justify="left" if col in ("topic", "state") else "right")
    for topic, start in chosen:
        by_tier = windows[(topic, start)]
        any_row = next(iter(by_tier.values()))
        final = all(r["state"] == window_result.FINAL for r in by_tier.values())
        table.add_row(
            topic,
            datetime.fromtimestamp(start / 1000, UTC).strftime("%H:%M:%S"),
            f"{any_row['sent']:,}",
            *(tier_cell(by_tier.get(t)) for t in tiers),
            "[green]final[/]" if final else "[yellow]provisional[/]",
        )
    table.caption = (
        "completeness vs the producers, lag after the window's end; red: less than the tier before"
    )
    return table


def live_tiers_table(
    rows: Mapping[tuple[str, int, str], Mapping[str, Any]],
    progress: Mapping[str, Any],
    limit: int = 20,
    final_only: bool = False,
) -> Table:
    """Return the tier view with the live table's signature (``up --tiers``), audit lag in the title."""
    lag = progress.get("lag_s")
    title = "kafka-audit: completeness per tier" + (f" (audit lag {lag:.1f} s)" if lag is not None else "")
    return tiers_table(rows, limit=limit, final_only=final_only, title=title)
