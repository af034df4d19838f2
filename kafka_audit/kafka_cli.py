"""``kafka-audit kafka start|status|stop``: a local Apache Kafka cluster (KRaft mode) on 127.0.0.1.

The cluster's files, ports and PIDs live in its data directory (:class:`kafka_plumbing.local_cluster.
KafkaCluster`); ``--name B`` runs a further cluster beside the default one (e.g. a MirrorMaker 2 target).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from kafka_audit.cli_options import ClusterName, KafkaDir, console, fail, kafka_dir
from kafka_plumbing.errors import KafkaAuditError

kafka_app = typer.Typer(
    help="Run a local Apache Kafka cluster (KRaft mode) on 127.0.0.1.", no_args_is_help=True
)


@kafka_app.command("start")
def kafka_start(
    brokers: Annotated[int, typer.Option(help="Number of brokers: 1 or 3.")] = 1,
    data_dir: KafkaDir = None,
    name: ClusterName = None,
    base_port: Annotated[int | None, typer.Option(help="First port (default: free ports).")] = None,
    heap_mb: Annotated[int, typer.Option(help="JVM heap per broker, MiB.")] = 768,
) -> None:
    """Start a local KRaft cluster (data kept in --data-dir; restarts reuse it); --name B runs another."""
    from kafka_plumbing.local_cluster import KafkaCluster

    data_dir = kafka_dir(data_dir, name)
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
            cluster.wait_transactions_ready()  # idempotent and transactional clients start without retries
    except KafkaAuditError as exc:
        raise fail(exc) from exc
    console.print(f"[green]Kafka running[/]: bootstrap.servers={cluster.bootstrap_servers}")


@kafka_app.command("status")
def kafka_status(data_dir: KafkaDir = None, name: ClusterName = None) -> None:
    """Show the local cluster's nodes, ports, PIDs and broker-metrics (JMX exporter) addresses."""
    from kafka_plumbing.local_cluster import KafkaCluster

    data_dir = kafka_dir(data_dir, name)
    cluster = KafkaCluster.load(data_dir)
    if cluster is None:
        console.print(f"no cluster in {data_dir}")
        raise typer.Exit(1)
    columns = ("node", "broker", "controller", "metrics", "pid", "running")  # metrics: JMX exporter
    table = Table(*columns, title=f"Kafka cluster in {data_dir}")
    for row in cluster.status():
        table.add_row(*(str(row[k]) for k in columns))
    console.print(table)
    if cluster.metrics_targets and cluster.prometheus_config_path.exists():
        console.print(f"Prometheus scrape config: {cluster.prometheus_config_path}", highlight=False)
    if not cluster.running_nodes():
        raise typer.Exit(1)


@kafka_app.command("stop")
def kafka_stop(data_dir: KafkaDir = None, name: ClusterName = None) -> None:
    """Stop the local cluster (controlled shutdown, by PID)."""
    from kafka_plumbing.local_cluster import KafkaCluster

    data_dir = kafka_dir(data_dir, name)
    cluster = KafkaCluster.load(data_dir)
    if cluster is None:
        console.print(f"no cluster in {data_dir}")
        return
    cluster.stop()
    console.print("Kafka stopped")


def register(app: typer.Typer) -> None:
    """Add the ``kafka`` command group to the ``kafka-audit`` app."""
    app.add_typer(kafka_app, name="kafka")
