"""The static report's figures: matplotlib plots encoded as PNG ``<img>`` tags (base64 data URIs).

The completeness heatmap (topic x window), the measured R_l and R_d against the predicted P_l and P_d
with their 90% interval (Wu et al. 2020, Eq. 1 and 3), the KPI gamma against its target (Eq. 2), the
predictor model's live MAE(P_l) and coverage per version, predicted against actual R_l per topic, and
one topic's completeness per tier. Each function returns HTML with no external references; the HTML
assembly is :mod:`dashboards.report`, the tables :mod:`dashboards.report_tables`.
"""

from __future__ import annotations

import base64
import html
import io
import math
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from dashboards.report_data import ROLLING_WINDOWS

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


def img_tag(fig: Any, alt: str) -> str:
    """Return ``fig`` as an ``<img>`` whose source is its PNG (100 dpi) inline as a base64 data URI.

    Args:
        fig: A matplotlib ``Figure``.
        alt: The image's alternative text (HTML-escaped here).
    """
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
    return img_tag(fig, "completeness heatmap, topic x window")


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
        images.append(img_tag(fig, f"R_l and R_d actual vs predicted, {topic} {tier}"))
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
    return img_tag(fig, "gamma timeline")


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
    return img_tag(fig, "live MAE and coverage per model version")


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
    return img_tag(fig, "predicted vs actual R_l per topic")


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
    return img_tag(fig, f"{topic}: completeness per tier over time")
