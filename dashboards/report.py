"""``kafka-audit report``: the completeness dashboard's views in one static HTML file (no Grafana needed).

Sections: a summary table per topic and tier (with the unaudited messages: no audit stamp, never
counted as loss, and their share of the traffic); the windows with unaudited traffic; a completeness
heatmap (topic x window); completeness per tier (per topic, every tier in flow order against
the producers and the tier before it, with its lag: the LinkedIn audit UI's view); per topic and
tier the measured R_l and R_d against the predicted P_l and P_d with their 90% interval (Wu et al.
2020, Eq. 1 and 3; older results without predictions show the measured rates only); the KPI gamma
against its target (Eq. 2); the predictor model on this deployment: live MAE(P_l) and 90% interval
coverage per model version over time (rolling over its last 30 final windows, as the job's calibration
monitor), and predicted against actual R_l per topic; the alerts table (with the model decisions of
the alerts topic, when the alerts file has them). Plots are matplotlib PNGs embedded as base64 data
URIs, so the file has no external references.
"""

from __future__ import annotations

import base64
import html
import io
import math
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

import pandas as pd

from dashboards.report_data import (
    ROLLING_WINDOWS,
    load_alerts,
    load_results,
    predicted_windows,
    rolling_accuracy,
    topic_accuracy,
    version_summary,
)

MAX_SERIES = 12
"""At most this many (topic, tier) pairs get their own R_l / R_d plot (the most lossy first)."""
CALIBRATION_MAX_MAE = 0.05
"""The job's default ``calibration_max_mae`` (fraction): drawn as the line a calibrated model stays under."""
COVERAGE_BOUNDS = (0.80, 0.97)
"""90% interval coverage a challenger needs on held-back windows to be promoted (shaded)."""


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(fig: Any, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{_png(fig)}">'


def _times(ms: pd.Series) -> pd.Series:
    return pd.to_datetime(ms, unit="ms", utc=True)


def _has(frame: pd.DataFrame, *cols: str) -> bool:
    return all(c in frame.columns and frame[c].notna().any() for c in cols)


def _label(topic: str, tier: str) -> str:
    return f"{topic} ({tier})"


def heatmap(results: pd.DataFrame) -> str:
    """Return an ``<img>`` of completeness (fraction, colour) per (topic, tier) row and window column."""
    from matplotlib.figure import Figure

    grid = results.pivot_table(
        index=["topic", "tier"], columns="window_start_ms", values="completeness", aggfunc="min"
    )
    rows = [_label(t, tier) for t, tier in grid.index]
    values = grid.to_numpy(dtype=float)
    lowest = float(pd.Series(values.ravel()).min()) if values.size else 1.0
    vmin = min(0.99, math.floor((lowest if not math.isnan(lowest) else 1.0) * 100) / 100)
    fig = Figure(figsize=(12, 1.2 + 0.45 * len(rows)))
    ax = fig.subplots()
    image = ax.imshow(values, aspect="auto", cmap="RdYlGn", vmin=vmin, vmax=1.0, interpolation="nearest")
    ax.set_yticks(range(len(rows)), rows)
    starts = list(grid.columns)
    step = max(1, len(starts) // 12)
    ax.set_xticks(
        range(0, len(starts), step),
        [datetime.fromtimestamp(s / 1000, UTC).strftime("%H:%M:%S") for s in starts[::step]],
        rotation=45,
        ha="right",
    )
    ax.set_xlabel("window start (UTC)")
    ax.set_title("Completeness per window (unique received / sent)")
    bar = fig.colorbar(image, ax=ax, pad=0.01)
    bar.ax.yaxis.set_major_formatter(lambda v, _: f"{100 * v:.1f}%")
    return _img(fig, "completeness heatmap, topic x window")


def _rate_axis(ax: Any, when: pd.Series, rows: pd.DataFrame, actual: str, pred: str, symbols: str) -> bool:
    """Plot one measured rate and, if present, the prediction and its band; return True if predicted.

    ``symbols`` is "measured/predicted", e.g. "R_l/P_l".
    """
    measured, predicted_symbol = symbols.split("/")
    ax.plot(when, rows[actual], marker="o", ms=3, lw=1.5, color="tab:blue", label=f"{measured} actual")
    predicted = _has(rows, pred)
    if predicted:
        ax.plot(when, rows[pred], ls="--", lw=1.5, color="tab:orange", label=f"{predicted_symbol} predicted")
        if _has(rows, f"{pred}_lo", f"{pred}_hi"):
            ax.fill_between(
                when,
                rows[f"{pred}_lo"].astype(float),
                rows[f"{pred}_hi"].astype(float),
                color="tab:orange",
                alpha=0.2,
                label="90% interval",
            )
    ax.yaxis.set_major_formatter(lambda v, _: f"{100 * v:.2g}%")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    return predicted


def rate_plots(results: pd.DataFrame) -> list[str]:
    """Return one ``<img>`` per (topic, tier): R_l and R_d actual vs predicted, side by side."""
    from matplotlib.figure import Figure

    worst = results.groupby(["topic", "tier"])["loss_rate"].max().sort_values(ascending=False)
    images = []
    for topic, tier in list(worst.index)[:MAX_SERIES]:
        rows = results[(results["topic"] == topic) & (results["tier"] == tier)]
        when = _times(rows["window_start_ms"])
        fig = Figure(figsize=(12, 3.4), layout="constrained")
        ax_l, ax_d = fig.subplots(1, 2, sharex=True)
        with_l = _rate_axis(ax_l, when, rows, "loss_rate", "p_loss", "R_l/P_l")
        with_d = _rate_axis(ax_d, when, rows, "duplicate_rate", "p_dup", "R_d/P_d")
        note = "" if with_l or with_d else " (no predictions in these results: measured only)"
        fig.suptitle(f"{_label(topic, tier)}{note}", fontsize=11)
        ax_l.set_title("loss: R_l vs P_l", fontsize=10)
        ax_d.set_title("duplicates: R_d vs P_d", fontsize=10)
        for ax in (ax_l, ax_d):
            ax.tick_params(axis="x", labelrotation=30)
        images.append(_img(fig, f"R_l and R_d actual vs predicted, {topic} {tier}"))
    return images


def gamma_plot(results: pd.DataFrame) -> str | None:
    """Return an ``<img>`` of gamma actual, predicted and target per (topic, tier); None without gamma."""
    from matplotlib.figure import Figure

    if not _has(results, "gamma_actual") and not _has(results, "gamma_predicted"):
        return None
    fig = Figure(figsize=(12, 3.5))
    ax = fig.subplots()
    for number, ((topic, tier), rows) in enumerate(results.groupby(["topic", "tier"])):
        color = f"C{number % 10}"
        when = _times(rows["window_start_ms"])
        name = _label(topic, tier)
        if _has(rows, "gamma_actual"):
            ax.plot(
                when,
                rows["gamma_actual"].astype(float),
                color=color,
                marker="o",
                ms=3,
                label=f"{name} actual",
            )
        if _has(rows, "gamma_predicted"):
            ax.plot(
                when, rows["gamma_predicted"].astype(float), color=color, ls="--", label=f"{name} predicted"
            )
        if _has(rows, "gamma_target"):
            ax.plot(
                when, rows["gamma_target"].astype(float), color=color, ls=":", lw=2, label=f"{name} target"
            )
    ax.set_ylim(top=1.0)
    ax.set_ylabel("gamma (0-1)")
    ax.set_title("KPI gamma: actual, predicted, target")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.autofmt_xdate()
    return _img(fig, "gamma timeline")


def accuracy_plot(rolling: pd.DataFrame, versions: pd.DataFrame) -> str:
    """Return an ``<img>``: rolling live MAE(P_l) and 90% coverage per model version over time.

    Args:
        rolling: :func:`dashboards.report_data.rolling_accuracy`.
        versions: :func:`dashboards.report_data.version_summary` (order of service; a dotted line marks
            where each later version first served).
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 5.5), layout="constrained")
    ax_mae, ax_cov = fig.subplots(2, 1, sharex=True)
    for number, version in enumerate(versions["version"]):
        rows = rolling[rolling["version"] == version]
        when = _times(rows["window_end_ms"])
        color = f"C{number % 10}"
        ax_mae.plot(when, rows["mae"].astype(float), color=color, lw=1.5, label=version)
        if rows["coverage"].notna().any():
            ax_cov.plot(when, rows["coverage"].astype(float), color=color, lw=1.5, label=version)
    for version, first_ms in list(zip(versions["version"], versions["first_ms"], strict=True))[1:]:
        for ax in (ax_mae, ax_cov):
            ax.axvline(_times(pd.Series([first_ms]))[0], color="grey", ls=":", lw=1)
        ax_mae.annotate(
            f" {version}",
            (_times(pd.Series([first_ms]))[0], 1.0),
            xycoords=("data", "axes fraction"),
            va="top",
            fontsize=8,
            color="grey",
        )
    ax_mae.axhline(CALIBRATION_MAX_MAE, color="red", ls="--", lw=1, label="calibration threshold (default)")
    ax_cov.axhspan(*COVERAGE_BOUNDS, color="tab:green", alpha=0.1, label="80-97% (promotion bound)")
    ax_cov.axhline(0.9, color="tab:green", ls="--", lw=1, label="nominal 90%")
    ax_mae.set_title(f"Live MAE(P_l) per model version (rolling, last {ROLLING_WINDOWS} final windows)")
    ax_cov.set_title("90% interval coverage per model version (share of windows with R_l inside)")
    ax_cov.set_ylim(0, 1.02)
    for ax in (ax_mae, ax_cov):
        ax.yaxis.set_major_formatter(lambda v, _: f"{100 * v:.3g}%")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax_cov.tick_params(axis="x", labelrotation=30)
    return _img(fig, "live MAE and coverage per model version")


def predicted_vs_actual_plot(scored: pd.DataFrame) -> str:
    """Return an ``<img>``: predicted P_l against measured R_l of every scored window, per topic (y = x)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 6), layout="constrained")
    ax = fig.subplots()
    pairs = scored.groupby(["topic", "tier"])["abs_error"].mean().sort_values(ascending=False)
    for number, (topic, tier) in enumerate(list(pairs.index)[:MAX_SERIES]):
        rows = scored[(scored["topic"] == topic) & (scored["tier"] == tier)]
        ax.scatter(
            rows["p_loss"].astype(float),
            rows["loss_rate"].astype(float),
            s=14,
            alpha=0.6,
            color=f"C{number % 10}",
            label=_label(topic, tier),
        )
    top = max(float(scored["p_loss"].max()), float(scored["loss_rate"].max()), 0.01) * 1.05
    ax.plot([0, top], [0, top], color="grey", ls="--", lw=1, label="R_l = P_l")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("predicted P_l")
    ax.set_ylabel("measured R_l")
    ax.set_title("Predicted vs actual R_l per final window")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(lambda v, _: f"{100 * v:.3g}%")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return _img(fig, "predicted vs actual R_l per topic")


def model_section(results: pd.DataFrame) -> str:
    """Return the predictor-model section: per-version table and plot, predicted vs actual per topic.

    Windows without a prediction are left out; predictions written before results carried
    ``model_version`` count under ``unknown``.
    """
    scored = predicted_windows(results)
    if scored.empty:
        return '<p class="none">No predictions in these results (predictor not enabled).</p>'
    versions = version_summary(scored)
    version_rows = [
        [
            str(r["version"]),
            str(r["windows"]),
            _ms(r["first_ms"]),
            _ms(r["last_ms"]),
            _pct(r["mae"]),
            _pct(r["coverage"]),
            _pct(r["calibrated"]),
        ]
        for r in versions.to_dict("records")
    ]
    version_table = _table(
        ["model version", "windows", "from (UTC)", "to (UTC)", "MAE(P_l)", "90% coverage", "calibrated"],
        version_rows,
    )
    topics = topic_accuracy(scored)
    topic_rows = [
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
    topic_table = _table(
        ["topic", "tier", "windows", "mean R_l", "mean P_l", "MAE(P_l)", "90% coverage", "model versions"],
        topic_rows,
    )
    note = (
        '<p class="meta">MAE(P_l) = mean |P_l - R_l| over final windows with a prediction; 90% coverage = '
        "share of them whose R_l lay inside the predicted 90% interval; calibrated = share judged while "
        "the model was calibrated for this deployment (drift alerts fire only then). Version "
        "<code>unknown</code>: results written before they carried the model version.</p>"
    )
    return "\n".join(
        [
            note,
            version_table,
            accuracy_plot(rolling_accuracy(scored), versions),
            "<h3>Predicted vs actual R_l per topic</h3>",
            topic_table,
            predicted_vs_actual_plot(scored),
        ]
    )


def _duration(td: timedelta) -> str:
    seconds = int(td.total_seconds())
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.3f}%"


def _ms(ms: Any) -> str:
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "-"
    return datetime.fromtimestamp(int(ms) / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _total(g: pd.DataFrame, col: str) -> int:
    """Sum of ``col`` over ``g`` (0 when the column is missing: results written before it)."""
    return int(pd.to_numeric(g[col], errors="coerce").fillna(0).sum()) if col in g.columns else 0


def _unaudited_cell(unaudited: int, received: int) -> str:
    """``8,000 (100.000%)``: unaudited messages and their share of what the cluster holds; ``0`` if none."""
    if not unaudited:
        return "0"
    return f"{unaudited:,} ({_pct(unaudited / received if received else None)})"


def summary_table(results: pd.DataFrame) -> str:
    """Return the per-(topic, tier) totals over the report's windows as an HTML table.

    ``unaudited`` counts messages without an audit stamp with their share of the messages the cluster
    holds (``received``); they are in neither ``sent`` nor ``lost``. A topic with unaudited traffic only
    (no audited producer: ``sent`` 0) has no R_l or R_d: ``n/a (unaudited only)``.
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
    ]
    return _table(header, rows)


MAX_UNAUDITED_ROWS = 100
"""At most this many windows in the unaudited-traffic table (the newest)."""


def unaudited_table(results: pd.DataFrame) -> str:
    """Return the final windows with unaudited messages (per topic, tier and window) as an HTML table.

    Per window: messages the cluster holds, unaudited ones and their share, audited producers and what
    they sent; a paragraph when no window has unaudited traffic.
    """
    if "unaudited" not in results.columns:
        return '<p class="none">No unaudited traffic in this period.</p>'
    with_unaudited = results[pd.to_numeric(results["unaudited"], errors="coerce").fillna(0) > 0]
    if with_unaudited.empty:
        return '<p class="none">No unaudited traffic in this period.</p>'
    newest = with_unaudited.sort_values(["window_start_ms", "topic", "tier"]).tail(MAX_UNAUDITED_ROWS)
    rows = []
    for r in newest.to_dict("records"):
        received, unaudited = int(r.get("received") or 0), int(r["unaudited"])
        producers = r.get("producers")
        rows.append(
            [
                r["topic"],
                r["tier"],
                _ms(r["window_start_ms"]),
                f"{received:,}",
                f"{unaudited:,}",
                _pct(unaudited / received if received else None),
                "-" if producers is None or pd.isna(producers) else str(int(producers)),
                f"{int(r['sent']):,}",
            ]
        )
    note = (
        '<p class="meta">Messages without an audit stamp (producers that do not use AuditedProducer). '
        "Their loss cannot be measured and they are never counted as lost; share = unaudited / received. "
        f"The newest {MAX_UNAUDITED_ROWS} windows at most.</p>"
    )
    header = ["topic", "tier", "window (UTC)", "received", "unaudited", "share", "audited producers", "sent"]
    return note + _table(header, rows)


def suggestions_table(results: pd.DataFrame) -> str:
    """Return the newest configuration suggestion per (topic, tier) as an HTML table, or a paragraph."""
    if "suggestion" not in results.columns or not results["suggestion"].notna().any():
        return '<p class="none">No configuration suggestions in this period.</p>'
    with_text = results[results["suggestion"].notna() & (results["suggestion"] != "")]
    newest = with_text.sort_values("window_start_ms").groupby(["topic", "tier"]).tail(1)
    rows = [
        [r["topic"], r["tier"], _ms(r["window_start_ms"]), str(r["suggestion"])]
        for r in newest.to_dict("records")
    ]
    return _table(["topic", "tier", "window (UTC)", "suggestion"], rows)


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
                cells.append(_ms(value))
            else:
                missing = value is None or (isinstance(value, float) and math.isnan(value))
                cells.append("-" if missing else str(value))
        rows.append(cells)
    return _table([h for _, h in cols], rows)


def _tier_order(results: pd.DataFrame) -> list[str]:
    """Tiers in flow order: by ``tier_rank`` (results written before it: by name after the ranked)."""
    ranks = (
        results.groupby("tier")["tier_rank"].min()
        if "tier_rank" in results.columns
        else pd.Series(dtype=float)
    )
    return sorted(results["tier"].unique(), key=lambda t: (float(ranks.get(t, math.inf)), str(t)))


def tier_plot(topic: str, rows: pd.DataFrame, tiers: list[str]) -> str:
    """Return an ``<img>`` of one topic's completeness per final window at each tier (fraction)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 3.2))
    ax = fig.subplots()
    for tier in tiers:
        g = rows[rows["tier"] == tier].sort_values("window_start_ms")
        ax.plot(_times(g["window_start_ms"]), g["completeness"].astype(float), marker=".", label=tier)
    ax.set_ylabel("completeness")
    ax.yaxis.set_major_formatter(lambda v, _: f"{100 * v:.1f}%")
    ax.set_xlabel("window start (UTC)")
    ax.set_title(f"{topic}: completeness per tier (unique / sent by the producers)")
    ax.legend(loc="lower left", fontsize=8)
    fig.autofmt_xdate()
    return _img(fig, f"{topic}: completeness per tier over time")


def tier_section(results: pd.DataFrame) -> str:
    """Return the per-tier completeness section: per topic, every tier in flow order, and a plot.

    The LinkedIn audit UI's view (``docs/DESIGN.md``, "Tiers"): per tier of a topic (the cluster the
    producers write to, MirrorMaker 2 replicas, application consumer groups) over the report's final
    windows: completeness against the producers (all windows' unique / sent, and the worst window),
    against the tier before it (unique / the previous tier's unique), the duplicates the tier added, and
    its lag after the window's end (median and largest, s). Results written before the tier fields show
    ``-`` for those columns.
    """
    out = []
    for topic, rows in results.groupby("topic"):
        tiers = _tier_order(rows)
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
        out.append(f"<h3>{html.escape(str(topic))}</h3>" + _table(header, table_rows))
        if len(tiers) > 1:
            out.append(tier_plot(str(topic), rows, tiers))
    note = (
        '<p class="meta">Each tier against the producers and against the tier before it (where a hop '
        "loses, duplicates or lags): producer -> cluster -> MirrorMaker 2 replica -> application "
        "consumers. Lag: how long after a window's end the tier reached its final counts.</p>"
    )
    return note + "\n".join(out)


def render(results: pd.DataFrame, alerts: pd.DataFrame, since: timedelta | None, now: datetime) -> str:
    """Return the whole report as one HTML document (plots embedded).

    Args:
        results: Final window results (:func:`dashboards.report_data.load_results`).
        alerts: Alert events (:func:`dashboards.report_data.load_alerts`), may be empty.
        since: The look-back shown in the title (None: all results).
        now: The report's reference time (UTC).
    """
    template = Template(resources.files("dashboards").joinpath("templates/report.html").read_text())
    period = f"last {_duration(since)}" if since is not None else "all results"
    if results.empty:
        body = '<p class="none">No final window results in this period.</p>'
        heat = rates = gamma = suggestions = model = unaudited = tiers = ""
    else:
        body = summary_table(results)
        unaudited = unaudited_table(results)
        heat = heatmap(results)
        tiers = tier_section(results)
        rates = "\n".join(rate_plots(results))
        gamma = (
            gamma_plot(results) or '<p class="none">No gamma in these results (predictor not enabled).</p>'
        )
        suggestions = suggestions_table(results)
        model = model_section(results)
    first = _ms(results["window_start_ms"].min()) if not results.empty else "-"
    last = _ms(results["window_end_ms"].max()) if not results.empty else "-"
    return template.substitute(
        title=html.escape(f"kafka-audit report: {period}"),
        generated=html.escape(now.strftime("%Y-%m-%d %H:%M:%S UTC")),
        windows=html.escape(f"{len(results)} final window result(s), {first} to {last} UTC"),
        summary=body,
        unaudited=unaudited,
        heatmap=heat,
        tiers=tiers,
        rates=rates,
        gamma=gamma,
        model=model,
        suggestions=suggestions,
        alerts=alerts_table(alerts),
    )


def write_report(
    results_dir: Path,
    out: Path,
    since: timedelta | None,
    alerts_path: Path | None = None,
    now: datetime | None = None,
) -> tuple[int, int]:
    """Build the report from ``results_dir`` (and ``alerts_path``) and write it to ``out``.

    Returns:
        (number of final window results, number of alert episodes) shown.

    Raises:
        ConfigError: bad ``results_dir`` or alerts file (see :mod:`dashboards.report_data`).
    """
    now = now or datetime.now(UTC)
    results = load_results(results_dir, since, now)
    alerts = load_alerts(alerts_path, since, now)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(results, alerts, since, now))
    return len(results), len(alerts)
