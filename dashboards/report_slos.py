"""The report's "SLOs" section: budget left, burn rates, the windows that spent the budget, freshness.

Rendered from the data :func:`alerts.slo_evaluation.report_data` returns (plain dicts: the report is in
the dashboards layer, beside ``alerts``, so the application hands the data over; ``kafka_audit.cli``
wires it): the job's and ``kafka-audit slo status``'s evaluation of the same final windows, so the three
show the same numbers. Freshness percentiles per tier come from the summed freshness histograms as the
bucket bound they fall under (``<= 30 s``): exact, never interpolated.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from dashboards.report_tables import html_table, utc_cell

FRESHNESS_QUANTILES = (0.5, 0.9, 0.99)


def percent(x: float | None, digits: int) -> str:
    """Return a fraction as a percentage with ``digits`` decimals (``-`` for None)."""
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def burn(x: float | None) -> str:
    """Return a burn rate as ``14.40x`` (``-`` for None: no events in the window)."""
    return "-" if x is None else f"{x:.2f}x"


def status_table(statuses: Sequence[Mapping[str, Any]], windows: Sequence[str]) -> str:
    """Return one row per SLO, topic and tier: objective, events, bad, actual, budget left, burns, state."""
    header = ["SLO", "kind", "topic", "tier", "objective", "period", "events", "bad", "actual", "budget left"]
    header += [f"burn {w}" for w in windows] + ["state"]
    rows = []
    for s in statuses:
        counts = s["period_counts"]
        firing = f" ({', '.join(s['firing'])})" if s["firing"] else ""
        rows.append(
            [
                s["slo"],
                s.get("kind", "completeness"),
                s["topic"],
                s["tier"],
                percent(s["objective"], 2),
                s["period"],
                f"{counts['sent']:,}",
                f"{counts['lost']:,}",
                percent(s["actual"], 4),
                percent(s["budget_left"], 1),
                *(burn(s["burn_rates"].get(w)) for w in windows),
                s["state"] + firing,
            ]
        )
    return html_table(header, rows)


def spending_table(spending: Sequence[Mapping[str, Any]]) -> str:
    """Return the final windows that spent each completeness SLO's budget, most lost first."""
    if not spending:
        return '<p class="none">No final window lost a message in the SLOs\' periods.</p>'
    rows = [
        [
            w["slo"],
            w["topic"],
            w["tier"],
            utc_cell(w["window_start_ms"]),
            utc_cell(w["window_end_ms"]),
            f"{w['sent']:,}",
            f"{w['lost']:,}",
            percent(w["budget_share"], 2),
        ]
        for w in spending
    ]
    header = ["SLO", "topic", "tier", "window start (UTC)", "end", "sent", "lost", "share of the budget"]
    return html_table(header, rows)


def freshness_bound_s(counts: Sequence[int], q: float) -> str:
    """Return the bucket bound percentile ``q`` of a freshness histogram falls under (``<= 30 s``).

    ``counts``: per bucket, not cumulative (:mod:`audit_record.freshness`); ``> 3600 s`` past the last.
    """
    from audit_record.freshness import BOUNDS_MS

    total = sum(counts)
    if not total:
        return "-"
    seen = 0
    for i, n in enumerate(counts):
        seen += n
        if seen >= q * total:
            return f"<= {BOUNDS_MS[i] / 1000:g} s" if i < len(BOUNDS_MS) else f"> {BOUNDS_MS[-1] / 1000:g} s"
    return "-"


def freshness_table(histograms: Sequence[Mapping[str, Any]]) -> str:
    """Return per topic and tier the messages measured and the freshness percentiles' bucket bounds."""
    if not histograms:
        return '<p class="none">No freshness histograms in these results (no tier measured freshness).</p>'
    header = ["topic", "tier", "messages measured", *(f"p{round(100 * q)}" for q in FRESHNESS_QUANTILES)]
    rows = [
        [h["topic"], h["tier"], f"{sum(h['counts']):,}"]
        + [freshness_bound_s(h["counts"], q) for q in FRESHNESS_QUANTILES]
        for h in histograms
    ]
    return html_table(header, rows)


def slo_section(data: Mapping[str, Any] | None) -> str:
    """Return the report's SLO section (``data``: :func:`alerts.slo_evaluation.report_data`; None: none)."""
    if data is None:
        return '<p class="none">SLOs not evaluated (no SLO settings given to the report).</p>'
    if not data["statuses"]:
        return '<p class="none">No final window of a topic and tier any SLO matches.</p>'
    note = (
        f'<p class="meta">Evaluated at {html.escape(utc_cell(data["evaluated_at_ms"]))} UTC over the final '
        "windows that ended in each look-back, as the Spark job and <code>kafka-audit slo status</code> "
        "do. Events / bad: completeness: messages sent / lost; freshness: messages held / held later "
        "than the SLO's threshold. Budget left = 1 - (bad / events) / (1 - objective) over the period; "
        "burn = error ratio over the window / (1 - objective).</p>"
    )
    return "\n".join(
        [
            note,
            status_table(data["statuses"], data["windows"]),
            "<h3>Windows that spent the budget</h3>",
            spending_table(data["spending"]),
            "<h3>Freshness per tier</h3>",
            freshness_table(data["freshness"]),
        ]
    )
