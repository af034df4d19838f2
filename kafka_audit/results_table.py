"""The live table of ``kafka-audit up``: newest window results, measured next to predicted.

One row per (topic, window, tier): messages sent, the measured loss and duplicate rates R_l and R_d, the
predicted P_l (with its 90% interval) and P_d, gamma actual / predicted against its target, and the
suggested configuration change (:func:`results_table`). The tier view (``up --tiers``) is
:mod:`kafka_audit.tier_view`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.table import Table

from audit_record import window_result


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def _interval(p: float | None, lo: float | None, hi: float | None) -> str:
    """P_l with its 90% interval: ``1.23% [0.50-2.00]`` (percent)."""
    if p is None:
        return "-"
    if lo is None or hi is None:
        return _pct(p)
    return f"{100 * p:.2f}% [{100 * lo:.2f}-{100 * hi:.2f}]"


def _calibrating(r: dict[str, Any]) -> bool:
    """Return True if the window's P_l came from a model still calibrating for this deployment."""
    return r.get("model_calibrated") is False and r.get("p_loss") is not None


def serving_model(rows: Iterable[dict[str, Any]]) -> str | None:
    """Return ``model <version>`` of the newest final window with a model version (None if none).

    ``calibrating`` is added while that model is not yet calibrated for this deployment (no drift alert
    fires then).
    """
    finals = [r for r in rows if r.get("state") == "final" and r.get("model_version")]
    if not finals:
        return None
    newest = max(finals, key=lambda r: (r["window_start_ms"], r.get("result_at_ms") or 0))
    return f"model {newest['model_version']}" + (" calibrating" if _calibrating(newest) else "")


def _gamma(r: dict[str, Any], show_target: bool) -> str:
    """Return gamma actual / predicted (Eq. 2), red when actual is below the target."""
    actual, predicted, target = r.get("gamma_actual"), r.get("gamma_predicted"), r.get("gamma_target")
    if actual is None:
        return "-"
    text = f"{actual:.2f}/" + ("-" if predicted is None else f"{predicted:.2f}")
    if show_target and target is not None:
        text += f" <{target:.2f}" if actual < target else f" ≥{target:.2f}"
    if target is None:
        return text
    return f"[red]{text}[/]" if actual < target else f"[green]{text}[/]"


def short_suggestion(row: dict[str, Any]) -> str:
    """Return a window's suggested changes only, e.g. ``batch.num.messages 1→8`` (the alert has the numbers).

    Read from the structured ``suggested_*`` fields (:func:`audit_record.window_result.suggested_changes`)
    next to the values in effect; ``""`` when the window has no suggestion.
    """
    now = window_result.current_properties(row)
    return ", ".join(
        f"{prop} {_value(now[prop])}→{_value(new)}"
        for prop, new in window_result.suggested_changes(row).items()
    )


def _value(x: Any) -> str:
    return "?" if x is None else f"{x:g}" if isinstance(x, float) else str(x)


def unaudited_cell(row: dict[str, Any]) -> str:
    """Return a window's unaudited messages and their share of what the cluster holds: ``8,000 (100%)``.

    Unaudited messages carry no audit stamp (their producers do not use ``AuditedProducer``); they are
    counted apart and never as lost. ``-`` when there are none.
    """
    unaudited, received = row.get("unaudited") or 0, row.get("received") or 0
    if not unaudited:
        return "-"
    share = f"{100 * unaudited / received:.0f}%" if received else "?"
    return f"[yellow]{unaudited:,} ({share})[/]"


def unaccounted_cell(row: dict[str, Any]) -> str:
    """Return a window's unaccounted messages and their distinct stamps: ``500 (1 stamp)``; ``-`` if none.

    Unaccounted messages carry a stamp naming a producer id that sent no snapshot for the topic and
    window (a crashed producer whose snapshots were lost, a client that copies headers, a garbled or
    forged stamp); counted apart, never as sent, lost or duplicated.
    """
    unaccounted = row.get("unaccounted") or 0
    if not unaccounted:
        return "-"
    distinct = row.get("unaccounted_unique")
    stamps = "" if distinct is None else f" ({distinct:,} stamp{'' if distinct == 1 else 's'})"
    return f"[red]{unaccounted:,}{stamps}[/]"


def _unaudited_only(row: dict[str, Any]) -> bool:
    """Return True for a window with unaudited or unaccounted messages and no audited producer: no R_l."""
    return not row.get("sent") and bool(row.get("unaudited") or row.get("unaccounted"))


def results_table(
    rows: dict[tuple[str, int, str], dict[str, Any]],
    progress: dict[str, Any],
    limit: int = 20,
    final_only: bool = False,
) -> Table:
    """Build the live / closing table: newest window results first, measured next to predicted.

    Per window: messages sent, the measured R_l and R_d, the predicted P_l (with its 90% interval) and
    P_d, gamma actual / predicted (red below the target) and the suggested configuration change; the
    prediction columns fill in when a window is final. Fits 140 columns; the tier column appears only
    when more than one cluster tier is shown (else the title names it), likewise the gamma target. The
    title names the model version serving the newest final window (:func:`serving_model`); a P_l made
    by a model still calibrating for this deployment ends in ``cal.`` (dimmed): no drift alert judges it.
    The ``unaudited`` column (messages without an audit stamp and their share of the traffic,
    :func:`unaudited_cell`) appears only when a shown window has some; a window with unaudited messages
    only (no audited producer) shows ``n/a`` for R_l and R_d, explained in the caption. Beside it, the
    ``unaccounted`` column (messages whose stamp names a producer that never reported for the window,
    :func:`unaccounted_cell`) appears only when a shown window has some.
    """
    from datetime import UTC, datetime

    chosen = [r for r in rows.values() if not final_only or r["state"] == "final"]
    chosen = sorted(chosen, key=lambda r: (r["window_start_ms"], r["topic"]), reverse=not final_only)[:limit]
    tiers = sorted({r["tier"] for r in chosen})
    unaudited = any(r.get("unaudited") for r in chosen)
    unaccounted = any(r.get("unaccounted") for r in chosen)
    targets = sorted({r["gamma_target"] for r in chosen if r.get("gamma_target") is not None})
    notes = []
    if len(tiers) == 1:
        notes.append(tiers[0])
    lag = progress.get("lag_s")
    if lag is not None:
        notes.append(f"audit lag {lag:.1f} s")
    if len(targets) == 1:
        notes.append(f"gamma actual/predicted, target {targets[0]:.2f}")
    model = serving_model(rows.values())
    if model is not None:
        notes.append(model)
    captions = []
    if unaudited:
        captions.append(
            "unaudited: messages without an audit stamp (share of what the cluster holds), never counted "
            "as lost; n/a: no audited producer in the window, so no loss rate"
        )
    if unaccounted:
        captions.append(
            "unaccounted: messages whose stamp names a producer that never reported for the window "
            "(lost snapshots, copied headers, a forged stamp), never counted as sent, lost or duplicated"
        )
    caption = "; ".join(captions) or None
    table = Table(
        title="kafka-audit: window results" + (f" ({', '.join(notes)})" if notes else ""), caption=caption
    )
    columns = ["topic", *(["tier"] if len(tiers) > 1 else []), "window (UTC)", "sent"]
    columns += [*(["unaudited"] if unaudited else []), *(["unaccounted"] if unaccounted else []), "R_l"]
    columns += ["P_l [90%]", "R_d", "P_d", "gamma", "suggestion", "state"]
    for col in columns:
        if col == "suggestion":
            table.add_column(col, overflow="fold", max_width=30)
        else:
            table.add_column(
                col,
                justify="left" if col in ("topic", "tier", "state") else "right",
                no_wrap=col == "P_l [90%]",
            )
    for r in chosen:
        cells = [r["topic"]]
        if len(tiers) > 1:
            cells.append(r["tier"].removeprefix("cluster:"))
        na = _unaudited_only(r)
        cells += [
            datetime.fromtimestamp(r["window_start_ms"] / 1000, UTC).strftime("%H:%M:%S"),
            f"{r['sent']:,}",
            *([unaudited_cell(r)] if unaudited else []),
            *([unaccounted_cell(r)] if unaccounted else []),
            "n/a" if na else _pct(r["loss_rate"]),
            _interval(r.get("p_loss"), r.get("p_loss_lo"), r.get("p_loss_hi"))
            if not _calibrating(r)
            else f"[dim]{_interval(r.get('p_loss'), r.get('p_loss_lo'), r.get('p_loss_hi'))} cal.[/]",
            "n/a" if na else _pct(r["duplicate_rate"]),
            _pct(r.get("p_dup")),
            _gamma(r, show_target=len(targets) > 1),
            short_suggestion(r),
            "[green]final[/]" if r["state"] == "final" else "[yellow]provisional[/]",
        ]
        table.add_row(*cells)
    return table
