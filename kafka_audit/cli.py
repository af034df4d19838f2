"""The ``kafka-audit`` command line (typer + rich). Every command has ``--help``."""

from __future__ import annotations

import json
import logging
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from kafka_audit.errors import KafkaAuditError
from kafka_audit.paths import default_kafka_dir

app = typer.Typer(
    help="kafka-audit: know that every Kafka message arrived exactly once.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
kafka_app = typer.Typer(
    help="Run a local Apache Kafka cluster (KRaft mode) on 127.0.0.1.", no_args_is_help=True
)
app.add_typer(kafka_app, name="kafka")
DEFAULT_KAFKA_DIR = default_kafka_dir()
console = Console(width=None if Console().is_terminal else 140)
err_console = Console(stderr=True)

DataDir = Annotated[Path, typer.Option("--data-dir", help="Cluster data directory.")]
Bootstrap = Annotated[
    str | None,
    typer.Option("--bootstrap-servers", "-b", help="Kafka bootstrap.servers (default: the local cluster's)."),
]
ExtraProps = Annotated[
    list[str] | None,
    typer.Option("-X", help="librdkafka property key=value, passed through (repeatable)."),
]


def _fail(exc: Exception) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {exc}")
    return typer.Exit(2)


def _props(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise typer.BadParameter(f"-X {item!r}: expected key=value (a librdkafka property)")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _bootstrap(servers: str | None, data_dir: Path | None = None) -> str:
    if servers:
        return servers
    from testbed.kafka_cluster import KafkaCluster

    cluster = KafkaCluster.load(data_dir or default_kafka_dir())
    if cluster is None or not cluster.running_nodes():
        raise typer.BadParameter(
            "no --bootstrap-servers given and no local cluster running: "
            "start one with `kafka-audit kafka start`",
            param_hint="--bootstrap-servers",
        )
    return cluster.bootstrap_servers


# ---------------------------------------------------------------------------------------------- kafka
@kafka_app.command("start")
def kafka_start(
    brokers: Annotated[int, typer.Option(help="Number of brokers: 1 or 3.")] = 1,
    data_dir: DataDir = DEFAULT_KAFKA_DIR,
    base_port: Annotated[int | None, typer.Option(help="First port (default: free ports).")] = None,
    heap_mb: Annotated[int, typer.Option(help="JVM heap per broker, MiB.")] = 768,
) -> None:
    """Start a local KRaft cluster (data kept in --data-dir; restarts reuse it)."""
    from testbed.kafka_cluster import KafkaCluster

    try:
        cluster = KafkaCluster.load(data_dir)
        if cluster is not None and len(cluster.nodes) != brokers:
            raise KafkaAuditError(
                f"{data_dir} holds a {len(cluster.nodes)}-broker cluster; "
                f"use another --data-dir for {brokers}"
            )
        if cluster is None:
            cluster = KafkaCluster.create(data_dir, brokers, base_port, heap_mb)
        with console.status(f"starting {brokers}-broker Kafka in {data_dir} ..."):
            cluster.start()
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    console.print(f"[green]Kafka running[/]: bootstrap.servers={cluster.bootstrap_servers}")


@kafka_app.command("status")
def kafka_status(data_dir: DataDir = DEFAULT_KAFKA_DIR) -> None:
    """Show the local cluster's nodes, ports and PIDs."""
    from testbed.kafka_cluster import KafkaCluster

    cluster = KafkaCluster.load(data_dir)
    if cluster is None:
        console.print(f"no cluster in {data_dir}")
        raise typer.Exit(1)
    table = Table("node", "broker", "controller", "pid", "running", title=f"Kafka cluster in {data_dir}")
    for row in cluster.status():
        table.add_row(*(str(row[k]) for k in ("node", "broker", "controller", "pid", "running")))
    console.print(table)
    if not cluster.running_nodes():
        raise typer.Exit(1)


@kafka_app.command("stop")
def kafka_stop(data_dir: DataDir = DEFAULT_KAFKA_DIR) -> None:
    """Stop the local cluster (controlled shutdown, by PID)."""
    from testbed.kafka_cluster import KafkaCluster

    cluster = KafkaCluster.load(data_dir)
    if cluster is None:
        console.print(f"no cluster in {data_dir}")
        return
    cluster.stop()
    console.print("Kafka stopped")


# ---------------------------------------------------------------------------------------------- produce
@app.command()
def produce(
    topic: Annotated[str, typer.Option(help="Target topic.")],
    profile: Annotated[
        str, typer.Option(help="Workload: social, weblog or game (paper Table II).")
    ] = "weblog",
    rate: Annotated[float, typer.Option(help="Messages/s (0 = as fast as possible).")] = 1000.0,
    duration: Annotated[float | None, typer.Option(help="Seconds to run.")] = 60.0,
    count: Annotated[
        int | None, typer.Option(help="Messages to send (stops earlier than --duration).")
    ] = None,
    message_bytes: Annotated[int | None, typer.Option(help="Fixed message size M, bytes.")] = None,
    acks: Annotated[str | None, typer.Option(help="librdkafka acks: 0, 1, all.")] = None,
    window_ms: Annotated[int, typer.Option(help="Audit window length, ms.")] = 60_000,
    client_id: Annotated[str, typer.Option(help="librdkafka client.id.")] = "kafka-audit-load",
    bootstrap_servers: Bootstrap = None,
    x: ExtraProps = None,
) -> None:
    """Produce audited load of one workload profile, with a progress bar."""
    from audit_producer.load import run_load
    from audit_producer.settings import ProducerAuditSettings

    config: dict[str, Any] = {
        "bootstrap.servers": _bootstrap(bootstrap_servers),
        "client.id": client_id,
        **_props(x),
    }
    if acks is not None:
        config["acks"] = acks
    audit = ProducerAuditSettings(window_ms=window_ms, delivery_reports="errors")
    total = count or (int(rate * duration) if duration and rate > 0 else None)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,} msgs"),
        TimeRemainingColumn(),
        console=console,
    ) as progress:
        task = progress.add_task(f"{profile} -> {topic}", total=total)
        try:
            result = run_load(
                config,
                topic,
                profile,
                rate=rate,
                duration_s=duration,
                count=count,
                audit=audit,  # type: ignore[arg-type]
                message_bytes=message_bytes,
                stop=stop,
                progress=lambda n: progress.update(task, completed=n),
            )
        except (KafkaAuditError, ValueError) as exc:
            raise _fail(exc) from exc
    console.print(
        f"produced {result.produced:,} messages in {result.seconds:.1f} s ({result.rate:,.0f} msg/s), "
        f"producer id {result.producer_id}, {result.snapshots} audit snapshots"
    )


# ------------------------------------------------------------------------------------ audit consumer
@app.command("audit-consumer")
def audit_consumer(
    topics: Annotated[list[str], typer.Option("--topics", "-t", help="Monitored topics (repeatable).")],
    cluster: Annotated[str, typer.Option(help="Cluster name: the tier is cluster:<name>.")] = "local",
    instance_id: Annotated[str | None, typer.Option(help="Stable instance id (default: host name).")] = None,
    window_ms: Annotated[int, typer.Option(help="Window length, ms (as the producers').")] = 60_000,
    grace_ms: Annotated[int, typer.Option(help="Grace after a window's end before it closes, ms.")] = 30_000,
    commit_interval_ms: Annotated[int, typer.Option(help="Transaction commit interval, ms.")] = 1_000,
    timeliness: Annotated[
        list[str] | None,
        typer.Option(help="Timeliness S per topic, TOPIC=MS (repeatable); slower messages count as stale."),
    ] = None,
    duration: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
    bootstrap_servers: Bootstrap = None,
    x: ExtraProps = None,
) -> None:
    """Count every message of the monitored topics, exactly once, and emit snapshots to the audit topic."""
    from audit_consumer.consumer import AuditConsumer, describe
    from audit_consumer.settings import AuditConsumerSettings

    s_map = {}
    for item in timeliness or []:
        t, _, ms = item.partition("=")
        if not ms.isdigit():
            raise typer.BadParameter(f"--timeliness {item!r}: expected TOPIC=MS", param_hint="--timeliness")
        s_map[t] = int(ms)
    kwargs: dict[str, Any] = {}
    if instance_id:
        kwargs["instance_id"] = instance_id
    settings = AuditConsumerSettings(
        cluster=cluster,
        topics=topics,
        bootstrap_servers=_bootstrap(bootstrap_servers),
        window_ms=window_ms,
        grace_ms=grace_ms,
        commit_interval_ms=commit_interval_ms,
        timeliness_ms=s_map,
        extra_config=_props(x),
        **kwargs,
    )
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if duration is not None:
        threading.Timer(duration, stop.set).start()
    console.print(f"audit consumer: {json.dumps(describe(settings))}")
    consumer = AuditConsumer(settings)
    try:
        consumer.run(stop)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    st = consumer.stats
    console.print(
        f"stopped: {st.messages:,} messages, {st.transactions} transactions, "
        f"{st.snapshots} snapshots, {st.dead_letters} dead letters"
    )


# ---------------------------------------------------------------------------------------------- verify
@app.command()
def verify(
    topic: Annotated[str, typer.Option(help="Data topic to verify.")],
    window_ms: Annotated[int, typer.Option(help="Window length, ms.")] = 60_000,
    cluster: Annotated[
        str | None, typer.Option(help="Also compare the audit consumer of this cluster.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines instead of a table.")] = False,
    bootstrap_servers: Bootstrap = None,
) -> None:
    """Ground truth: read the whole topic and count sent / lost / duplicated per window and producer."""
    from testbed.report import compare_with_cluster, verification_table
    from testbed.verify import verify_topic

    config = {"bootstrap.servers": _bootstrap(bootstrap_servers)}
    try:
        v = verify_topic(config, topic, window_ms)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    mismatches = compare_with_cluster(v, cluster) if cluster else None
    if as_json:
        for (start, pid), row in sorted(v.rows.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
            print(
                json.dumps(
                    {
                        "topic": topic,
                        "window_start_ms": start,
                        "producer_id": pid,
                        "sent": row.sent,
                        "received": row.received,
                        "unique": row.unique,
                        "duplicated": row.duplicated,
                        "lost": row.lost,
                        "loss_rate": row.loss_rate,
                        "duplicate_rate": row.duplicate_rate,
                    }
                )
            )
    else:
        console.print(verification_table(v, mismatches))
    if mismatches:
        err_console.print(f"[red]{len(mismatches)} window(s) differ from the audit consumer of {cluster}[/]")
        raise typer.Exit(1)


# ---------------------------------------------------------------------------------------------- demo
@app.command()
def demo(
    duration: Annotated[float, typer.Option(help="Seconds of load.")] = 60.0,
    rate: Annotated[float, typer.Option(help="Messages/s per producer.")] = 500.0,
    window_ms: Annotated[int, typer.Option(help="Window length, ms.")] = 10_000,
    data_dir: Annotated[Path, typer.Option(help="Where the demo cluster's data goes (wiped).")] = Path(
        "var/demo"
    ),
) -> None:
    """Start a local Kafka, run three audited producers and the audit consumer, verify every window."""
    from testbed.demo import run_demo

    logging.basicConfig(level=logging.WARNING)
    try:
        ok = run_demo(console, duration_s=duration, rate=rate, window_ms=window_ms, data_dir=data_dir)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    raise typer.Exit(0 if ok else 1)


def main() -> None:  # pragma: no cover - console script entry
    """Console script entry point."""
    app()
