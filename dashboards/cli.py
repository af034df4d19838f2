"""`kafka-audit dashboards build|push` and `kafka-audit report`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError
from rich.console import Console

from kafka_plumbing.errors import KafkaAuditError, config_error, setting_and_env_name
from spark_streaming.settings import SparkJobSettings

if TYPE_CHECKING:
    from dashboards.report import SloReport

SPARK_ENV = SparkJobSettings.model_config["env_prefix"]

console = Console()
err_console = Console(stderr=True)
dashboards_app = typer.Typer(
    help="Grafana dashboards as code: build JSON + provisioning files, or push them to Grafana.",
    no_args_is_help=True,
)


def _fail(exc: Exception) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


@dashboards_app.command("build")
def build_cmd(
    out: Annotated[
        Path, typer.Option(help="Output directory (dashboards/, provisioning/, prometheus/).")
    ] = Path("var/grafana"),
    prometheus_url: Annotated[
        str, typer.Option(help="Prometheus URL as Grafana's server reaches it (provisioned data source).")
    ] = "http://127.0.0.1:9090",
    grafana_dir: Annotated[
        str | None,
        typer.Option(help="Where Grafana sees --out (e.g. a container mount); default: --out, absolute."),
    ] = None,
    folder: Annotated[
        str, typer.Option(help="Grafana folder of the provisioned dashboards.")
    ] = "kafka-audit",
) -> None:
    """Write the dashboards' JSON, Grafana provisioning files and the Prometheus rules to --out."""
    from dashboards.build import build

    try:
        written = build(out, prometheus_url=prometheus_url, grafana_dir=grafana_dir, folder=folder)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    for path in written:
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)
    console.print(
        f"Grafana: set GF_PATHS_PROVISIONING={(grafana_dir or str(out.resolve())).rstrip('/')}/provisioning",
        highlight=False,
    )


@dashboards_app.command("push")
def push_cmd(
    url: Annotated[
        str, typer.Option(help="Grafana base URL, e.g. http://grafana:3000.", envvar="GRAFANA_URL")
    ],
    token: Annotated[
        str,
        typer.Option(
            help="Grafana service-account token (Editor). Prefer the environment variable.",
            envvar="GRAFANA_TOKEN",
            show_default=False,
        ),
    ],
    folder: Annotated[str, typer.Option(help="Folder title (created if missing).")] = "kafka-audit",
    timeout_s: Annotated[float, typer.Option("--timeout", help="HTTP timeout per request, s.")] = 10.0,
) -> None:
    """Upload the dashboards to Grafana (same uid overwrites: safe to re-run)."""
    from dashboards.build import dashboards
    from dashboards.push import push, safe_url

    try:
        saved = push(url, token, dashboards(), folder=folder, timeout_s=timeout_s)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    for d in saved:
        console.print(
            f"saved {d.title!r} (uid {d.uid}, version {d.version}) in folder {folder!r}: "
            f"{safe_url(url).rstrip('/')}{d.url}",
            highlight=False,
            soft_wrap=True,
        )


def report_cmd(
    since: Annotated[str, typer.Option(help="Look-back: windows that ended within it (30m, 1h, 2d).")] = "1h",
    out: Annotated[Path, typer.Option(help="HTML file to write.")] = Path("report.html"),
    results_dir: Annotated[
        Path | None,
        typer.Option(
            help="Parquet results root (the Spark job's parquet_dir; default: KAFKA_AUDIT_SPARK_PARQUET_DIR, "
            f"else {SparkJobSettings.model_fields['parquet_dir'].default}).",
            show_default=False,
        ),
    ] = None,
    alerts: Annotated[
        Path | None,
        typer.Option(
            help="Alert events, JSON lines or Parquet (default: alerts.jsonl next to --results-dir)."
        ),
    ] = None,
    slo_config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="TOML or YAML config file whose [slo] section holds the SLOs of the report's SLO section "
            "(default: KAFKA_AUDIT_SLO_*, else 99.99% complete over 30 days).",
        ),
    ] = None,
) -> None:
    """Write a static HTML report (completeness heatmap, R_l/R_d vs predicted, gamma, model, SLOs, alerts)."""
    from dashboards.report import write_report
    from dashboards.report_data import parse_since

    try:
        window = parse_since(since)
        if results_dir is None:
            try:
                results_dir = SparkJobSettings().parquet_dir
            except ValidationError as exc:
                raise config_error(
                    exc, "invalid Spark job settings", setting_and_env_name(SPARK_ENV)
                ) from None
        alerts_path = alerts if alerts is not None else results_dir.parent / "alerts.jsonl"
        if alerts is not None and not alerts.exists():
            raise KafkaAuditError(f"--alerts {alerts}: no such file or directory")
        slo = SLO_REPORT(slo_config) if SLO_REPORT is not None else None
        n_results, n_alerts = write_report(results_dir, out, window, alerts_path, slo=slo)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    console.print(
        f"wrote {out}: {n_results} final window result(s), {n_alerts} alert(s)",
        highlight=False,
        soft_wrap=True,
    )


SLO_REPORT: Callable[[Path | None], SloReport] | None = None
"""Given the ``--config`` file, the report's SLO section (``dashboards.report.SloReport``); set by
:func:`register` from the application, which may import ``alerts`` (this layer may not)."""


def register(app: typer.Typer, slo_report: Callable[[Path | None], SloReport] | None = None) -> None:
    """Add ``dashboards build|push`` and ``report`` to the ``kafka-audit`` typer app.

    Args:
        app: The ``kafka-audit`` app.
        slo_report: Builds the report's SLO section from a config file (None: the report has none).
    """
    global SLO_REPORT  # set once, when the application assembles its CLI
    SLO_REPORT = slo_report
    app.add_typer(dashboards_app, name="dashboards")
    app.command("report")(report_cmd)
