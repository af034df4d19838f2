"""The static report's tables: HTML ``<table>`` markup of final window results and alert events.

Per (topic, tier) totals with the unaudited and unaccounted messages, the windows with either, the newest
configuration suggestions, the alert events, a topic's tiers in flow order, and the predictor model's
accuracy per version and per topic. Rates and fractions are shown as percentages, times as UTC; every
cell is HTML-escaped. The HTML assembly is :mod:`dashboards.report`, the plots
:mod:`dashboards.report_figures`.
"""

from __future__ import annotations

import html
import math
from datetime import UTC, datetime
from typing import Any

import pandas as pd


def _pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.3f}%"


def utc_cell(ms: Any) -> str:
    """Return epoch milliseconds ``ms`` as ``YYYY-MM-DD HH:MM:SS`` (UTC), or ``-`` when missing or NaN."""
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "-"
    return datetime.fromtimestamp(int(ms) / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def html_table(header: list[str], rows: list[list[str]]) -> str:
    """Return a ``<table>`` with one ``<th>`` per ``header`` entry and one ``<tr>`` per row (escaped)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _total(g: pd.DataFrame, col: str) -> int:
    """Sum of ``col`` over ``g`` (0 when the column is missing: results written before it)."""
    return int(pd.to_numeric(g[col], errors="coerce").fillna(0).sum()) if col in g.columns else 0


def _int(x: Any) -> int:
    """``x`` as an int; 0 when missing or NaN (results written before the field existed)."""
    return 0 if x is None or (isinstance(x, float) and math.isnan(x)) else int(x)


def _unaudited_cell(unaudited: int, received: int) -> str:
    """``8,000 (100.000%)``: unaudited messages and their share of what the cluster holds; ``0`` if none."""
    if not unaudited:
        return "0"
    return f"{unaudited:,} ({_pct(unaudited / received if received else None)})"


def summary_table(results: pd.DataFrame) -> str:
    """Return the per-(topic, tier) totals over the report's windows as an HTML table.

    ``unaudited`` counts messages without an audit stamp with their share of the messages the cluster
    holds (``received``); they are in neither ``sent`` nor ``lost``. A topic with unaudited traffic only
    (no audited producer: ``sent`` 0) has no R_l or R_d: ``n/a (unaudited only)``. ``unaccounted``
    counts messages whose stamp names a producer id that sent no snapshot for the topic and window (a
    crashed producer whose snapshots were lost, a client that copies headers, a forged stamp); they are
    in neither ``sent``, ``lost`` nor ``duplicated`` (0 in results written before the field existed).
    """
    rows = []
    for (topic, tier), g in results.groupby(["topic", "tier"]):
        sent, unique, dup = int(g["sent"].sum()), int(g["unique"].sum()), int(g["duplicated"].sum())
        unaudited, received = _total(g, "unaudited"), _total(g, "received")
        na = "n/a (unaudited only)" if not sent and unaudited else None
        rows.append(
            [
                topic,
                tier,
                str(len(g)),
                f"{sent:,}",
                f"{unique:,}",
                f"{max(0, sent - unique):,}",
                f"{dup:,}",
                na or _pct(max(0, sent - unique) / sent if sent else None),
                na or _pct(dup / sent if sent else None),
                na or _pct(g["completeness"].min()),
                _unaudited_cell(unaudited, received),
                f"{_total(g, 'unaccounted'):,}",
            ]
        )
    header = [
        "topic",
        "tier",
        "windows",
        "sent",
        "unique",
        "lost",
        "duplicated",
        "R_l",
        "R_d",
        "worst window",
        "unaudited (share)",
        "unaccounted",
    ]
    return html_table(header, rows)


MAX_UNAUDITED_ROWS = 100
"""At most this many windows in the unaudited-traffic table (the newest)."""


def unaudited_table(results: pd.DataFrame) -> str:
    """Return the final windows with unaudited or unaccounted messages (per topic, tier and window), HTML.

    Per window: messages the cluster holds, unaudited ones and their share, unaccounted ones (a stamp
    naming a producer that never reported for the window) with their producer ids, audited producers
    and what they sent; a paragraph when no window has either.
    """

    def count(col: str) -> pd.Series:
        if col not in results.columns:
            return pd.Series(0, index=results.index)
        return pd.to_numeric(results[col], errors="coerce").fillna(0)

    if "unaudited" not in results.columns and "unaccounted" not in results.columns:
        return '<p class="none">No unaudited traffic in this period.</p>'
    with_unaudited = results[(count("unaudited") > 0) | (count("unaccounted") > 0)]
    if with_unaudited.empty:
        return '<p class="none">No unaudited traffic in this period.</p>'
    newest = with_unaudited.sort_values(["window_start_ms", "topic", "tier"]).tail(MAX_UNAUDITED_ROWS)
    rows = []
    for r in newest.to_dict("records"):
        received, unaudited = int(r.get("received") or 0), _int(r.get("unaudited"))
        unaccounted, ids = _int(r.get("unaccounted")), _int(r.get("unaudited_producers"))
        producers = r.get("producers")
        rows.append(
            [
                r["topic"],
                r["tier"],
                utc_cell(r["window_start_ms"]),
                f"{received:,}",
                f"{unaudited:,}",
                _pct(unaudited / received if received else None),
                f"{unaccounted:,} ({ids} producer id{'' if ids == 1 else 's'})" if unaccounted else "0",
                "-" if producers is None or pd.isna(producers) else str(int(producers)),
                f"{int(r['sent']):,}",
            ]
        )
    note = (
        '<p class="meta">Messages without an audit stamp (producers that do not use AuditedProducer). '
        "Their loss cannot be measured and they are never counted as lost; share = unaudited / received. "
        "Unaccounted: messages whose stamp names a producer id that never reported for the topic and "
        "window (a producer whose snapshots were lost, a client that copies headers, a forged stamp); "
        "never counted as sent, lost or duplicated. "
        f"The newest {MAX_UNAUDITED_ROWS} windows at most.</p>"
    )
    header = [
        "topic",
        "tier",
        "window (UTC)",
        "received",
        "unaudited",
        "share",
        "unaccounted",
        "audited producers",
        "sent",
    ]
    return note + html_table(header, rows)


def suggestions_table(results: pd.DataFrame) -> str:
    """Return the newest configuration suggestion per (topic, tier) as an HTML table, or a paragraph."""
    if "suggestion" not in results.columns or not results["suggestion"].notna().any():
        return '<p class="none">No configuration suggestions in this period.</p>'
    with_text = results[results["suggestion"].notna() & (results["suggestion"] != "")]
    newest = with_text.sort_values("window_start_ms").groupby(["topic", "tier"]).tail(1)
    rows = [
        [r["topic"], r["tier"], utc_cell(r["window_start_ms"]), str(r["suggestion"])]
        for r in newest.to_dict("records")
    ]
    return html_table(["topic", "tier", "window (UTC)", "suggestion"], rows)


ALERT_COLUMNS = (
    ("starts_at_ms", "started (UTC)"),
    ("status", "status"),
    ("alertname", "alert"),
    ("severity", "severity"),
    ("topic", "topic"),
    ("tier", "tier"),
    ("window_start_ms", "window (UTC)"),
    ("summary", "summary"),
    ("suggestion", "suggestion"),
)


def alerts_table(alerts: pd.DataFrame) -> str:
    """Return the alert events as an HTML table, or a "no alerts" paragraph."""
    if alerts.empty:
        return '<p class="none">No alerts in this period.</p>'
    cols = [(c, h) for c, h in ALERT_COLUMNS if c in alerts.columns] or [(c, c) for c in alerts.columns]
    rows = []
    for record in alerts.to_dict("records"):
        cells = []
        for col, _ in cols:
            value = record.get(col)
            if col.endswith("_ms"):
                cells.append(utc_cell(value))
            else:
                missing = value is None or (isinstance(value, float) and math.isnan(value))
                cells.append("-" if missing else str(value))
        rows.append(cells)
    return html_table([h for _, h in cols], rows)


def model_version_table(versions: pd.DataFrame) -> str:
    """Return the predictor model's accuracy per version as an HTML table.

    Args:
        versions: :func:`dashboards.report_data.version_summary` (one row per model version).
    """
    rows = [
        [
            str(r["version"]),
            str(r["windows"]),
            utc_cell(r["first_ms"]),
            utc_cell(r["last_ms"]),
            _pct(r["mae"]),
            _pct(r["coverage"]),
            _pct(r["calibrated"]),
        ]
        for r in versions.to_dict("records")
    ]
    return html_table(
        ["model version", "windows", "from (UTC)", "to (UTC)", "MAE(P_l)", "90% coverage", "calibrated"],
        rows,
    )


def model_topic_table(topics: pd.DataFrame) -> str:
    """Return mean measured R_l against predicted P_l, MAE and coverage per (topic, tier) as an HTML table.

    Args:
        topics: :func:`dashboards.report_data.topic_accuracy` (one row per topic and tier).
    """
    rows = [
        [
            r["topic"],
            r["tier"],
            str(r["windows"]),
            _pct(r["r_l"]),
            _pct(r["p_l"]),
            _pct(r["mae"]),
            _pct(r["coverage"]),
            r["versions"],
        ]
        for r in topics.to_dict("records")
    ]
    return html_table(
        ["topic", "tier", "windows", "mean R_l", "mean P_l", "MAE(P_l)", "90% coverage", "model versions"],
        rows,
    )


def tier_table(rows: pd.DataFrame, tiers: list[str]) -> str:
    """Return one topic's tiers, in the order of ``tiers``, as an HTML table.

    Per tier over ``rows`` (one topic's final window results): completeness against the producers (all
    windows' unique / sent, and the worst window), against the tier before it (unique / the previous
    tier's unique), the duplicates the tier added, and its lag after the window's end (median and
    largest, s). Results written before the tier fields show ``-`` for those columns.

    Args:
        rows: The final window results of one topic, every tier.
        tiers: The tiers to show, in flow order.
    """
    table_rows = []
    for tier in tiers:
        g = rows[rows["tier"] == tier]
        sent, unique = int(g["sent"].sum()), int(g["unique"].sum())
        prev = _total(g, "previous_unique")
        has_prev = "previous_unique" in g.columns and g["previous_unique"].notna().any()
        lag = pd.to_numeric(g["tier_lag_ms"], errors="coerce").dropna() if "tier_lag_ms" in g else None
        previous = g["previous_tier"].dropna() if "previous_tier" in g.columns else pd.Series(dtype=str)
        table_rows.append(
            [
                tier,
                previous.iloc[-1] if len(previous) else "-",
                str(len(g)),
                _pct(min(1.0, unique / sent) if sent else None),
                _pct(g["completeness"].min()),
                _pct(min(1.0, unique / prev) if has_prev and prev else None),
                f"{_total(g, 'duplicates_added'):,}" if "duplicates_added" in g.columns else "-",
                f"{lag.median() / 1000:.1f}" if lag is not None and len(lag) else "-",
                f"{lag.max() / 1000:.1f}" if lag is not None and len(lag) else "-",
            ]
        )
    header = [
        "tier",
        "previous tier",
        "windows",
        "completeness",
        "worst window",
        "vs previous tier",
        "duplicates added",
        "lag median (s)",
        "lag max (s)",
    ]
    return html_table(header, table_rows)
