"""``kafka-audit report``: the completeness dashboard's views in one static HTML file (no Grafana needed).

Sections: a summary table per topic and tier; a completeness heatmap (topic x window); per topic and
tier the measured R_l and R_d against the predicted P_l and P_d with their 90% interval (Wu et al.
2020, Eq. 1 and 3; older results without predictions show the measured rates only); the KPI gamma
against its target (Eq. 2); the alerts table. Plots are matplotlib PNGs embedded as base64 data URIs, so
the file has no external references.
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

from dashboards.report_data import load_alerts, load_results

MAX_SERIES = 12
"""At most this many (topic, tier) pairs get their own R_l / R_d plot (the most lossy first)."""


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


def summary_table(results: pd.DataFrame) -> str:
    """Return the per-(topic, tier) totals over the report's windows as an HTML table."""
    rows = []
    for (topic, tier), g in results.groupby(["topic", "tier"]):
        sent, unique, dup = int(g["sent"].sum()), int(g["unique"].sum()), int(g["duplicated"].sum())
        rows.append(
            [
                topic,
                tier,
                str(len(g)),
                f"{sent:,}",
                f"{unique:,}",
                f"{max(0, sent - unique):,}",
                f"{dup:,}",
                _pct(max(0, sent - unique) / sent if sent else None),
                _pct(dup / sent if sent else None),
                _pct(g["completeness"].min()),
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
    ]
    return _table(header, rows)


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
        heat = rates = gamma = suggestions = ""
    else:
        body = summary_table(results)
        heat = heatmap(results)
        rates = "\n".join(rate_plots(results))
        gamma = (
            gamma_plot(results) or '<p class="none">No gamma in these results (predictor not enabled).</p>'
        )
        suggestions = suggestions_table(results)
    first = _ms(results["window_start_ms"].min()) if not results.empty else "-"
    last = _ms(results["window_end_ms"].max()) if not results.empty else "-"
    return template.substitute(
        title=html.escape(f"kafka-audit report: {period}"),
        generated=html.escape(now.strftime("%Y-%m-%d %H:%M:%S UTC")),
        windows=html.escape(f"{len(results)} final window result(s), {first} to {last} UTC"),
        summary=body,
        heatmap=heat,
        rates=rates,
        gamma=gamma,
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
