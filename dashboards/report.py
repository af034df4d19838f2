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
the alerts topic, when the alerts file has them); the SLOs (:mod:`dashboards.report_slos`: budget
left, burn rates, the windows that spent the budget, freshness per tier, as ``kafka-audit slo status``
computes them). Plots are matplotlib PNGs embedded as base64 data
URIs, so the file has no external references.

This module assembles the document (its sections, the page template, the file); the plots are
:mod:`dashboards.report_figures`, the tables :mod:`dashboards.report_tables`, the data
:mod:`dashboards.report_data`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

import pandas as pd

from dashboards.report_data import (
    load_alerts,
    load_results,
    predicted_windows,
    rolling_accuracy,
    topic_accuracy,
    version_summary,
)
from dashboards.report_figures import (
    accuracy_plot,
    gamma_plot,
    heatmap,
    predicted_vs_actual_plot,
    rate_plots,
    tier_plot,
)
from dashboards.report_slos import slo_section
from dashboards.report_tables import (
    alerts_table,
    model_topic_table,
    model_version_table,
    suggestions_table,
    summary_table,
    tier_table,
    unaudited_table,
    utc_cell,
)

SloReport = Callable[[Path, int], Mapping[str, Any]]
"""(results directory, now in ms) -> the SLO section's data (:func:`alerts.slo_evaluation.report_data`)."""


def model_section(results: pd.DataFrame) -> str:
    """Return the predictor-model section: per-version table and plot, predicted vs actual per topic.

    Windows without a prediction are left out; predictions written before results carried
    ``model_version`` count under ``unknown``.
    """
    scored = predicted_windows(results)
    if scored.empty:
        return '<p class="none">No predictions in these results (predictor not enabled).</p>'
    versions = version_summary(scored)
    note = (
        '<p class="meta">MAE(P_l) = mean |P_l - R_l| over final windows with a prediction; 90% coverage = '
        "share of them whose R_l lay inside the predicted 90% interval; calibrated = share judged while "
        "the model was calibrated for this deployment (drift alerts fire only then). Version "
        "<code>unknown</code>: results written before they carried the model version.</p>"
    )
    return "\n".join(
        [
            note,
            model_version_table(versions),
            accuracy_plot(rolling_accuracy(scored), versions),
            "<h3>Predicted vs actual R_l per topic</h3>",
            model_topic_table(topic_accuracy(scored)),
            predicted_vs_actual_plot(scored),
        ]
    )


def _tier_order(results: pd.DataFrame) -> list[str]:
    """Tiers in flow order: by ``tier_rank`` (results written before it: by name after the ranked)."""
    ranks = (
        results.groupby("tier")["tier_rank"].min()
        if "tier_rank" in results.columns
        else pd.Series(dtype=float)
    )
    return sorted(results["tier"].unique(), key=lambda t: (float(ranks.get(t, math.inf)), str(t)))


def tier_section(results: pd.DataFrame) -> str:
    """Return the per-tier completeness section: per topic, every tier in flow order, and a plot.

    The LinkedIn audit UI's view (``docs/DESIGN.md``, "Tiers"): per tier of a topic (the cluster the
    producers write to, MirrorMaker 2 replicas, application consumer groups) over the report's final
    windows, its table (:func:`dashboards.report_tables.tier_table`) and, with more than one tier, a plot
    of completeness per tier over time.
    """
    out = []
    for topic, rows in results.groupby("topic"):
        tiers = _tier_order(rows)
        out.append(f"<h3>{html.escape(str(topic))}</h3>" + tier_table(rows, tiers))
        if len(tiers) > 1:
            out.append(tier_plot(str(topic), rows, tiers))
    note = (
        '<p class="meta">Each tier against the producers and against the tier before it (where a hop '
        "loses, duplicates or lags): producer -> cluster -> MirrorMaker 2 replica -> application "
        "consumers. Lag: how long after a window's end the tier reached its final counts.</p>"
    )
    return note + "\n".join(out)


def _duration(td: timedelta) -> str:
    seconds = int(td.total_seconds())
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def render(
    results: pd.DataFrame,
    alerts: pd.DataFrame,
    since: timedelta | None,
    now: datetime,
    slo: Mapping[str, Any] | None = None,
) -> str:
    """Return the whole report as one HTML document (plots embedded).

    Args:
        results: Final window results (:func:`dashboards.report_data.load_results`).
        alerts: Alert events (:func:`dashboards.report_data.load_alerts`), may be empty.
        since: The look-back shown in the title (None: all results).
        now: The report's reference time (UTC).
        slo: The SLO section's data (:func:`alerts.slo_evaluation.report_data`, over each SLO's whole
            compliance period, not ``since``); None: the section says the SLOs were not evaluated.
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
    first = utc_cell(results["window_start_ms"].min()) if not results.empty else "-"
    last = utc_cell(results["window_end_ms"].max()) if not results.empty else "-"
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
        slos=slo_section(slo),
        alerts=alerts_table(alerts),
    )


def write_report(
    results_dir: Path,
    out: Path,
    since: timedelta | None,
    alerts_path: Path | None = None,
    now: datetime | None = None,
    slo: SloReport | None = None,
) -> tuple[int, int]:
    """Build the report from ``results_dir`` (and ``alerts_path``) and write it to ``out``.

    ``slo``, given the results directory and ``now`` in ms, returns the SLO section's data (the
    application passes :func:`alerts.slo_evaluation.report_data` over the directory's results).

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
    slo_data = slo(results_dir, int(now.timestamp() * 1000)) if slo is not None else None
    out.write_text(render(results, alerts, since, now, slo_data))
    return len(results), len(alerts)
