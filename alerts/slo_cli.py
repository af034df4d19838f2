"""`kafka-audit slo rules|status`: the SLOs' Prometheus rules, and where each SLO stands now."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from kafka_plumbing.errors import KafkaAuditError

console = Console(width=None if Console().is_terminal else 140)
err_console = Console(stderr=True)
slo_app = typer.Typer(
    help="Service-level objectives (completeness per topic pattern and tier): Prometheus recording rules "
    "and multi-window multi-burn-rate alerts. Settings: KAFKA_AUDIT_SLO_* or the [slo] config section.",
    no_args_is_help=True,
)


@slo_app.command("rules")
def rules_cmd(
    out: Annotated[Path, typer.Option(help="Prometheus rules file to write.")] = Path(
        "kafka-audit-slo-rules.yml"
    ),
    config: Annotated[
        Path | None,
        typer.Option(help="TOML or YAML config file whose [slo] section holds the SLOs (as `up --config`)."),
    ] = None,
) -> None:
    """Write the recording rules and burn-rate alerts of the SLOs (check: promtool check rules FILE)."""
    from alerts.slo_rules import counts, rules_text
    from alerts.slo_settings import CompletenessSlo, load_slo_settings

    try:
        settings = load_slo_settings(config)
        text = rules_text(settings)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    except (KafkaAuditError, OSError) as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from exc
    n_record, n_alert = counts(settings)
    console.print(f"wrote {out}: {n_record} recording rules, {n_alert} alerts", highlight=False)
    for slo in settings.slos():
        if isinstance(slo, CompletenessSlo):
            what = f"completeness {slo.objective:.6g} over {slo.period}"
        else:
            what = f"freshness {slo.objective:.6g} within {slo.threshold_s:g} s over {slo.period}"
        console.print(
            f"  {slo.name}: {what} (topics ~ {slo.topic_pattern}, tiers ~ {slo.tier_pattern})",
            highlight=False,
            soft_wrap=True,
        )


def _percent(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def _burn(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


@slo_app.command("status")
def status_cmd(
    config: Annotated[
        Path | None,
        typer.Option(help="TOML or YAML config file whose [slo] section holds the SLOs (as `up --config`)."),
    ] = None,
    results_dir: Annotated[
        Path | None,
        typer.Option(
            help="Parquet results root (the Spark job's parquet_dir; default: KAFKA_AUDIT_SPARK_PARQUET_DIR, "
            "else var/spark/results). Ignored with --bootstrap-servers.",
            show_default=False,
        ),
    ] = None,
    bootstrap_servers: Annotated[
        str | None,
        typer.Option(
            "--bootstrap-servers",
            "-b",
            help="Read the results topic of this cluster instead of the Parquet files (TLS/SASL: "
            "KAFKA_AUDIT_KAFKA_*).",
        ),
    ] = None,
    results_topic: Annotated[
        str | None, typer.Option(help="Results topic (default: KAFKA_AUDIT_SPARK_RESULTS_TOPIC's).")
    ] = None,
    at: Annotated[
        float | None,
        typer.Option(
            help="Evaluate at this instant, s since the Unix epoch (default: now); the job's "
            "kafka_audit_slo_evaluated_at_seconds gives the instant its SLO gauges were computed at.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the statuses as JSON (one object per row) instead.")
    ] = False,
) -> None:
    """Print per SLO, topic and tier: objective, actual over the period, budget left, burn rates, state."""
    import dataclasses
    import json

    from pydantic import ValidationError

    from alerts.slo_settings import duration_seconds, load_slo_settings
    from alerts.slo_status import read_parquet_results, slo_status
    from kafka_plumbing.errors import config_error, setting_and_env_name
    from spark_streaming.settings import SparkJobSettings

    now_ms = int(time.time() * 1000) if at is None else round(at * 1000)
    try:
        settings = load_slo_settings(config)
        since_ms = now_ms - max(duration_seconds(s.period) for s in settings.slos()) * 1000
        try:
            spark = SparkJobSettings()
        except ValidationError as exc:
            prefix = SparkJobSettings.model_config["env_prefix"]
            raise config_error(exc, "invalid Spark job settings", setting_and_env_name(prefix)) from None
        if bootstrap_servers:
            from kafka_plumbing.security import KafkaSecurity
            from spark_streaming.results import read_results

            kafka = {"bootstrap.servers": bootstrap_servers, **KafkaSecurity.from_env().librdkafka_config()}
            rows = read_results(kafka, results_topic or spark.results_topic)
            source = f"topic {results_topic or spark.results_topic}"
        else:
            root = results_dir or spark.parquet_dir
            rows = read_parquet_results(root, since_ms)
            source = str(root)
        statuses = slo_status(rows, settings, now_ms)
    except KafkaAuditError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from exc
    if as_json:
        rows = [{**dataclasses.asdict(s), "evaluated_at_ms": now_ms} for s in statuses]
        print(json.dumps(rows, indent=1))  # plain JSON on stdout, no rich markup
        return
    longs = list(dict.fromkeys(a.long_window for a in settings.burn_rate_alerts))
    table = Table(title=f"SLOs from the final windows in {source}")
    for column in ("SLO", "topic", "tier", "objective", "period", "events", "bad", "actual", "budget left"):
        table.add_column(column, justify="right" if column in ("events", "bad") else "left")
    for w in longs:
        table.add_column(f"burn {w}", justify="right")
    table.add_column("state")
    for s in statuses:
        table.add_row(
            s.slo,
            s.topic,
            s.tier,
            _percent(s.objective, 2),
            s.period,
            f"{s.period_counts.sent:,}",
            f"{s.period_counts.lost:,}",
            _percent(s.actual),
            _percent(s.budget_left, 1),
            *(_burn(s.burn_rates.get(w)) for w in longs),
            s.state + (f" ({', '.join(s.firing)})" if s.firing else ""),
        )
    Console(width=None if console.is_terminal else 220).print(table)
    if not statuses:
        console.print("no final window of a topic and tier any SLO matches", highlight=False)
    console.print(
        "events / bad: completeness: messages sent / lost; freshness: messages held (measured) / held "
        "later than the SLO's threshold",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    """Add ``slo rules`` and ``slo status`` to the ``kafka-audit`` typer app."""
    app.add_typer(slo_app, name="slo")
