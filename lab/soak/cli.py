"""``kafka-audit soak``: run a soak with chaos; ``kafka-audit soak-report``: rebuild its report."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from kafka_plumbing.errors import KafkaAuditError

console = Console(width=None if Console().is_terminal else 140)
err_console = Console(stderr=True)


def soak_cmd(
    duration: Annotated[float | None, typer.Option(help="Minutes of load (default 60).")] = None,
    schedule: Annotated[
        Path | None, typer.Option(help="Chaos schedule YAML (default: the shipped soak-60m).")
    ] = None,
    producers: Annotated[int | None, typer.Option(help="Audited producers N (default 4).")] = None,
    topics: Annotated[int | None, typer.Option(help="Audited topics M (default 2).")] = None,
    rate: Annotated[float | None, typer.Option(help="Messages/s per producer (default 50).")] = None,
    window_ms: Annotated[int | None, typer.Option(help="Audit window, ms (default 60000).")] = None,
    trigger_ms: Annotated[int | None, typer.Option(help="Micro-batch trigger, ms (default 30000).")] = None,
    message_timeout_ms: Annotated[
        int | None, typer.Option(help="Producers' message.timeout.ms (default 90000).")
    ] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Data directory, wiped (default var/soak).")] = None,
    report: Annotated[Path | None, typer.Option(help="Also copy the report here (e.g. docs/soak).")] = None,
) -> None:
    """Soak with chaos: 3 brokers, a Spark standalone cluster, 2 audit consumers, Prometheus, Alertmanager.

    Needs root (iptables, cgroups for the network cut). Exit 0 when every acceptance criterion holds,
    1 when one does not (the report says which), 2 on an error.
    """
    import shutil

    from soak.run import Soak
    from soak.settings import SoakSettings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def interrupt(*_: object) -> None:  # SIGTERM stops the soak like Ctrl-C: every process by PID
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    if os.geteuid() != 0:
        err_console.print(
            "[bold red]error:[/] the soak needs root (iptables and cgroups for the network cut)"
        )
        raise typer.Exit(2)
    overrides = {
        "duration_s": None if duration is None else duration * 60,
        "schedule": schedule,
        "producers": producers,
        "topics": topics,
        "rate": rate,
        "window_ms": window_ms,
        "trigger_ms": trigger_ms,
        "message_timeout_ms": message_timeout_ms,
        "data_dir": data_dir,
    }
    try:
        settings = SoakSettings(**{k: v for k, v in overrides.items() if v is not None})
        soak = Soak(settings)
        verdict = soak.run()
    except KafkaAuditError as exc:
        err_console.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    out = soak.dir / "report"
    if report is not None:
        report.mkdir(parents=True, exist_ok=True)
        for f in out.iterdir():
            shutil.copy2(f, report / f.name)
        out = report
    b = verdict.batches
    console.print(
        f"windows exact {verdict.windows_exact}/{verdict.windows_total}; false alerts {verdict.false_alerts} "
        f"(chaos alerts {verdict.chaos_alerts}); max RSS growth "
        f"{'-' if verdict.max_rss_growth is None else f'{100 * verdict.max_rss_growth:.1f}%'}; micro-batch "
        f"p50/p99 {b.steady_p50_ms:.0f}/{b.steady_p99_ms:.0f} ms (trigger {verdict.trigger_ms} ms); report "
        f"{out / 'soak.html'}"
    )
    if not verdict.passed:
        err_console.print("[red]soak FAILED:[/] " + "; ".join(verdict.failures))
        raise typer.Exit(1)
    console.print("[green]soak passed[/]")


def soak_report_cmd(
    data_dir: Annotated[Path, typer.Option(help="The soak's data directory.")] = Path("var/soak"),
    out: Annotated[Path, typer.Option(help="Report directory.")] = Path("var/soak/report"),
) -> None:
    """Judge a finished soak again from its records and rebuild its report (HTML, Markdown, plots)."""
    import json

    from soak.recorder import read_jsonl
    from soak.report import write_reports
    from soak.verdict import rejudge

    records = data_dir / "records"
    summary = json.loads((records / "summary.json").read_text())
    summary = rejudge(summary, read_jsonl(records / "samples.jsonl"), read_jsonl(records / "progress.jsonl"))
    (records / "summary.json").write_text(json.dumps(summary, indent=1, default=str))

    html_path, md_path = write_reports(data_dir, out)
    console.print(f"wrote {html_path} and {md_path}")


def register(app: typer.Typer) -> None:
    """Add ``soak`` and ``soak-report`` to the ``kafka-audit`` typer app."""
    app.command("soak")(soak_cmd)
    app.command("soak-report")(soak_report_cmd)
