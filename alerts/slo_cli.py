"""`kafka-audit slo rules`: write the SLOs' Prometheus recording rules and burn-rate alerts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

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
            what = "freshness: not yet measured, no rules"
        console.print(
            f"  {slo.name}: {what} (topics ~ {slo.topic_pattern}, tiers ~ {slo.tier_pattern})",
            highlight=False,
            soft_wrap=True,
        )


def register(app: typer.Typer) -> None:
    """Add ``slo rules`` to the ``kafka-audit`` typer app."""
    app.add_typer(slo_app, name="slo")
