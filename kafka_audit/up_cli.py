"""``kafka-audit up`` (the whole platform in one command) and ``kafka-audit status`` (what it runs).

``up`` reads its settings (:class:`~kafka_audit.up_settings.UpSettings`) from the command line, then the
environment (``KAFKA_AUDIT_UP_*``), then the config file, then the defaults: an option not given is
None and leaves the setting to the others. What it starts is :class:`kafka_audit.up.Platform`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from kafka_audit.cli_options import (
    AlertmanagerUrl,
    Control,
    ExtraProps,
    GammaTarget,
    RegistryDir,
    Retrain,
    RetrainEveryWindows,
    WebhookUrl,
    console,
    default_of,
    env_name,
    fail,
    passthrough_properties,
)
from kafka_audit.up_settings import UpSettings
from kafka_plumbing.errors import KafkaAuditError


def _default(field: str) -> str:
    """Return ``(default <value>; env KAFKA_AUDIT_UP_<FIELD>)`` for an ``up`` option's help."""
    return f"(default {default_of(UpSettings, field)}; env {env_name(UpSettings, field)})"


def up(
    config: Annotated[
        Path | None, typer.Option(help="Config file (.toml or .yaml) with UpSettings keys.")
    ] = None,
    scenario: Annotated[str | None, typer.Option(help="Audited load: social, weblog or game.")] = None,
    duration: Annotated[
        float | None, typer.Option(help="Seconds of load; then stop once its windows are final.")
    ] = (None),
    rate: Annotated[float | None, typer.Option(help=f"Load rate, messages/s {_default('rate')}.")] = None,
    window_ms: Annotated[
        int | None, typer.Option(help=f"Audit window length, ms {_default('window_ms')}.")
    ] = None,
    master: Annotated[str | None, typer.Option(help=f"Spark master {_default('master')}.")] = None,
    brokers: Annotated[
        int | None, typer.Option(help=f"Local cluster size: 1 or 3 {_default('brokers')}.")
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help=f"State directory (Kafka data, checkpoint, Parquet) {_default('data_dir')}."),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option(help="Write every final window result as JSON lines.")
    ] = None,
    bootstrap_servers: Annotated[
        str | None,
        typer.Option("--bootstrap-servers", "-b", help="Use this cluster instead of starting a local one."),
    ] = None,
    topic: Annotated[
        list[str] | None,
        typer.Option(
            "--topic",
            "-t",
            help="Audit every topic whose whole name matches this Python regex (repeatable; e.g. "
            "'orders\\..*'); internal topics excepted; topics created later are found while running. "
            "Config file: topic_patterns (regexes), topics (names).",
        ),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(help=f"Name of the audited cluster (tier cluster:<name>) {_default('cluster')}."),
    ] = None,
    x: ExtraProps = None,
    alertmanager_url: AlertmanagerUrl = None,
    webhook_url: WebhookUrl = None,
    gamma_target: GammaTarget = None,
    retrain: Retrain = None,
    model_registry_dir: RegistryDir = None,
    retrain_every_windows: RetrainEveryWindows = None,
    control: Control = None,
    tiers: Annotated[
        bool,
        typer.Option(
            "--tiers",
            help="Live table of the tier view: per window, each tier side by side (cluster, replicas, "
            "application consumers) with its lag.",
        ),
    ] = False,
) -> None:
    """Run the whole platform: Kafka (local unless -b), audit consumer, Spark job, load; live table.

    Without --scenario (and none in the config file) it is monitor mode: audit the topics of an existing
    cluster (-b SERVERS --topic REGEX) with no synthetic load until Ctrl-C or SIGTERM.
    """
    from kafka_audit import up as up_run
    from kafka_audit.up_settings import load_up_settings

    try:
        settings = load_up_settings(
            config,
            alerts={
                "alertmanager_url": alertmanager_url,
                "webhook_url": webhook_url,
                "gamma_target": gamma_target,
            },
            control={"mode": control},
            scenario=scenario,
            duration_s=duration,
            rate=rate,
            window_ms=window_ms,
            master=master,
            brokers=brokers,
            data_dir=data_dir,
            bootstrap_servers=bootstrap_servers,
            topic_patterns=topic or None,
            cluster=cluster,
            producer_config=passthrough_properties(x) or None,
            retrain=retrain,
            model_registry_dir=model_registry_dir,
            retrain_every_windows=retrain_every_windows,
        )
    except (KafkaAuditError, ValueError) as exc:
        raise fail(exc) from exc
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
    out = open(json_out, "a") if json_out else None  # noqa: SIM115 - closed in the finally below
    platform = up_run.Platform(settings, console, out)
    if tiers:
        from kafka_audit.tier_view import live_tiers_table

        platform.table = live_tiers_table
    signal.signal(signal.SIGINT, lambda *_: platform.stop_event.set())
    signal.signal(signal.SIGTERM, lambda *_: platform.stop_event.set())
    logging.basicConfig(level=logging.ERROR)
    try:
        platform.start()
        if settings.monitor:
            patterns = [f"/{p}/" for p in settings.topic_patterns]
            what = ", ".join([*settings.all_topics, *patterns]) or "nothing"
            console.print(
                f"monitor mode: auditing {what} on {platform.bootstrap} as cluster:{settings.cluster} "
                f"(pid {os.getpid()}); Ctrl-C or SIGTERM stops; `kafka-audit status` shows it",
                highlight=False,
                soft_wrap=True,
            )
        platform.run(until_final=settings.duration_s is not None)
    except KafkaAuditError as exc:
        raise fail(exc) from exc
    finally:
        progress = platform.job.progress() if platform.job is not None else {}
        platform.stop()
        if out is not None:
            out.close()
    console.print(platform.table(platform.rows, progress, limit=50, final_only=True))
    n_final = sum(r["state"] == "final" for r in platform.rows.values())
    console.print(f"{n_final} final window result(s); everything stopped.")


def status(
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="Show the `up` whose data directory this is (default: every running one registered in "
            "~/.local/state/kafka-audit/instances, whatever its data directory)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the instances as JSON lines.")] = False,
) -> None:
    """Show what `kafka-audit up` is running: mode, cluster, topics, metrics, local Kafka. Exit 1 if none.

    The topics are those an instance audits now (named, or discovered by its patterns), each with its
    last final window; `--json` has them as `topics` and `last_final_windows`.
    """
    from kafka_audit import instances
    from kafka_audit.up import read_status

    if data_dir is not None:
        st = read_status(data_dir)
        running = [st] if st is not None else []
    else:
        running = instances.running()
    if not running:
        where = f"in {data_dir}" if data_dir is not None else f"in {instances.instances_dir()}"
        console.print(
            f"kafka-audit up is not running (no live instance recorded {where}). An instance of another "
            "user or HOME registers elsewhere: point at its data directory with `kafka-audit status "
            "--data-dir DIR` (DIR holds up.json).",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(1)
    for st in running:
        if as_json:
            print(json.dumps(st, sort_keys=True))
        else:
            _print_instance(st)


def _print_instance(st: dict[str, Any]) -> None:
    """Print one running ``up`` instance (:meth:`kafka_audit.up.Platform.status_record`)."""
    from kafka_plumbing.local_cluster import KafkaCluster

    patterns = ", ".join(f"/{p}/" for p in st.get("topic_patterns", []))
    audited = st.get("topics", [])
    topics = f"{len(audited)} audited now" + (f" (named, or matching {patterns})" if patterns else "")
    topics += "".join(f"\n    {line}" for line in topic_lines(audited, st.get("last_final_windows") or {}))
    mode = st.get("mode", "?") + (f" ({st['scenario']})" if st.get("scenario") else "")
    port = st.get("metrics_port")
    console.print(
        f"kafka-audit up: pid {st['pid']}, {mode}, cluster:{st.get('cluster', '?')} at "
        f"bootstrap.servers={st['bootstrap_servers']}\n"
        f"  topics: {topics}\n"
        f"  metrics: {f'http://127.0.0.1:{port}/metrics' if port else 'off'}\n"
        f"  data directory: {st.get('data_dir', '?')}",
        highlight=False,
        soft_wrap=True,
    )
    data_dir = st.get("data_dir")
    cluster = KafkaCluster.load(Path(data_dir) / "kafka") if data_dir else None
    if cluster is not None and st.get("kafka_pids"):
        for row in cluster.status():
            console.print(
                f"  kafka node {row['node']}: {row['broker']} pid {row['pid']} running={row['running']}",
                highlight=False,
            )


def topic_lines(topics: list[str], last_final: dict[str, dict[str, Any]]) -> list[str]:
    """Return one line per audited topic with its last final window, for ``kafka-audit status``.

    Args:
        topics: The topics an instance audits now (``topics`` of its status record).
        last_final: Per topic, its newest final window (``last_final_windows`` of the status record:
            ``window_start_ms`` in Unix ms, ``sent`` messages, ``loss_rate`` and ``duplicate_rate`` as
            fractions or None).

    Returns:
        E.g. ``shop.orders: last final window 09:34:40 UTC (sent 2,475, R_l 0.00%, R_d 0.00%)``, or
        ``shop.orders: no final window yet``.
    """
    from datetime import UTC, datetime

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.2f}%"

    lines = []
    for t in topics:
        w = last_final.get(t)
        if w is None or w.get("window_start_ms") is None:
            lines.append(f"{t}: no final window yet")
            continue
        start = datetime.fromtimestamp(w["window_start_ms"] / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
        lines.append(
            f"{t}: last final window {start} UTC (sent {w.get('sent') or 0:,}, "
            f"R_l {pct(w.get('loss_rate'))}, R_d {pct(w.get('duplicate_rate'))})"
        )
    return lines


def register(app: typer.Typer) -> None:
    """Add ``up`` and ``status`` to the ``kafka-audit`` app."""
    app.command()(up)
    app.command()(status)
