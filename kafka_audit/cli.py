"""The ``kafka-audit`` command line (typer + rich): the app, and the commands of the data path.

The data path's commands are here: ``produce`` (audited load), ``audit-consumer``, ``spark-job`` (the
reconciliation job, :func:`kafka_audit.assembly.build_audit_job`), ``verify`` (ground truth) and
``demo``. The other commands live beside what they run and are registered below: ``kafka ...``
(:mod:`kafka_audit.kafka_cli`), ``up`` and ``status`` (:mod:`kafka_audit.up_cli`), ``mirror ...`` and
``tiers`` (:mod:`kafka_audit.mirror_cli`), each package's own (``<package>/cli.py``) and the lab's
(entry points). Every command has ``--help``.

Settings: command line, then environment, then config file, then defaults. An option that configures a
component defaults to None ("not given") and is passed on only when given
(:func:`kafka_audit.cli_options.build_settings`), so the component's environment variables
(``KAFKA_AUDIT_SPARK_*``, ``KAFKA_AUDIT_CONSUMER_*``, ``KAFKA_AUDIT_PRODUCER_*``) apply otherwise; the
help texts quote the settings models' defaults.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from audit_consumer.settings import AuditConsumerSettings
from audit_producer.settings import ProducerAuditSettings
from kafka_audit.cli_options import (
    AlertmanagerUrl,
    Bootstrap,
    Control,
    ExtraProps,
    GammaTarget,
    RegistryDir,
    Retrain,
    RetrainEveryMinutes,
    RetrainEveryWindows,
    WebhookUrl,
    bootstrap,
    build_settings,
    console,
    env_name,
    err_console,
    fail,
    local_bootstrap,
    passthrough_properties,
    setting_help,
)
from kafka_audit.kafka_cli import register as register_kafka
from kafka_audit.up_cli import register as register_up
from kafka_plumbing.errors import KafkaAuditError
from spark_streaming.settings import SparkJobSettings

app = typer.Typer(
    help="kafka-audit: know that every Kafka message arrived exactly once.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
register_kafka(app)


def _spark(field: str) -> str:
    """Return the default and environment variable of a ``spark-job`` option, for its help."""
    return setting_help(SparkJobSettings, field)


def _consumer(field: str) -> str:
    """Return the default and environment variable of an ``audit-consumer`` option, for its help."""
    return setting_help(AuditConsumerSettings, field)


def _producer(field: str) -> str:
    """Return the default and environment variable of a ``produce`` option, for its help."""
    return setting_help(ProducerAuditSettings, field)


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
    window_ms: Annotated[
        int | None, typer.Option(help=f"Audit window length, ms ({_producer('window_ms')}).")
    ] = None,
    client_id: Annotated[str, typer.Option(help="librdkafka client.id.")] = "kafka-audit-load",
    autotune: Annotated[
        bool | None,
        typer.Option(
            "--autotune/--no-autotune",
            help="Follow the control topic for the producer group and apply its configurations "
            f"({_producer('autotune')}).",
        ),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(
            help="Producer group on the control topic (default: the client.id; env "
            f"{env_name(ProducerAuditSettings, 'group')})."
        ),
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

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap(bootstrap_servers),
        "client.id": client_id,
        **passthrough_properties(x),
    }
    if acks is not None:
        config["acks"] = acks
    try:  # every delivery report: their offsets make windows final in seconds (docs/DESIGN.md, invariant 8)
        audit = build_settings(
            ProducerAuditSettings,
            {"window_ms": window_ms, "autotune": autotune, "group": group or None},
        )
    except KafkaAuditError as exc:
        raise fail(exc) from exc
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
                audit=audit,
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
            raise fail(exc) from exc
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
            f"+ margin needs it, ms (0: the grace alone; {_consumer('max_final_wait_ms')})."
        ),
    ] = None,
    cluster: Annotated[
        str | None, typer.Option(help=f"Cluster name: the tier is cluster:<name> ({_consumer('cluster')}).")
    ] = None,
    instance_id: Annotated[
        str | None,
        typer.Option(
            help="Stable instance id (default: host name; env "
            f"{env_name(AuditConsumerSettings, 'instance_id')})."
        ),
    ] = None,
    window_ms: Annotated[
        int | None, typer.Option(help=f"Window length, ms, as the producers' ({_consumer('window_ms')}).")
    ] = None,
    grace_ms: Annotated[
        int | None,
        typer.Option(help=f"Grace after a window's end before it closes, ms ({_consumer('grace_ms')})."),
    ] = None,
    commit_interval_ms: Annotated[
        int | None, typer.Option(help=f"Transaction commit interval, ms ({_consumer('commit_interval_ms')}).")
    ] = None,
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
        str | None,
        typer.Option(
            help="MirrorMaker 2 replication policy of the copies: default or identity "
            f"({_consumer('replication_policy')})."
        ),
    ] = None,
    bootstrap_servers: Bootstrap = None,
    x: ExtraProps = None,
) -> None:
    """Count every message of the monitored topics, exactly once, and emit snapshots to the audit topic."""
    from audit_consumer.consumer import AuditConsumer, describe

    s_map = {}
    for item in timeliness or []:
        t, _, ms = item.partition("=")
        if not ms.isdigit():
            raise typer.BadParameter(f"--timeliness {item!r}: expected TOPIC=MS", param_hint="--timeliness")
        s_map[t] = int(ms)
    given = {
        "topics": topics or None,
        "topic_patterns": topic_pattern or None,
        "bootstrap_servers": bootstrap_servers or None,
        "audit_bootstrap_servers": audit_bootstrap_servers or None,
        "cluster": cluster,
        "instance_id": instance_id or None,
        "window_ms": window_ms,
        "grace_ms": grace_ms,
        "max_final_wait_ms": max_final_wait_ms,
        "commit_interval_ms": commit_interval_ms,
        "timeliness_ms": s_map or None,
        "replication_sources": replication_source or None,
        "replication_policy": replication_policy,
        "extra_config": passthrough_properties(x) or None,
    }
    try:
        settings = build_settings(AuditConsumerSettings, given)
        if not settings.topics and not settings.topic_patterns:
            raise typer.BadParameter("name topics with --topics or patterns with --topic-pattern")
        if "bootstrap_servers" not in settings.model_fields_set:  # neither -b nor the environment
            settings = build_settings(
                AuditConsumerSettings, {**given, "bootstrap_servers": local_bootstrap()}
            )
    except KafkaAuditError as exc:
        raise fail(exc) from exc
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
        raise fail(exc) from exc
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
    from audit_consumer.ground_truth import verify_topic
    from kafka_audit.verification_report import compare_with_cluster, verification_table

    config = {"bootstrap.servers": bootstrap(bootstrap_servers)}
    try:
        v = verify_topic(config, topic, window_ms)
    except KafkaAuditError as exc:
        raise fail(exc) from exc
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
        raise fail(exc) from exc
    raise typer.Exit(0 if ok else 1)


# ---------------------------------------------------------------------------------------------- spark job
@app.command("spark-job")
def spark_job(
    checkpoint_dir: Annotated[
        Path | None,
        typer.Option(help=f"Spark checkpoint (resume from it after a crash; {_spark('checkpoint_dir')})."),
    ] = None,
    parquet_dir: Annotated[
        Path | None, typer.Option(help=f"Parquet results root ({_spark('parquet_dir')}).")
    ] = None,
    cluster: Annotated[
        list[str] | None, typer.Option(help=f"Expected cluster name(s) (repeatable; {_spark('clusters')}).")
    ] = None,
    master: Annotated[str | None, typer.Option(help=f"Spark master URL ({_spark('master')}).")] = None,
    trigger_ms: Annotated[
        int | None, typer.Option(help=f"Micro-batch trigger interval, ms ({_spark('trigger_ms')}).")
    ] = None,
    grace_ms: Annotated[
        int | None,
        typer.Option(help=f"Window final after watermark passes end + grace, ms ({_spark('grace_ms')})."),
    ] = None,
    watermark_delay_ms: Annotated[
        int | None,
        typer.Option(help=f"Watermark delay on snapshot time, ms ({_spark('watermark_delay_ms')})."),
    ] = None,
    max_final_wait_ms: Annotated[
        int | None,
        typer.Option(
            help="Keep a window provisional up to this long after its end while its producers' "
            "message.timeout.ms + margin needs it, ms (0: the grace alone; as the audit consumers'; "
            f"{_spark('max_final_wait_ms')})."
        ),
    ] = None,
    results_topic: Annotated[
        str | None, typer.Option(help=f"Results topic, Avro WindowResult ({_spark('results_topic')}).")
    ] = None,
    query_name: Annotated[
        str | None,
        typer.Option(help=f"Query name, names the sinks' transactional id ({_spark('query_name')})."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(help=f"Prometheus exporter port on 127.0.0.1, 0 = none ({_spark('metrics_port')})."),
    ] = None,
    bootstrap_servers: Bootstrap = None,
    alerts: Annotated[
        bool, typer.Option(help="Evaluate the alert rules (alerts topic, Alertmanager, webhook).")
    ] = True,
    slo: Annotated[
        bool,
        typer.Option(
            help="Evaluate the SLOs in the job (KAFKA_AUDIT_SLO_*, default 99.99% complete over 30 days): "
            "budget and burn-rate metrics, burn-rate alerts through the alert sinks. Needs --alerts."
        ),
    ] = True,
    alertmanager_url: AlertmanagerUrl = None,
    webhook_url: WebhookUrl = None,
    gamma_target: GammaTarget = None,
    model: Annotated[
        Path | None,
        typer.Option(
            help="Base model directory (default: the shipped model; "
            f"env {env_name(SparkJobSettings, 'model_dir')})."
        ),
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
    from alerts.settings import load_settings
    from alerts.slo_settings import load_slo_settings
    from control_loop.settings import load_control_settings
    from kafka_audit.assembly import build_audit_job

    given = {
        "bootstrap_servers": bootstrap_servers or None,
        "master": master,
        "checkpoint_dir": checkpoint_dir,
        "parquet_dir": parquet_dir,
        "clusters": cluster or None,
        "trigger_ms": trigger_ms,
        "grace_ms": grace_ms,
        "watermark_delay_ms": watermark_delay_ms,
        "max_final_wait_ms": max_final_wait_ms,
        "results_topic": results_topic,
        "query_name": query_name,
        "metrics_port": metrics_port,
        "gamma_target": gamma_target,
        "model_dir": model,
        "model_registry_dir": model_registry_dir,
        "training_dir": training_dir,
        "retrain": retrain,
        "retrain_every_windows": retrain_every_windows,
        "retrain_every_minutes": retrain_every_minutes,
    }
    try:
        alert_settings = (
            load_settings(
                alertmanager_url=alertmanager_url, webhook_url=webhook_url, gamma_target=gamma_target
            )
            if alerts
            else None
        )
        slo_settings = load_slo_settings() if alerts and slo else None
        control_settings = load_control_settings(mode=control)
        # bootstrap servers: -b, else KAFKA_AUDIT_SPARK_BOOTSTRAP_SERVERS, else the local cluster's
        settings = build_settings(SparkJobSettings, given, fallbacks={"bootstrap_servers": local_bootstrap})
    except KafkaAuditError as exc:
        raise fail(exc) from exc
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    job = build_audit_job(
        settings,
        alerts=alert_settings,
        control=control_settings,
        slo=slo_settings,
        listeners=[
            lambda b, rows: console.print(
                f"batch {b}: {sum(r['state'] == 'final' for r in rows)} final, "
                f"{sum(r['state'] != 'final' for r in rows)} provisional window result(s)"
            )
        ],
    ).job
    try:
        job.start()
    except KafkaAuditError as exc:  # e.g. KafkaAuthenticationError: wrong KAFKA_AUDIT_KAFKA_SASL_PASSWORD
        job.stop()
        raise fail(exc) from exc
    serving = job.live_model.serving.version if job.live_model.serving else "-"
    console.print(
        f"reconciliation job running ({settings.master}); checkpoint {settings.checkpoint_dir}; serving "
        f"model {serving} from {settings.model_registry_dir}; retraining "
        f"{'on' if job.live_model.retraining else 'off'}; control loop {control_settings.mode}"
    )
    try:
        while not stop.wait(1.0):
            if job.exception() is not None:
                raise fail(KafkaAuditError(f"Spark query failed: {job.exception()}"))
            job.progress()  # updates the watermark-lag and dropped-rows gauges
    finally:
        job.stop()


register_up(app)


# ------------------------------------------------------------------------- commands of other packages
# Each package owns its commands: ``<package>/cli.py`` defines ``register(app)``. They import heavy
# libraries (torch, matplotlib, grafana) inside the command bodies, so ``kafka-audit --help`` stays fast.
# Commands of other distributions (the lab's ``testbed`` and ``soak``) arrive through the entry-point
# group ``kafka_audit.commands``: each entry point names a ``register(app)`` function.
COMMANDS_ENTRY_POINT_GROUP = "kafka_audit.commands"


def _slo_report(config: Path | None) -> Callable[[Path, int], dict[str, Any]]:
    """Return the report's SLO section builder: the SLOs of ``config`` over a results directory's windows.

    ``kafka-audit report`` (``dashboards``) cannot import ``alerts`` (sibling layers): this is the
    application handing :func:`alerts.slo_evaluation.report_data` over.

    Raises:
        ConfigError: invalid SLO settings (naming the key).
    """
    from alerts.slo_evaluation import report_data
    from alerts.slo_settings import duration_seconds, load_slo_settings
    from alerts.slo_status import read_parquet_results

    settings = load_slo_settings(config)
    period_ms = max(duration_seconds(s.period) for s in settings.slos()) * 1000

    def build(results_dir: Path, now_ms: int) -> dict[str, Any]:
        return report_data(read_parquet_results(results_dir, now_ms - period_ms), settings, now_ms)

    return build


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
        register_control_loop,
        register_mirror,  # `mirror ...` and `tiers`
    ):
        register(app)
    register_dashboards(app, slo_report=_slo_report)  # the report's SLO section comes from alerts
    for entry_point in entry_points(group=COMMANDS_ENTRY_POINT_GROUP):
        try:
            entry_point.load()(app)
        except ImportError as exc:  # a broken plugin must not take the product's CLI down with it
            logging.getLogger(__name__).warning(
                "kafka-audit: commands %r not loaded: %s", entry_point.name, exc
            )


_register_package_commands()


def main() -> None:  # pragma: no cover - console script entry
    """Console script entry point."""
    app()
