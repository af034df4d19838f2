"""``kafka-audit mirror start|status|stop`` (MirrorMaker 2 between two clusters) and ``kafka-audit tiers``.

``mirror`` runs Apache Kafka's MirrorMaker 2 in dedicated mode from cluster A to cluster B, started by
the project like the broker (:mod:`kafka_plumbing.mirror`: generated ``mm2.properties``, PID in
``mirror.json``, stopped by PID). A cluster is named by its MM2 alias: ``--source A`` is the local
cluster started with ``kafka-audit kafka start --name A`` (or, when there is none, the default local
cluster), unless ``--source-bootstrap-servers`` says where it is; likewise ``--target``.

``tiers`` shows the window results of every tier side by side (:mod:`kafka_audit.tier_view`), read
from the results topic, once or ``--follow``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.paths import default_kafka_dir, default_mirror_dir
from spark_streaming.settings import SparkJobSettings

if TYPE_CHECKING:
    from kafka_plumbing.mirror import MirrorMaker

mirror_app = typer.Typer(
    help="Run MirrorMaker 2 (dedicated mode) from one local cluster to another, on 127.0.0.1.",
    no_args_is_help=True,
)
console = Console(width=None if Console().is_terminal else 140)
err_console = Console(stderr=True)

Source = Annotated[str, typer.Option("--source", help="MM2 alias of the source cluster (e.g. A).")]
Target = Annotated[str, typer.Option("--target", help="MM2 alias of the target cluster (e.g. B).")]
MirrorDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir", help="MirrorMaker's directory (default: mirror-<SOURCE>-<TARGET> beside Kafka's)."
    ),
]


def _fail(exc: Exception) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {exc}")
    return typer.Exit(2)


def cluster_servers(alias: str, servers: str | None, data_dir: Path | None, fallback_default: bool) -> str:
    """Return the ``bootstrap.servers`` of the cluster named ``alias``.

    ``servers`` if given; else the running local cluster in ``data_dir``, else in ``kafka-<alias>``
    (``kafka-audit kafka start --name <alias>``), else (``fallback_default``) the default local cluster.

    Raises:
        typer.BadParameter: no such cluster is running.
    """
    if servers:
        return servers
    from kafka_plumbing.local_cluster import KafkaCluster

    candidates = [data_dir] if data_dir is not None else [default_kafka_dir(alias)]
    if data_dir is None and fallback_default:
        candidates.append(default_kafka_dir())
    for path in candidates:
        cluster = KafkaCluster.load(path)
        if cluster is not None and cluster.running_nodes():
            return cluster.bootstrap_servers
    raise typer.BadParameter(
        f"no local cluster {alias!r} running (looked in {', '.join(str(p) for p in candidates)}): start it "
        f"with `kafka-audit kafka start --name {alias}` or give its bootstrap servers",
        param_hint=f"cluster {alias}",
    )


def _load(source: str, target: str, data_dir: Path | None) -> tuple[Path, MirrorMaker | None]:
    from kafka_plumbing.mirror import MirrorMaker

    path = data_dir or default_mirror_dir(source, target)
    return path, MirrorMaker.load(path)


@mirror_app.command("start")
def mirror_start(
    source: Source = "A",
    target: Target = "B",
    topics: Annotated[
        list[str] | None,
        typer.Option(
            "--topics", "-t", help="Regex of the source topics to replicate (repeatable).", show_default=False
        ),
    ] = None,
    policy: Annotated[
        str, typer.Option(help="Replication policy: default (copies named <SOURCE>.<topic>) or identity.")
    ] = "default",
    source_bootstrap_servers: Annotated[
        str | None, typer.Option(help="The source cluster's servers.")
    ] = None,
    target_bootstrap_servers: Annotated[
        str | None, typer.Option(help="The target cluster's servers.")
    ] = None,
    source_data_dir: Annotated[Path | None, typer.Option(help="The source cluster's data directory.")] = None,
    target_data_dir: Annotated[Path | None, typer.Option(help="The target cluster's data directory.")] = None,
    data_dir: MirrorDir = None,
    heap_mb: Annotated[int, typer.Option(help="JVM heap, MiB.")] = 512,
    timeout_s: Annotated[float, typer.Option(help="Wait this long for replication to start, s.")] = 120.0,
) -> None:
    """Start MirrorMaker 2 from --source to --target (headers copied as bytes); returns once it replicates."""
    from kafka_plumbing.mirror import MirrorMaker

    path = data_dir or default_mirror_dir(source, target)
    try:
        mm = MirrorMaker.load(path)
        if mm is None or topics or source_bootstrap_servers or target_bootstrap_servers:
            mm = MirrorMaker(
                data_dir=path,
                source=source,
                target=target,
                source_bootstrap=cluster_servers(source, source_bootstrap_servers, source_data_dir, True),
                target_bootstrap=cluster_servers(target, target_bootstrap_servers, target_data_dir, False),
                topics=topics or [".*"],
                policy=policy,  # type: ignore[arg-type]
                heap_mb=heap_mb,
            )
        with console.status(f"starting MirrorMaker 2 {mm.flow} ..."):
            mm.start(timeout_s)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    console.print(
        f"[green]MirrorMaker 2 running[/]: {mm.flow} (pid {mm.pid}), topics {','.join(mm.topics)}; "
        f"copies on {target} are named {mm.replicated_topic('<topic>')}; log {mm.log_path}",
        highlight=False,
    )


@mirror_app.command("status")
def mirror_status(source: Source = "A", target: Target = "B", data_dir: MirrorDir = None) -> None:
    """Show the MirrorMaker 2 flow, its servers, topics, PID and whether it runs (exit 1 if not)."""
    path, mm = _load(source, target, data_dir)
    if mm is None:
        console.print(f"no MirrorMaker in {path}")
        raise typer.Exit(1)
    status = mm.status()
    table = Table(*status, title=f"MirrorMaker 2 in {path}")
    table.add_row(*(str(v) for v in status.values()))
    console.print(table)
    if not status["running"]:
        raise typer.Exit(1)


@mirror_app.command("stop")
def mirror_stop(source: Source = "A", target: Target = "B", data_dir: MirrorDir = None) -> None:
    """Stop MirrorMaker 2 by PID (SIGTERM: connectors stop and flush their offsets; then SIGKILL)."""
    path, mm = _load(source, target, data_dir)
    if mm is None:
        console.print(f"no MirrorMaker in {path}")
        return
    mm.stop()
    console.print("MirrorMaker 2 stopped")


def tiers(
    bootstrap_servers: Annotated[
        str | None,
        typer.Option("--bootstrap-servers", "-b", help="The cluster of the results topic (default: local)."),
    ] = None,
    results_topic: Annotated[
        str, typer.Option(help="Results topic (Avro WindowResult; the Spark job's default).")
    ] = SparkJobSettings.model_fields["results_topic"].default,
    topic: Annotated[str | None, typer.Option(help="Only this audited topic.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many (topic, window) lines.")] = 20,
    final_only: Annotated[
        bool, typer.Option("--final-only", help="Only windows final at every tier.")
    ] = False,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Refresh every 2 s until Ctrl-C.")] = False,
) -> None:
    """Show completeness per tier (producer -> cluster -> replica -> consumers) per topic and window."""
    from kafka_audit.tier_view import tiers_table
    from kafka_plumbing.local_cluster import KafkaCluster
    from spark_streaming.results import read_results

    servers = bootstrap_servers
    if not servers:
        cluster = KafkaCluster.load(default_kafka_dir())
        if cluster is None or not cluster.running_nodes():
            raise typer.BadParameter(
                "no --bootstrap-servers given and no local cluster running", param_hint="--bootstrap-servers"
            )
        servers = cluster.bootstrap_servers
    config = {"bootstrap.servers": servers}

    def table() -> Table:
        rows = [r for r in read_results(config, results_topic) if topic is None or r["topic"] == topic]
        return tiers_table(rows, limit=limit, final_only=final_only)

    try:
        if not follow:
            console.print(table())
            return
        with Live(table(), console=console, refresh_per_second=1) as live:
            while True:
                time.sleep(2)
                live.update(table())
    except KeyboardInterrupt:
        return
    except KafkaAuditError as exc:
        raise _fail(exc) from exc


def register(app: typer.Typer) -> None:
    """Add ``mirror start|status|stop`` and ``tiers`` to the ``kafka-audit`` app."""
    app.add_typer(mirror_app, name="mirror")
    app.command("tiers")(tiers)
