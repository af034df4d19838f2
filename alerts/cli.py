"""`kafka-audit alerts rules|test-fire|evaluate|tail`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from alerts.settings import AlertSettings, load_settings
from kafka_plumbing.errors import ConfigError, KafkaAuditError

if TYPE_CHECKING:
    from alerts.event import AlertEvent

console = Console(width=None if Console().is_terminal else 140)
err_console = Console(stderr=True)
alerts_app = typer.Typer(
    help="Alert rules (completeness, gamma, prediction drift, audit lag, unaudited producers) and sinks "
    "(alerts topic, Alertmanager, webhook). Settings: KAFKA_AUDIT_ALERTS_* environment variables.",
    no_args_is_help=True,
)

SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-S",
        help="Override a setting, key=value (e.g. -S gamma_for_windows=3); see `alerts rules --help`.",
    ),
]
Bootstrap = Annotated[
    str | None,
    typer.Option(
        "--bootstrap-servers",
        "-b",
        help="Kafka bootstrap.servers of the alerts topic (default: KAFKA_AUDIT_ALERTS_BOOTSTRAP_SERVERS).",
    ),
]
AlertsTopic = Annotated[
    str | None,
    typer.Option(
        "--alerts-topic",
        help="Alerts topic (Avro AlertEvent; default: KAFKA_AUDIT_ALERTS_ALERTS_TOPIC, else "
        f"{AlertSettings.model_fields['alerts_topic'].default}).",
    ),
]


def _fail(exc: Exception) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
    return typer.Exit(2)


def _settings(sets: list[str] | None, **overrides: Any) -> AlertSettings:
    """Return the alert settings: options and ``--set`` given, else KAFKA_AUDIT_ALERTS_*, else defaults.

    Raises:
        ConfigError: a ``--set`` item is no ``key=value`` of a setting, or a value is invalid.
    """
    values: dict[str, Any] = {}
    for item in sets or []:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in AlertSettings.model_fields:
            raise ConfigError(
                f"--set {item!r}: expected key=value with key one of {', '.join(AlertSettings.model_fields)}"
            )
        values[key] = json.loads(value) if value.strip().startswith(("[", "{")) else value.strip()
    return load_settings(**values, **{k: v for k, v in overrides.items() if v is not None})


def _event_row(e: AlertEvent) -> list[str]:
    from alerts.event import rfc3339

    return [
        rfc3339(e.event_at_ms),
        e.status.value,
        e.alertname,
        e.topic,
        e.tier,
        e.severity,
        e.summary + (f"\nsuggestion: {e.suggestion}" if e.suggestion else ""),
    ]


def _print_events(title: str, events: list[AlertEvent], as_json: bool) -> None:
    """Print alert events as JSON lines (``--json``, sorted keys) or as a table titled ``title``."""
    if as_json:
        for e in events:
            print(json.dumps(e.to_dict(), sort_keys=True))
        return
    table = Table(title=title)
    for col in ("at (UTC)", "status", "alertname", "topic", "tier", "severity", "summary"):
        table.add_column(col, overflow="fold")
    for e in events:
        table.add_row(*(escape(x) for x in _event_row(e)), style="red" if e.firing else "green")
    console.print(table)


@alerts_app.command("rules")
def rules_cmd(
    sets: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Print the alert rules with their thresholds and pending / keep-firing counts (settings applied)."""
    import dataclasses

    from alerts.rules import rule_infos

    try:
        infos = rule_infos(_settings(sets))
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    if as_json:
        print(json.dumps([dataclasses.asdict(i) for i in infos], indent=2))
        return
    table = Table(title="kafka-audit alert rules")
    for col in ("alertname", "severity", "condition", "threshold", "fires after", "resolves after"):
        table.add_column(col, overflow="fold")
    for i in infos:
        table.add_row(
            *(
                escape(x)
                for x in (i.alertname, i.severity, i.condition, i.threshold, i.fire_after, i.resolve_after)
            )
        )
    console.print(table)


@alerts_app.command("test-fire")
def test_fire_cmd(
    alertmanager_url: Annotated[
        str | None,
        typer.Option(
            help="Alertmanager base URL, e.g. http://127.0.0.1:9093 (checked via /api/v2/alerts; default: "
            "KAFKA_AUDIT_ALERTS_ALERTMANAGER_URL)."
        ),
    ] = None,
    webhook_url: Annotated[
        str | None, typer.Option(help="Generic JSON webhook URL (default: KAFKA_AUDIT_ALERTS_WEBHOOK_URL).")
    ] = None,
    bootstrap_servers: Bootstrap = None,
    alerts_topic: AlertsTopic = None,
    topic: Annotated[str, typer.Option(help="`topic` label of the test alert.")] = "kafka-audit.test",
    tier: Annotated[str, typer.Option(help="`tier` label of the test alert.")] = "cluster:test",
    hold_s: Annotated[
        float, typer.Option("--hold", min=0, help="Seconds the alert fires before it resolves.")
    ] = 0,
    timeout_s: Annotated[float, typer.Option("--timeout", min=1, help="Deadline of each check, s.")] = 15,
) -> None:
    """Send a test alert (KafkaAuditTestAlert) to every configured sink, check it, then resolve it.

    Sinks come from the options, else from KAFKA_AUDIT_ALERTS_ALERTMANAGER_URL / _WEBHOOK_URL /
    _BOOTSTRAP_SERVERS. Exits 2 if any step fails.
    """
    from alerts.dispatch import sinks_from_settings
    from alerts.testfire import fire_test_alert

    try:
        s = _settings(
            None,
            alertmanager_url=alertmanager_url,
            webhook_url=webhook_url,
            bootstrap_servers=bootstrap_servers,
            alerts_topic=alerts_topic,
        )
        sinks = sinks_from_settings(s)
        if not sinks:
            raise ConfigError(
                "no sink configured: give --alertmanager-url, --webhook-url or --bootstrap-servers"
            )
        steps = fire_test_alert(
            sinks,
            topic,
            tier,
            alertmanager_url=str(s.alertmanager_url) if s.alertmanager_url else None,
            hold_s=hold_s,
            verify_timeout_s=timeout_s,
            generator_url=str(s.generator_url) if s.generator_url else None,
        )
        for sink in sinks:
            sink.close()
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    table = Table(title="kafka-audit alerts test-fire")
    for col in ("sink", "step", "result", "detail"):
        table.add_column(col, overflow="fold")
    for st in steps:
        table.add_row(st.sink, st.action, "[green]ok[/]" if st.ok else "[red]FAILED[/]", escape(st.detail))
    console.print(table)
    failed = [st for st in steps if not st.ok]
    if failed:
        raise _fail(KafkaAuditError(f"{len(failed)} of {len(steps)} step(s) failed"))


@alerts_app.command("evaluate")
def evaluate_cmd(
    results: Annotated[
        list[Path], typer.Argument(help="JSONL files of window results (e.g. `kafka-audit up --json-out`).")
    ],
    sets: SetOption = None,
    send: Annotated[bool, typer.Option(help="Also deliver the events to the configured sinks.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the events as JSON lines.")] = False,
) -> None:
    """Replay window results through the rules and print the alerts that would fire and resolve.

    Each line is one evaluation at its result_at_ms (audit lag is judged against that clock).
    """
    from alerts.batch_listener import AlertPipeline

    try:
        settings = _settings(sets)
        rows: list[dict[str, Any]] = []
        for path in results:
            try:
                lines = path.read_text().splitlines()
            except OSError as exc:
                raise ConfigError(f"results file {path}: {exc.strerror}") from exc
            for n, line in enumerate(lines, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except ValueError as exc:
                        raise ConfigError(f"{path}:{n}: not JSON ({exc})") from exc
        pipeline = AlertPipeline(settings, sinks=None if send else [])
        events: list[AlertEvent] = []
        for row in rows:
            now = int(row.get("result_at_ms") or row.get("window_end_ms") or 0)
            events.extend(pipeline.process([row], now))
        pipeline.close()
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    _print_events(f"{len(events)} alert event(s) from {len(rows)} window result(s)", events, as_json)
    if as_json:
        return
    firing = pipeline.engine.firing()
    console.print(f"{len(firing)} alert(s) still firing at the end.", highlight=False)


@alerts_app.command("tail")
def tail_cmd(
    bootstrap_servers: Bootstrap = None,
    alerts_topic: AlertsTopic = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the events as JSON lines.")] = False,
) -> None:
    """Print every alert event in the alerts topic (read to its end)."""
    from alerts.codec import decode_alert
    from kafka_plumbing.topics import read_to_end

    try:
        s = _settings(None, bootstrap_servers=bootstrap_servers, alerts_topic=alerts_topic)
        if not s.bootstrap_servers:
            raise ConfigError("--bootstrap-servers (or KAFKA_AUDIT_ALERTS_BOOTSTRAP_SERVERS) is required")
        config = {"bootstrap.servers": s.bootstrap_servers, **s.extra_config}
        events = [
            decode_alert(m.value())
            for m in read_to_end(config, s.alerts_topic, group_id="kafka-audit.alerts-tail", missing_ok=True)
        ]
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    _print_events(f"{s.alerts_topic}: {len(events)} event(s)", events, as_json)


def register(app: typer.Typer) -> None:
    """Add this package's commands to the ``kafka-audit`` typer app (``alerts ...``, ``slo ...``)."""
    from alerts.slo_cli import register as register_slo

    app.add_typer(alerts_app, name="alerts")
    register_slo(app)
