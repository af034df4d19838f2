"""The ``kafka-audit`` command line (typer + rich). Every command has ``--help``."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.paths import default_kafka_dir

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
KafkaDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir", help=f"Cluster data directory (default {DEFAULT_KAFKA_DIR}, or kafka-<NAME> beside it)."
    ),
]
ClusterName = Annotated[
    str | None,
    typer.Option(
        "--name",
        help="Name of a further local cluster (e.g. B for a MirrorMaker 2 target): its own ports and data "
        "directory kafka-<NAME> beside the default one.",
    ),
]
Bootstrap = Annotated[
    str | None,
    typer.Option("--bootstrap-servers", "-b", help="Kafka bootstrap.servers (default: the local cluster's)."),
]
ExtraProps = Annotated[
    list[str] | None,
    typer.Option("-X", help="librdkafka property key=value, passed through (repeatable)."),
]


AlertmanagerUrl = Annotated[
    str | None,
    typer.Option(
        help="Send alerts to this Prometheus Alertmanager (http://host:9093); env KAFKA_AUDIT_ALERTS_*."
    ),
]
WebhookUrl = Annotated[str | None, typer.Option(help="Send alerts to this JSON webhook.")]
GammaTarget = Annotated[
    float | None, typer.Option(help="KPI gamma target (0-1] of every topic; below it: suggestion and alert.")
]
Retrain = Annotated[
    bool | None,
    typer.Option(
        "--retrain/--no-retrain",
        help="Retrain the predictor on the audited windows in the background and promote a better model "
        "(default: on; env KAFKA_AUDIT_SPARK_RETRAIN).",
    ),
]
RegistryDir = Annotated[
    Path | None,
    typer.Option(
        help="Model registry (versions, champion, decisions); default: 'models' beside the checkpoint."
    ),
]
RetrainEveryWindows = Annotated[
    int | None,
    typer.Option(help="Retrain every N new stored windows (default 200).", min=1),
]
Control = Annotated[
    str | None,
    typer.Option(
        "--control",
        help="Control loop mode: off, advise (default: decisions are events only) or apply (write changes "
        "to the control topic for autotuned producers); env KAFKA_AUDIT_CONTROL_*.",
    ),
]
RetrainEveryMinutes = Annotated[
    float | None,
    typer.Option(help="... or every T minutes once 50 new windows are stored (default 60)."),
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


def _kafka_dir(data_dir: Path | None, name: str | None) -> Path:
    """Return ``--data-dir``, else the directory of the cluster named ``--name`` (else the default)."""
    return data_dir if data_dir is not None else default_kafka_dir(name)


def _bootstrap(servers: str | None, data_dir: Path | None = None) -> str:
    if servers:
        return servers
    from kafka_plumbing.local_cluster import KafkaCluster

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
    data_dir: KafkaDir = None,
    name: ClusterName = None,
    base_port: Annotated[int | None, typer.Option(help="First port (default: free ports).")] = None,
    heap_mb: Annotated[int, typer.Option(help="JVM heap per broker, MiB.")] = 768,
) -> None:
    """Start a local KRaft cluster (data kept in --data-dir; restarts reuse it); --name B runs another."""
    from kafka_plumbing.local_cluster import KafkaCluster

    data_dir = _kafka_dir(data_dir, name)
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
def kafka_status(data_dir: KafkaDir = None, name: ClusterName = None) -> None:
    """Show the local cluster's nodes, ports, PIDs and broker-metrics (JMX exporter) addresses."""
    from kafka_plumbing.local_cluster import KafkaCluster

    data_dir = _kafka_dir(data_dir, name)
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

    data_dir = _kafka_dir(data_dir, name)
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
    autotune: Annotated[
        bool | None,
        typer.Option(
            "--autotune/--no-autotune",
            help="Follow the control topic for the producer group and apply its configurations "
            "(default: KAFKA_AUDIT_PRODUCER_AUTOTUNE).",
        ),
    ] = None,
    group: Annotated[
        str | None, typer.Option(help="Producer group on the control topic (default: the client.id).")
    ] = None,
    follow_hints: Annotated[
        bool,
        typer.Option(
            "--follow-hints/--no-follow-hints",
            help="With --autotune: offer one message per hinted polling interval (changes the offered load).",
        ),
    ] = False,
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
    tuning: dict[str, Any] = {"group": group} if group else {}
    if autotune is not None:
        tuning["autotune"] = autotune
    audit = ProducerAuditSettings(window_ms=window_ms, delivery_reports="errors", **tuning)
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
        try:  # run_load calls AuditedProducer.check() first: bad credentials fail here, at once
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
                follow_hints=follow_hints,
                on_reconfigure=lambda e: console.print(
                    f"configuration {e['kind'].replace('_', ' ')} (control version {e['version']}): "
                    f"{e['to']} ({e['reason']})"
                ),
            )
        except (KafkaAuditError, ValueError) as exc:
            raise _fail(exc) from exc
    console.print(
        f"produced {result.produced:,} messages in {result.seconds:.1f} s ({result.rate:,.0f} msg/s), "
        f"producer id {result.producer_id}, {result.snapshots} audit snapshots"
    )
    if result.not_handed_over:
        console.print(f"[red]{result.not_handed_over:,} messages could not be handed over in time (lost)[/]")
    if result.config_events:
        kinds = Counter(e["kind"] for e in result.config_events)
        console.print(f"config events: {dict(kinds)}; control version at the end: {result.control_version}")


# ------------------------------------------------------------------------------------ audit consumer
@app.command("audit-consumer")
def audit_consumer(
    topics: Annotated[
        list[str] | None, typer.Option("--topics", "-t", help="Monitored topics by name (repeatable).")
    ] = None,
    topic_pattern: Annotated[
        list[str] | None,
        typer.Option(
            "--topic-pattern",
            help="Also audit every topic whose whole name matches this Python regex (repeatable; internal "
            "topics excepted; new topics found while running).",
        ),
    ] = None,
    max_final_wait_ms: Annotated[
        int | None,
        typer.Option(
            help="Keep a window open up to this long after its end while its producers' message.timeout.ms "
            "+ margin needs it, ms (default 310000; 0: the grace alone)."
        ),
    ] = None,
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
    audit_bootstrap_servers: Annotated[
        str | None,
        typer.Option(
            help="Write snapshots to the audit topic of this cluster (where the reconciliation reads) "
            "instead of the counted one; offsets are then kept in the state, still exactly once."
        ),
    ] = None,
    replication_source: Annotated[
        list[str] | None,
        typer.Option(
            help="MirrorMaker 2 alias of a source cluster (repeatable): its copies <ALIAS>.<topic> are "
            "counted under the source topic."
        ),
    ] = None,
    replication_policy: Annotated[
        str, typer.Option(help="MirrorMaker 2 replication policy of the copies: default or identity.")
    ] = "default",
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
    if max_final_wait_ms is not None:
        kwargs["max_final_wait_ms"] = max_final_wait_ms
    if audit_bootstrap_servers:
        kwargs["audit_bootstrap_servers"] = audit_bootstrap_servers
    if replication_source:
        kwargs.update(replication_sources=replication_source, replication_policy=replication_policy)
    if not topics and not topic_pattern:
        raise typer.BadParameter("name topics with --topics or patterns with --topic-pattern")
    settings = AuditConsumerSettings(
        cluster=cluster,
        topics=topics or [],
        topic_patterns=topic_pattern or [],
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
    from kafka_audit.verification_report import compare_with_cluster, verification_table
    from audit_consumer.ground_truth import verify_topic

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
    from kafka_audit.demo import run_demo

    logging.basicConfig(level=logging.WARNING)
    try:
        ok = run_demo(console, duration_s=duration, rate=rate, window_ms=window_ms, data_dir=data_dir)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    raise typer.Exit(0 if ok else 1)


# ---------------------------------------------------------------------------------------------- spark job
@app.command("spark-job")
def spark_job(
    checkpoint_dir: Annotated[
        Path, typer.Option(help="Spark checkpoint (resume from it after a crash).")
    ] = Path("var/spark/checkpoint"),
    parquet_dir: Annotated[Path, typer.Option(help="Parquet results root.")] = Path("var/spark/results"),
    cluster: Annotated[list[str] | None, typer.Option(help="Expected cluster name(s) (repeatable).")] = None,
    master: Annotated[str, typer.Option(help="Spark master URL.")] = "local[2]",
    trigger_ms: Annotated[int, typer.Option(help="Micro-batch trigger interval, ms.")] = 5_000,
    grace_ms: Annotated[
        int, typer.Option(help="Window final after watermark passes end + grace, ms.")
    ] = 60_000,
    watermark_delay_ms: Annotated[int, typer.Option(help="Watermark delay on snapshot time, ms.")] = 10_000,
    max_final_wait_ms: Annotated[
        int | None,
        typer.Option(
            help="Keep a window provisional up to this long after its end while its producers' "
            "message.timeout.ms + margin needs it, ms (default 310000; 0: the grace alone; as the audit "
            "consumers')."
        ),
    ] = None,
    results_topic: Annotated[
        str, typer.Option(help="Results topic (Avro WindowResult).")
    ] = "__kafka_audit_results",
    query_name: Annotated[str, typer.Option(help="Query name (names the sinks' transactional id).")] = (
        "kafka-audit-reconciliation"
    ),
    metrics_port: Annotated[int, typer.Option(help="Prometheus exporter port on 127.0.0.1 (0 = none).")] = 0,
    bootstrap_servers: Bootstrap = None,
    alerts: Annotated[
        bool, typer.Option(help="Evaluate the alert rules (alerts topic, Alertmanager, webhook).")
    ] = True,
    alertmanager_url: AlertmanagerUrl = None,
    webhook_url: WebhookUrl = None,
    gamma_target: GammaTarget = None,
    model: Annotated[
        Path | None, typer.Option(help="Base model directory (default: the shipped model).")
    ] = None,
    model_registry_dir: RegistryDir = None,
    training_dir: Annotated[
        Path | None,
        typer.Option(help="Training store (audited windows); default: 'training' beside the checkpoint."),
    ] = None,
    retrain: Retrain = None,
    retrain_every_windows: RetrainEveryWindows = None,
    retrain_every_minutes: RetrainEveryMinutes = None,
    control: Control = None,
) -> None:
    """Run only the Spark job (audit topic -> results, Parquet, Prometheus, alerts, control loop)."""
    from alerts.batch_listener import attach_to_job
    from alerts.settings import load_settings
    from control_loop.loop import attach_to_job as attach_control
    from control_loop.settings import load_control_settings
    from spark_streaming.job import ReconciliationJob
    from spark_streaming.settings import SparkJobSettings

    try:
        alert_settings = (
            load_settings(
                alertmanager_url=alertmanager_url, webhook_url=webhook_url, gamma_target=gamma_target
            )
            if alerts
            else None
        )
        control_settings = load_control_settings(mode=control)
    except KafkaAuditError as exc:
        raise _fail(exc) from exc
    settings = SparkJobSettings(
        bootstrap_servers=_bootstrap(bootstrap_servers),
        master=master,
        checkpoint_dir=checkpoint_dir,
        parquet_dir=parquet_dir,
        clusters=cluster or ["local"],
        trigger_ms=trigger_ms,
        grace_ms=grace_ms,
        watermark_delay_ms=watermark_delay_ms,
        results_topic=results_topic,
        query_name=query_name,
        metrics_port=metrics_port,
        **({"gamma_target": gamma_target} if gamma_target is not None else {}),
        **{
            k: v
            for k, v in {
                "model_dir": model,
                "model_registry_dir": model_registry_dir,
                "training_dir": training_dir,
                "retrain": retrain,
                "retrain_every_windows": retrain_every_windows,
                "retrain_every_minutes": retrain_every_minutes,
                "max_final_wait_ms": max_final_wait_ms,
            }.items()
            if v is not None
        },
    )
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    job = ReconciliationJob(
        settings,
        listeners=[
            lambda b, rows: console.print(
                f"batch {b}: {sum(r['state'] == 'final' for r in rows)} final, "
                f"{sum(r['state'] != 'final' for r in rows)} provisional window result(s)"
            )
        ],
    )
    if alert_settings is not None:
        attach_to_job(job, alert_settings)
    attach_control(job, control_settings)
    try:
        job.start()
    except KafkaAuditError as exc:  # e.g. KafkaAuthenticationError: wrong KAFKA_AUDIT_KAFKA_SASL_PASSWORD
        job.stop()
        raise _fail(exc) from exc
    serving = job.live_model.serving.version if job.live_model.serving else "-"
    console.print(
        f"reconciliation job running ({master}); checkpoint {checkpoint_dir}; serving model {serving} "
        f"from {settings.model_registry_dir}; retraining {'on' if job.live_model.retraining else 'off'}; "
        f"control loop {control_settings.mode}"
    )
    try:
        while not stop.wait(1.0):
            if job.exception() is not None:
                raise _fail(KafkaAuditError(f"Spark query failed: {job.exception()}"))
            job.progress()  # updates the watermark-lag and dropped-rows gauges
    finally:
        job.stop()


# ---------------------------------------------------------------------------------------------- up / status
@app.command()
def up(
    config: Annotated[
        Path | None, typer.Option(help="Config file (.toml or .yaml) with UpSettings keys.")
    ] = None,
    scenario: Annotated[str | None, typer.Option(help="Audited load: social, weblog or game.")] = None,
    duration: Annotated[
        float | None, typer.Option(help="Seconds of load; then stop once its windows are final.")
    ] = (None),
    rate: Annotated[float | None, typer.Option(help="Load rate, messages/s.")] = None,
    window_ms: Annotated[int | None, typer.Option(help="Audit window length, ms.")] = None,
    master: Annotated[str | None, typer.Option(help="Spark master (default local[2]).")] = None,
    brokers: Annotated[int | None, typer.Option(help="Local cluster size: 1 or 3.")] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="State directory (Kafka data, checkpoint, Parquet).")
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
        str | None, typer.Option(help="Name of the audited cluster (tier cluster:<name>; default local).")
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
    from kafka_audit.platform import Platform
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
            producer_config=_props(x) or None,
            retrain=retrain,
            model_registry_dir=model_registry_dir,
            retrain_every_windows=retrain_every_windows,
        )
    except (KafkaAuditError, ValueError) as exc:
        raise _fail(exc) from exc
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
    out = open(json_out, "a") if json_out else None  # noqa: SIM115 - closed in the finally below
    platform = Platform(settings, console, out)
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
        raise _fail(exc) from exc
    finally:
        progress = platform.job.progress() if platform.job is not None else {}
        platform.stop()
        if out is not None:
            out.close()
    console.print(platform.table(platform.rows, progress, limit=50, final_only=True))
    n_final = sum(r["state"] == "final" for r in platform.rows.values())
    console.print(f"{n_final} final window result(s); everything stopped.")


@app.command()
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
    """Show what `kafka-audit up` is running: mode, cluster, topics, metrics, local Kafka. Exit 1 if none."""
    from kafka_audit import instances
    from kafka_audit.platform import read_status

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
    """Print one running ``up`` instance (:meth:`kafka_audit.platform.Platform.status_record`)."""
    from kafka_plumbing.local_cluster import KafkaCluster

    topics = ", ".join([*st.get("topics", []), *(f"/{p}/" for p in st.get("topic_patterns", []))]) or "-"
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


# ------------------------------------------------------------------------- commands of other packages
# Each package owns its commands: ``<package>/cli.py`` defines ``register(app)``. They import heavy
# libraries (torch, matplotlib, grafana) inside the command bodies, so ``kafka-audit --help`` stays fast.
# Commands of other distributions (the lab's ``testbed`` and ``soak``) arrive through the entry-point
# group ``kafka_audit.commands``: each entry point names a ``register(app)`` function.
COMMANDS_ENTRY_POINT_GROUP = "kafka_audit.commands"


def _register_package_commands() -> None:
    from importlib.metadata import entry_points

    from alerts.cli import register as register_alerts
    from control_loop.cli import register as register_control_loop
    from dashboards.cli import register as register_dashboards
    from kafka_audit.mirror_cli import register as register_mirror
    from predictor.cli import register as register_predictor

    for register in (
        register_predictor,
        register_alerts,
        register_dashboards,
        register_control_loop,
        register_mirror,  # `mirror ...` and `tiers`
    ):
        register(app)
    for entry_point in entry_points(group=COMMANDS_ENTRY_POINT_GROUP):
        try:
            entry_point.load()(app)
        except ImportError as exc:  # a broken plugin must not take the product's CLI down with it
            logging.getLogger(__name__).warning("kafka-audit: commands %r not loaded: %s", entry_point.name, exc)


_register_package_commands()


def main() -> None:  # pragma: no cover - console script entry
    """Console script entry point."""
    app()
