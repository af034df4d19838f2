"""The soak report: HTML and Markdown with plots, from a soak's ``records/`` (``kafka-audit soak report``).

Built with the code of ``kafka-audit report`` (:mod:`dashboards.report_tables`,
:mod:`dashboards.report_figures`: its tables, plot encoding, summary per topic and tier, completeness
heatmap, alerts table; the whole standard report of the soak's window results, :mod:`dashboards.report`,
is written beside it as ``windows.html``), plus the soak's own sections: the acceptance
verdict, the chaos timeline, RSS and CPU over time per component, micro-batch durations (p50 / p99)
and the audit lag over time, alerts in healthy versus chaos periods, RSS growth per component, and the
windows that differ from the verifier. The Markdown file (``soak.md``) has the same numbers and refers
to the plots as PNG files beside it; the HTML (``soak.html``) embeds them.
"""

from __future__ import annotations

import html
import itertools
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from dashboards.report import render
from dashboards.report_data import load_alerts, load_results
from dashboards.report_figures import heatmap, img_tag
from dashboards.report_tables import html_table, summary_table
from soak.recorder import read_jsonl

MIB = 1024 * 1024


def _minute(ms: float, start_ms: int) -> float:
    return (ms - start_ms) / 60_000


def _figure(width: float = 10, height: float = 4) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def _shade_chaos(ax: Any, chaos: list[dict[str, Any]], start_ms: int) -> None:
    for e in chaos:
        if e.get("ended_ms"):
            ax.axvspan(
                _minute(e["started_ms"], start_ms),
                _minute(e["ended_ms"], start_ms),
                color="#f4a261",
                alpha=0.25,
                lw=0,
            )


def rss_plot(
    samples: list[dict[str, Any]], chaos: list[dict[str, Any]], start_ms: int, field: str = "rss_bytes"
) -> Any:
    """RSS (MiB) or CPU (% of a core, ``field="cpu_pct"``) per component over minutes; chaos shaded."""
    fig = _figure(10, 5)
    ax = fig.subplots()
    frame = pd.DataFrame(samples)
    for name, g in frame.groupby("component"):
        y = g[field] / MIB if field == "rss_bytes" else g[field]
        ax.plot(g["minute"], y, marker=".", lw=1, label=str(name))
    _shade_chaos(ax, chaos, start_ms)
    ax.set_xlabel("minute of the soak")
    ax.set_ylabel("RSS, MiB" if field == "rss_bytes" else "CPU, % of one core")
    ax.legend(fontsize=7, ncol=3, loc="upper left")
    ax.grid(alpha=0.3)
    return fig


def batch_plot(
    progress: list[dict[str, Any]], chaos: list[dict[str, Any]], start_ms: int, trigger_ms: int
) -> Any:
    """Micro-batch duration (s) per batch over minutes, the trigger interval as a line; chaos shaded."""
    fig = _figure()
    ax = fig.subplots()
    x = [_minute(r["at_ms"], start_ms) for r in progress]
    ax.scatter(x, [r["duration_ms"] / 1000 for r in progress], s=6)
    ax.axhline(trigger_ms / 1000, color="red", lw=1, label=f"trigger {trigger_ms / 1000:.0f} s")
    _shade_chaos(ax, chaos, start_ms)
    ax.set_xlabel("minute of the soak")
    ax.set_ylabel("micro-batch duration, s")
    ax.legend()
    ax.grid(alpha=0.3)
    return fig


def lag_plot(progress: list[dict[str, Any]], chaos: list[dict[str, Any]], start_ms: int) -> Any:
    """Audit lag (now - watermark at each micro-batch, s) over minutes; chaos shaded."""
    fig = _figure()
    ax = fig.subplots()
    rows = [r for r in progress if r.get("lag_s") is not None]
    ax.plot([_minute(r["at_ms"], start_ms) for r in rows], [r["lag_s"] for r in rows], lw=1)
    _shade_chaos(ax, chaos, start_ms)
    ax.set_xlabel("minute of the soak")
    ax.set_ylabel("audit lag (watermark), s")
    ax.grid(alpha=0.3)
    return fig


def timeline_plot(
    chaos: list[dict[str, Any]], alerts: list[dict[str, Any]], start_ms: int, end_min: float
) -> Any:
    """One row per chaos event (bar from start to end), alerts as markers (red: false, grey: chaos)."""
    fig = _figure(10, 0.6 + 0.35 * max(1, len(chaos)))
    ax = fig.subplots()
    for i, e in enumerate(chaos):
        s = _minute(e["started_ms"], start_ms)
        d = _minute(e.get("ended_ms") or e["started_ms"], start_ms) - s
        ax.barh(i, max(d, 0.1), left=s, color="#e76f51" if e.get("error") else "#2a9d8f")
    for a in alerts:
        ax.scatter(
            _minute(a["starts_at_ms"], start_ms), -1, marker="v", color="red" if a["false_alert"] else "grey"
        )
    ax.set_yticks([-1, *range(len(chaos))], ["alerts", *[e["label"] for e in chaos]], fontsize=8)
    ax.set_xlim(0, max(end_min, 1))
    ax.set_xlabel("minute of the soak")
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    return fig


def longest_gap(progress: list[dict[str, Any]], start_ms: int) -> tuple[float, float]:
    """Return the longest time between two micro-batch ends (s) and the minute it ended at.

    A micro-batch running when the driver is SIGKILLed never reports a duration; this gap shows it
    (with the restart) all the same.
    """
    ends = sorted([start_ms] + [r["at_ms"] + r["duration_ms"] for r in progress])
    best = max(itertools.pairwise(ends), key=lambda p: p[1] - p[0], default=(start_ms, start_ms))
    return (best[1] - best[0]) / 1000, _minute(best[1], start_ms)


def _save(fig: Any, out_dir: Path, name: str) -> tuple[str, str]:
    """Write ``name.png`` and return (HTML ``<img>``, Markdown image)."""
    path = out_dir / f"{name}.png"
    fig.savefig(path, format="png", dpi=90, bbox_inches="tight")
    return img_tag(fig, name), f"![{name}]({path.name})"


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _fmt_ms(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.0f}"


def _clock(ms: int | None) -> str:
    return "-" if not ms else datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S")


def sections(summary: dict[str, Any], records: Path, out_dir: Path) -> list[tuple[str, str, str]]:
    """Return the soak's own sections as (title, HTML, Markdown)."""
    start = int(summary["load_started_ms"])
    v = summary["verdict"]
    b = summary["batches"]
    s = summary["settings"]
    chaos = summary["chaos"]
    alerts = summary["alerts"]
    samples = read_jsonl(records / "samples.jsonl")
    progress = [r for r in read_jsonl(records / "progress.jsonl") if r["at_ms"] >= start]
    end_min = _minute(max([r["at_ms"] for r in samples], default=start), start)
    out = []

    growth_judged = [g for g in summary["growth"] if g["growth"] is not None]
    crit = [
        ["final windows equal to the verifier", f"{v['windows_exact']} / {v['windows_total']}", "100%"],
        ["false alerts (healthy periods)", str(v["false_alerts"]), "0"],
        ["alerts in chaos periods", str(v["chaos_alerts"]), "-"],
        [
            "largest RSS level growth (median of 5 minutes), minute 10 to end",
            "-" if v["max_rss_growth"] is None else f"{100 * v['max_rss_growth']:.1f}%",
            f"< {100 * v['rss_limit']:.0f}%",
        ],
        [
            "micro-batch p50 / p99 / max (all), ms",
            f"{_fmt_ms(b['p50_ms'])} / {_fmt_ms(b['p99_ms'])} / {_fmt_ms(b['max_ms'])}",
            "-",
        ],
        [
            "micro-batch p50 / p99 / max (steady: without each driver start's first), ms",
            f"{_fmt_ms(b['steady_p50_ms'])} / {_fmt_ms(b['steady_p99_ms'])} / {_fmt_ms(b['steady_max_ms'])}",
            "-" if b.get("healthy_count") or b.get("outside_count") else f"p99 < {s['trigger_ms']:,}",
        ],
        *(
            [
                [
                    f"micro-batch p50 / p99 / max in healthy periods ({b['healthy_count']} of {b['count']}), "
                    "ms",
                    f"{_fmt_ms(b['healthy_p50_ms'])} / {_fmt_ms(b['healthy_p99_ms'])} / "
                    f"{_fmt_ms(b['healthy_max_ms'])}",
                    f"p99 < {s['trigger_ms']:,}",
                ]
            ]
            if b.get("healthy_count")
            else []
        ),
        *(
            [
                [
                    f"micro-batch p50 / p99 / max outside chaos events ({b['outside_count']} of {b['count']};"
                    " none in a healthy period), ms",
                    f"{_fmt_ms(b['outside_p50_ms'])} / {_fmt_ms(b['outside_p99_ms'])} / "
                    f"{_fmt_ms(b['outside_max_ms'])}",
                    f"p99 < {s['trigger_ms']:,}",
                ]
            ]
            if not b.get("healthy_count") and b.get("outside_count")
            else []
        ),
        ["result", "PASSED" if v["passed"] else "FAILED: " + "; ".join(v["failures"]), ""],
    ]
    gap_s, gap_at = longest_gap(progress, start)
    crit.insert(
        -1,
        [
            "longest time without a finished micro-batch (a batch the driver's SIGKILL cut short is in "
            "no percentile), s",
            f"{gap_s:,.0f} (minute {gap_at:.1f})",
            "-",
        ],
    )
    header = ["criterion", "measured", "acceptance"]
    load = (
        f"{s['producers']} producers x {s['rate']:g} msg/s over {s['topics']} topics, {s['message_bytes']} B "
        f"messages, {s['duration_s'] / 60:.0f} min; window {s['window_ms'] / 1000:g} s, trigger "
        f"{s['trigger_ms'] / 1000:g} s, message.timeout.ms {s['message_timeout_ms']:,}; settle margin "
        f"{s['settle_ms'] / 1000:g} s. Produced: {sum(p.get('produced', 0) for p in summary['producers']):,} "
        "messages."
    )
    out.append(
        (
            "Verdict",
            f"<p>{html.escape(load)}</p>" + html_table(header, crit),
            load + "\n\n" + _md_table(header, crit),
        )
    )

    img_h, img_m = _save(timeline_plot(chaos, alerts, start, end_min), out_dir, "chaos-timeline")
    rows = [
        [
            e["label"],
            f"{_minute(e['started_ms'], start):.1f}",
            _clock(e["started_ms"]),
            f"{(e['ended_ms'] - e['started_ms']) / 1000:.0f}",
            f"{(e['started_ms'] - e['planned_ms']) / 1000:.0f}",
            e["error"] or e["detail"],
        ]
        for e in chaos
    ]
    header = ["event", "minute", "start (UTC)", "until back, s", "late, s", "detail"]
    out.append(("Chaos timeline", img_h + html_table(header, rows), img_m + "\n\n" + _md_table(header, rows)))

    rss_h, rss_m = _save(rss_plot(samples, chaos, start), out_dir, "rss")
    cpu_h, cpu_m = _save(rss_plot(samples, chaos, start, "cpu_pct"), out_dir, "cpu")
    rows = [
        [
            g["component"],
            "-" if g["from_minute"] is None else f"{g['from_minute']:.0f} -> {g['to_minute']:.0f}",
            "-" if g["rss_from"] is None else f"{g['rss_from'] / MIB:,.0f} -> {g['rss_to'] / MIB:,.0f}",
            "-" if g["growth"] is None else f"{100 * g['growth']:+.1f}%",
            "-" if g.get("raw_from") is None else f"{g['raw_from'] / MIB:,.0f} -> {g['raw_to'] / MIB:,.0f}",
            "-" if g.get("raw_growth") is None else f"{100 * g['raw_growth']:+.1f}%",
            g["note"],
        ]
        for g in summary["growth"]
    ]
    header = ["component", "minutes", "RSS level, MiB", "growth", "single samples, MiB", "growth", "note"]
    note = (
        f"{len(growth_judged)} component(s) judged. RSS level: the median of the samples in the 5 minutes "
        "around the first minute and in the last 5 minutes (judged); single samples: the two samples alone "
        "(shown, not judged). Orange: chaos events."
    )
    out.append(
        (
            "Memory and CPU per component",
            rss_h + cpu_h + f"<p>{note}</p>" + html_table(header, rows),
            rss_m + "\n\n" + cpu_m + "\n\n" + note + "\n\n" + _md_table(header, rows),
        )
    )

    bh, bm = _save(batch_plot(progress, chaos, start, s["trigger_ms"]), out_dir, "micro-batches")
    lh, lm = _save(lag_plot(progress, chaos, start), out_dir, "audit-lag")
    out.append(("Micro-batches and audit lag", bh + lh, bm + "\n\n" + lm))

    rows = [
        [
            a["alertname"],
            a["topic"],
            a["tier"],
            a["source"],
            f"{_minute(a['starts_at_ms'], start):.1f}",
            "FALSE (healthy period)" if a["false_alert"] else f"chaos: {a['chaos']}",
        ]
        for a in alerts
    ]
    header = ["alert", "topic", "tier", "source", "minute", "period"]
    text = f"{v['chaos_alerts']} alert(s) in chaos periods, {v['false_alerts']} in healthy periods."
    body_h = f"<p>{text}</p>" + (html_table(header, rows) if rows else "")
    body_m = text + ("\n\n" + _md_table(header, rows) if rows else "")
    out.append(("Alerts: healthy versus chaos periods", body_h, body_m))

    bad = [w for w in summary["windows"] if not w["exact"]]
    rows = [
        [
            w["topic"],
            _clock(w["window_start_ms"]),
            w["tier"],
            json.dumps(w["counted"]),
            json.dumps(w["truth"]),
        ]
        for w in bad[:50]
    ]
    text = (
        f"{v['windows_exact']} of {v['windows_total']} final windows equal the verifier (sent, unique, "
        "duplicated)."
    )
    header = ["topic", "window", "tier", "counted", "verifier"]
    out.append(
        (
            "Windows against the verifier",
            f"<p>{text}</p>" + (html_table(header, rows) if rows else ""),
            text + ("\n\n" + _md_table(header, rows) if rows else ""),
        )
    )
    return out


def write_reports(data_dir: Path, out_dir: Path) -> tuple[Path, Path]:
    """Write ``soak.html``, ``soak.md``, the plots and ``windows.html`` (the standard report) to ``out_dir``.

    Args:
        data_dir: The soak's data directory (``records/summary.json``, Parquet under ``spark/results``).
        out_dir: Where the report goes (created).

    Returns:
        The HTML and Markdown paths.
    """
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = data_dir / "records"
    summary = json.loads((records / "summary.json").read_text())
    now = datetime.now(UTC)
    results = load_results(data_dir / "spark" / "results")
    alerts = load_alerts(records / "alerts.jsonl")
    (out_dir / "windows.html").write_text(render(results, alerts, None, now))
    parts = sections(summary, records, out_dir)
    if not results.empty:
        parts.append(("Summary per topic and tier (kafka-audit report)", summary_table(results), ""))
        parts.append(("Completeness (topic x window)", heatmap(results), ""))
    started = datetime.fromtimestamp(summary["load_started_ms"] / 1000, UTC)
    title = f"kafka-audit soak {started:%Y-%m-%d %H:%M} UTC"
    body = "".join(f"<h2>{html.escape(t)}</h2>\n{h}\n" for t, h, _ in parts)
    page = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        "<style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse;font-size:13px}"
        "th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left}th{background:#f6f8fa}"
        "img{max-width:100%;display:block;margin:8px 0}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>Generated {now:%Y-%m-%d %H:%M:%S} UTC. Every window result: "
        f'<a href="windows.html">windows.html</a> (kafka-audit report).</p>{body}</body></html>'
    )
    html_path, md_path = out_dir / "soak.html", out_dir / "soak.md"
    html_path.write_text(page)
    md = [f"# {title}", "", "Every window result: [windows.html](windows.html) (kafka-audit report).", ""]
    md += [f"## {t}\n\n{m}\n" for t, _, m in parts if m]
    md_path.write_text("\n".join(md))
    return html_path, md_path
