"""`kafka-audit control status|set|kill`: the control topic and the kill switch, for operators and tests."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from control_loop.settings import ControlSettings
from kafka_plumbing.errors import ConfigError, KafkaAuditError, config_error, setting_and_env_name
from spark_streaming.settings import SparkJobSettings

console = Console(width=None if Console().is_terminal else 140)
err_console = Console(stderr=True)
control_app = typer.Typer(
    help="The control loop's control topic (newest desired configuration per producer group) and its kill "
    "switch. Settings: KAFKA_AUDIT_CONTROL_* environment variables.",
    no_args_is_help=True,
)

Bootstrap = Annotated[
    str | None,
    typer.Option(
        "--bootstrap-servers",
        "-b",
        help="Kafka bootstrap.servers of the control topic (default: KAFKA_AUDIT_CONTROL_BOOTSTRAP_SERVERS, "
        "else the local cluster's).",
    ),
]
ControlTopic = Annotated[
    str | None,
    typer.Option(
        "--control-topic",
        help="Control topic (default: KAFKA_AUDIT_CONTROL_CONTROL_TOPIC, else "
        f"{ControlSettings.model_fields['control_topic'].default}).",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON lines instead of a table.")]


def _fail(exc: Exception) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
    return typer.Exit(2)


def _settings(**given: Any) -> ControlSettings:
    """Return the control settings: options given (not None), else KAFKA_AUDIT_CONTROL_*, else defaults."""
    from control_loop.settings import load_control_settings

    return load_control_settings(**given)


def _config(settings: ControlSettings) -> dict[str, Any]:
    """Return the librdkafka config of the control topic: the setting (-b or env), else the local cluster's.

    Raises:
        ConfigError: no bootstrap servers set and no local cluster running.
    """
    servers = settings.bootstrap_servers
    if not servers:
        from kafka_plumbing.local_cluster import KafkaCluster
        from kafka_plumbing.paths import default_kafka_dir

        cluster = KafkaCluster.load(default_kafka_dir())
        if cluster is None or not cluster.running_nodes():
            raise ConfigError(
                "no --bootstrap-servers given (nor KAFKA_AUDIT_CONTROL_BOOTSTRAP_SERVERS) and no local "
                "cluster running: start one with `kafka-audit kafka start`"
            )
        servers = cluster.bootstrap_servers
    return {"bootstrap.servers": servers}


def _checkpoint_dir(given: Path | None) -> Path:
    """Return the job's checkpoint dir: ``given``, else KAFKA_AUDIT_SPARK_CHECKPOINT_DIR, else default.

    Raises:
        ConfigError: a KAFKA_AUDIT_SPARK_* variable holds an invalid value (named with its variable).
    """
    if given is not None:
        return given
    from pydantic import ValidationError

    try:
        return SparkJobSettings().checkpoint_dir
    except ValidationError as exc:
        raise config_error(
            exc, "invalid Spark job settings", setting_and_env_name("KAFKA_AUDIT_SPARK_")
        ) from None


def _utc(ms: int | None) -> str:
    if ms is None:
        return "never"
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


@control_app.command("status")
def status_cmd(
    bootstrap_servers: Bootstrap = None,
    control_topic: ControlTopic = None,
    as_json: AsJson = False,
    timeout_s: Annotated[float, typer.Option("--timeout", min=1, help="Deadline to read the topic, s.")] = 30,
) -> None:
    """Print the newest control record per producer group (decoded) and report malformed records.

    Exits 1 when the topic holds malformed records (they change nothing; the producers dead-letter them).
    """
    from control_loop.topic import read_control_topic

    try:
        s = _settings(control_topic=control_topic, bootstrap_servers=bootstrap_servers)
        config = _config(s)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    try:
        latest, malformed = read_control_topic(config, s.control_topic, timeout_s)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    except Exception as exc:  # librdkafka: broker unreachable, authentication
        raise _fail(KafkaAuditError(f"control topic {s.control_topic!r} not read: {exc}")) from exc
    now = time.time_ns() // 1_000_000
    if as_json:
        for group in sorted(latest):
            print(
                json.dumps(
                    {**dataclasses.asdict(latest[group]), "expired": latest[group].expired(now)},
                    sort_keys=True,
                )
            )
        for m in malformed:
            print(json.dumps({"malformed": dataclasses.asdict(m)}, sort_keys=True))
    else:
        table = Table(title=f"{s.control_topic}: newest configuration per group")
        for col in (
            "group",
            "version",
            "acks",
            "idempotence",
            "batch.num.messages",
            "linger.ms",
            "message.timeout.ms",
            "hints",
            "reason",
            "gamma pred. before→after",
            "issued (UTC)",
            "expires (UTC)",
        ):
            table.add_column(col, overflow="fold")
        for group in sorted(latest):
            r = latest[group]
            hints = ", ".join(
                f"{k} {v:g}"
                for k, v in (("poll_interval_ms", r.poll_interval_ms), ("producers", r.producers))
                if v is not None
            )
            gamma = (
                f"{r.predicted_gamma_before:.3f}→{r.predicted_gamma_after:.3f}"
                if r.predicted_gamma_before is not None and r.predicted_gamma_after is not None
                else "-"
            )
            table.add_row(
                *(
                    escape(str(x))
                    for x in (
                        r.group,
                        r.version,
                        r.acks,
                        r.enable_idempotence,
                        r.batch_num_messages,
                        f"{r.linger_ms:g}",
                        r.message_timeout_ms,
                        hints or "-",
                        r.reason,
                        gamma,
                        _utc(r.issued_at_ms),
                        _utc(r.expires_at_ms) + (" (expired)" if r.expired(now) else ""),
                    )
                )
            )
        console.print(table)
        for m in malformed:
            console.print(
                f"[red]malformed[/] record at partition {m.partition} offset {m.offset} "
                f"(key {escape(repr(m.key))}): {escape(m.reason)}: {escape(m.detail)}",
                highlight=False,
            )
    if malformed:
        raise typer.Exit(1)


@control_app.command("set")
def set_cmd(
    group: Annotated[str, typer.Option("--group", "-g", help="Producer group (the record's key).")],
    acks: Annotated[str | None, typer.Option(help="librdkafka acks: 0, 1 or all.")] = None,
    batch_num_messages: Annotated[
        int | None, typer.Option(help="librdkafka batch.num.messages, messages.")
    ] = None,
    linger_ms: Annotated[float | None, typer.Option(help="librdkafka linger.ms, ms.")] = None,
    message_timeout_ms: Annotated[int | None, typer.Option(help="librdkafka message.timeout.ms, ms.")] = None,
    idempotence: Annotated[
        bool | None, typer.Option("--idempotence/--no-idempotence", help="librdkafka enable.idempotence.")
    ] = None,
    poll_interval_ms: Annotated[
        float | None, typer.Option(help="Hint for the application: polling interval, ms.")
    ] = None,
    producers: Annotated[int | None, typer.Option(help="Hint for the application: producer count.")] = None,
    expiry_ms: Annotated[
        int | None,
        typer.Option(help="Producers ignore the record after this many ms (default: never).", min=1),
    ] = None,
    bootstrap_servers: Bootstrap = None,
    control_topic: ControlTopic = None,
    as_json: AsJson = False,
) -> None:
    """Write a forced control record (reason `forced`) for a group: its newest record with these changes.

    Properties not given keep the group's newest record's values (librdkafka's defaults for a group
    without one); the version is the newest + 1. Autotuned producers of the group follow it.
    """
    from control_loop.publish import ControlPublisher, forced_record
    from control_loop.topic import read_control_topic

    changes: dict[str, Any] = {
        k: v
        for k, v in {
            "acks": acks,
            "batch.num.messages": batch_num_messages,
            "linger.ms": linger_ms,
            "message.timeout.ms": message_timeout_ms,
            "enable.idempotence": idempotence,
            "poll_interval_ms": poll_interval_ms,
            "producers": producers,
        }.items()
        if v is not None
    }
    try:
        if not changes:
            raise ConfigError(
                "nothing to set: give at least one of --acks, --batch-num-messages, --linger-ms, "
                "--message-timeout-ms, --idempotence/--no-idempotence, --poll-interval-ms, --producers"
            )
        s = _settings(control_topic=control_topic, bootstrap_servers=bootstrap_servers)
        config = _config(s)
        latest, _ = read_control_topic(config, s.control_topic)
        record = forced_record(group, latest.get(group), changes, time.time_ns() // 1_000_000, expiry_ms)
        publisher = ControlPublisher(config, s.control_topic, s.publish_timeout_ms)
        try:
            publisher.publish(record)
        finally:
            publisher.close()
    except (KafkaAuditError, ValueError) as exc:
        raise _fail(exc) from exc
    except Exception as exc:  # librdkafka: broker unreachable, authentication
        raise _fail(KafkaAuditError(f"control record not written: {exc}")) from exc
    if as_json:
        print(json.dumps(dataclasses.asdict(record), sort_keys=True))
        return
    console.print(
        f"group {escape(group)}: version {record.version} written to {escape(s.control_topic)}: "
        f"{escape(json.dumps({k: v for k, v in dataclasses.asdict(record).items() if v is not None}))}",
        highlight=False,
    )


@control_app.command("kill")
def kill_cmd(
    checkpoint_dir: Annotated[
        Path | None,
        typer.Option(
            help="The Spark job's checkpoint directory (`up`: <data-dir>/spark/checkpoint; default: "
            "KAFKA_AUDIT_SPARK_CHECKPOINT_DIR, else "
            f"{SparkJobSettings.model_fields['checkpoint_dir'].default}).",
            show_default=False,
        ),
    ] = None,
    off: Annotated[bool, typer.Option("--off", help="Release the kill switch (remove the file).")] = False,
) -> None:
    """Pull the control loop's kill switch (create the file control.kill in the checkpoint directory).

    The running job reads it on every micro-batch: while it exists nothing is written to the control
    topic and decisions are advice. A kill_file setting (KAFKA_AUDIT_CONTROL_KILL_FILE) names another file.
    """
    from control_loop.settings import KILL_FILE

    try:
        s = _settings()
        path = s.kill_file or _checkpoint_dir(checkpoint_dir) / KILL_FILE
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    if off:
        path.unlink(missing_ok=True)
        console.print(f"kill switch off ({escape(str(path))} removed)", highlight=False)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"kill switch pulled at {_utc(time.time_ns() // 1_000_000)} UTC\n")
    console.print(f"kill switch ON ({escape(str(path))}): no configuration changes", highlight=False)


def register(app: typer.Typer) -> None:
    """Add this package's commands to the ``kafka-audit`` typer app."""
    app.add_typer(control_app, name="control")


__all__ = ["control_app", "register"]
