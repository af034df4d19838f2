"""Settings precedence of the kafka_audit commands: command line > environment > config file > defaults.

Each command runs through ``CliRunner`` with the component it configures replaced by a stand-in that
captures the settings object it receives, so no Kafka or Spark is needed. An option not given must not
override the environment (issue 35): ``KAFKA_AUDIT_SPARK_GRACE_MS=30000 kafka-audit spark-job`` runs with
a 30 s grace.
"""

import os
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import audit_consumer.consumer
import audit_producer.load
import kafka_audit.assembly
import kafka_audit.up
from alerts.settings import AlertSettings
from audit_consumer.settings import AuditConsumerSettings
from audit_producer.settings import ProducerAuditSettings
from control_loop.settings import ControlSettings
from kafka_audit.assembly import build_audit_job
from kafka_audit.cli import app
from kafka_audit.up_settings import UpSettings
from kafka_plumbing.errors import KafkaAuditError
from spark_streaming.settings import SparkJobSettings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """No KAFKA_AUDIT_* variable of the machine running the tests; signal handlers restored after."""
    for name in list(os.environ):
        if name.startswith("KAFKA_AUDIT_"):
            monkeypatch.delenv(name)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, h in handlers.items():
        signal.signal(s, h)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


# ---------------------------------------------------------------------------------------------- spark-job
@pytest.fixture
def captured_job(monkeypatch):
    """Replace the job's assembly: capture its arguments, then fail the start (the command exits 2)."""
    seen: dict = {}

    class Job:
        stopped = False

        def start(self):
            raise KafkaAuditError("stand-in job: not started")

        def stop(self):
            Job.stopped = True

    def fake_build(settings, *, alerts, control, listeners=(), control_listeners=(), slo=None):
        seen.update(settings=settings, alerts=alerts, control=control, listeners=list(listeners), slo=slo)
        return SimpleNamespace(job=Job(), alerts=None, control=None)

    monkeypatch.setattr(kafka_audit.assembly, "build_audit_job", fake_build)
    seen["job_class"] = Job
    return seen


def test_spark_job_environment_reaches_the_job(monkeypatch, tmp_path, captured_job):
    monkeypatch.setenv("KAFKA_AUDIT_SPARK_GRACE_MS", "30000")
    monkeypatch.setenv("KAFKA_AUDIT_SPARK_MASTER", "local[1]")
    monkeypatch.setenv("KAFKA_AUDIT_SPARK_TRIGGER_MS", "1500")
    monkeypatch.setenv("KAFKA_AUDIT_SPARK_CHECKPOINT_DIR", str(tmp_path / "cp"))
    monkeypatch.setenv("KAFKA_AUDIT_SPARK_CLUSTERS", '["A", "B"]')
    monkeypatch.setenv("KAFKA_AUDIT_SPARK_BOOTSTRAP_SERVERS", "127.0.0.1:19")  # no local cluster needed
    monkeypatch.setenv("KAFKA_AUDIT_ALERTS_GAMMA_TARGET", "0.8")
    monkeypatch.setenv("KAFKA_AUDIT_CONTROL_MODE", "off")
    result = invoke("spark-job")
    assert result.exit_code == 2, result.output
    assert "stand-in job: not started" in result.output
    assert captured_job["job_class"].stopped  # a failed start stops the job
    s = captured_job["settings"]
    assert isinstance(s, SparkJobSettings)
    assert s.grace_ms == 30_000
    assert s.master == "local[1]"
    assert s.trigger_ms == 1_500
    assert s.checkpoint_dir == tmp_path / "cp"
    assert s.training_dir == tmp_path / "training"  # beside the checkpoint the environment named
    assert s.clusters == ["A", "B"]
    assert s.bootstrap_servers == "127.0.0.1:19"
    assert captured_job["alerts"].gamma_target == 0.8
    assert captured_job["control"].mode == "off"


def test_spark_job_command_line_beats_the_environment(monkeypatch, tmp_path, captured_job):
    monkeypatch.setenv("KAFKA_AUDIT_SPARK_GRACE_MS", "30000")
    monkeypatch.setenv("KAFKA_AUDIT_SPARK_MASTER", "local[1]")
    monkeypatch.setenv("KAFKA_AUDIT_SPARK_BOOTSTRAP_SERVERS", "127.0.0.1:19")
    monkeypatch.setenv("KAFKA_AUDIT_CONTROL_MODE", "advise")
    result = invoke(
        "spark-job",
        "--grace-ms", "45000",
        "--master", "local[4]",
        "-b", "127.0.0.1:29",
        "--checkpoint-dir", str(tmp_path / "c2"),
        "--cluster", "X",
        "--control", "apply",
        "--no-alerts",
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    s = captured_job["settings"]
    assert (s.grace_ms, s.master, s.bootstrap_servers) == (45_000, "local[4]", "127.0.0.1:29")
    assert s.checkpoint_dir == tmp_path / "c2" and s.clusters == ["X"]
    assert captured_job["alerts"] is None and captured_job["slo"] is None  # no SLO alerts without alerts
    assert captured_job["control"].mode == "apply"


def test_spark_job_defaults_come_from_the_settings_model(monkeypatch, captured_job):
    result = invoke("spark-job", "-b", "127.0.0.1:19")
    assert result.exit_code == 2, result.output
    s = captured_job["settings"]
    for field in ("grace_ms", "master", "trigger_ms", "watermark_delay_ms", "checkpoint_dir", "metrics_port"):
        assert getattr(s, field) == SparkJobSettings.model_fields[field].default, field
    assert s.clusters == ["local"]
    assert [slo.name for slo in captured_job["slo"].slos()] == ["completeness"]  # evaluated in the job


def test_spark_job_invalid_environment_is_a_clear_error(monkeypatch, captured_job):
    monkeypatch.setenv("KAFKA_AUDIT_SPARK_GRACE_MS", "-1")
    result = invoke("spark-job", "-b", "127.0.0.1:19")
    assert result.exit_code == 2
    assert "KAFKA_AUDIT_SPARK_GRACE_MS" in result.output
    assert "settings" not in captured_job  # refused before anything is built


def test_spark_job_help_states_the_models_defaults():
    result = CliRunner().invoke(app, ["spark-job", "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
    assert result.exit_code == 0
    assert f"default {SparkJobSettings.model_fields['grace_ms'].default}; env KAFKA_AUDIT_SPARK_GRACE_MS" in (
        result.output
    )


# ------------------------------------------------------------------------------------ audit-consumer
@pytest.fixture
def captured_consumer(monkeypatch):
    """Replace the audit consumer: capture its settings; ``run`` returns at once."""
    seen: dict = {}

    class Consumer:
        def __init__(self, settings):
            seen["settings"] = settings
            self.stats = SimpleNamespace(messages=0, transactions=0, snapshots=0, dead_letters=0)

        def run(self, stop):
            seen["ran"] = True

    monkeypatch.setattr(audit_consumer.consumer, "AuditConsumer", Consumer)
    return seen


def test_audit_consumer_environment_reaches_the_consumer(monkeypatch, captured_consumer):
    monkeypatch.setenv("KAFKA_AUDIT_CONSUMER_GRACE_MS", "12345")
    monkeypatch.setenv("KAFKA_AUDIT_CONSUMER_WINDOW_MS", "20000")
    monkeypatch.setenv("KAFKA_AUDIT_CONSUMER_CLUSTER", "east")
    monkeypatch.setenv("KAFKA_AUDIT_CONSUMER_COMMIT_INTERVAL_MS", "250")
    monkeypatch.setenv("KAFKA_AUDIT_CONSUMER_TOPICS", '["orders", "payments"]')  # no --topics needed
    monkeypatch.setenv("KAFKA_AUDIT_CONSUMER_BOOTSTRAP_SERVERS", "127.0.0.1:19")  # no local cluster needed
    result = invoke("audit-consumer")
    assert result.exit_code == 0, result.output
    s = captured_consumer["settings"]
    assert isinstance(s, AuditConsumerSettings) and captured_consumer["ran"]
    assert (s.grace_ms, s.window_ms, s.cluster, s.commit_interval_ms) == (12_345, 20_000, "east", 250)
    assert s.topics == ["orders", "payments"]
    assert s.bootstrap_servers == "127.0.0.1:19"


def test_audit_consumer_command_line_beats_the_environment(monkeypatch, captured_consumer):
    monkeypatch.setenv("KAFKA_AUDIT_CONSUMER_GRACE_MS", "12345")
    monkeypatch.setenv("KAFKA_AUDIT_CONSUMER_TOPICS", '["orders"]')
    monkeypatch.setenv("KAFKA_AUDIT_CONSUMER_BOOTSTRAP_SERVERS", "127.0.0.1:19")
    result = invoke(
        "audit-consumer", "--grace-ms", "1000", "-t", "clicks", "-b", "127.0.0.1:29", "--cluster", "west"
    )
    assert result.exit_code == 0, result.output
    s = captured_consumer["settings"]
    assert (s.grace_ms, s.topics, s.bootstrap_servers, s.cluster) == (
        1_000,
        ["clicks"],
        "127.0.0.1:29",
        "west",
    )
    assert s.window_ms == AuditConsumerSettings.model_fields["window_ms"].default


def test_audit_consumer_without_topics_anywhere_is_refused(monkeypatch, captured_consumer):
    result = invoke("audit-consumer", "-b", "127.0.0.1:19")
    assert result.exit_code != 0
    assert "--topics" in result.output and "settings" not in captured_consumer


# ---------------------------------------------------------------------------------------------- produce
@pytest.fixture
def captured_load(monkeypatch):
    """Replace the load: capture the producer's audit settings; produce nothing."""
    seen: dict = {}

    def fake_run_load(config, topic, profile, **kwargs):
        seen.update(config=config, audit=kwargs["audit"])
        return SimpleNamespace(
            produced=0,
            seconds=1.0,
            rate=0.0,
            producer_id="p",
            snapshots=0,
            not_handed_over=0,
            config_events=[],
        )

    monkeypatch.setattr(audit_producer.load, "run_load", fake_run_load)
    return seen


def test_produce_environment_reaches_the_producer(monkeypatch, captured_load):
    monkeypatch.setenv("KAFKA_AUDIT_PRODUCER_WINDOW_MS", "15000")
    monkeypatch.setenv("KAFKA_AUDIT_PRODUCER_AUTOTUNE", "true")
    monkeypatch.setenv("KAFKA_AUDIT_PRODUCER_GROUP", "checkout")
    result = invoke("produce", "--topic", "t", "--count", "1", "-b", "127.0.0.1:19")
    assert result.exit_code == 0, result.output
    audit = captured_load["audit"]
    assert isinstance(audit, ProducerAuditSettings)
    assert (audit.window_ms, audit.autotune, audit.group) == (15_000, True, "checkout")
    assert audit.delivery_reports == "all"  # every report: the offsets make windows final by proof (issue 37)


def test_produce_command_line_beats_the_environment(monkeypatch, captured_load):
    monkeypatch.setenv("KAFKA_AUDIT_PRODUCER_WINDOW_MS", "15000")
    monkeypatch.setenv("KAFKA_AUDIT_PRODUCER_AUTOTUNE", "true")
    monkeypatch.setenv("KAFKA_AUDIT_PRODUCER_DELIVERY_REPORTS", "errors")
    result = invoke(
        "produce",
        "--topic",
        "t",
        "--count",
        "1",
        "-b",
        "127.0.0.1:19",
        "--window-ms",
        "5000",
        "--no-autotune",
    )
    assert result.exit_code == 0, result.output
    audit = captured_load["audit"]
    assert (audit.window_ms, audit.autotune) == (5_000, False)
    assert audit.delivery_reports == "errors"  # the environment beats the default


# ---------------------------------------------------------------------------------------------- up
@pytest.fixture
def captured_up(monkeypatch):
    """Replace what ``up`` runs: capture its settings, then fail the start (the command exits 2)."""
    import threading

    seen: dict = {}

    class Platform:
        def __init__(self, settings, console, json_out=None):
            seen["settings"] = settings
            self.stop_event = threading.Event()
            self.job = None
            self.rows: dict = {}
            self.table = None

        def start(self):
            raise KafkaAuditError("stand-in platform: not started")

        def stop(self):
            seen["stopped"] = True

    monkeypatch.setattr(kafka_audit.up, "Platform", Platform)
    return seen


def test_up_environment_beats_the_config_file_and_the_command_line_beats_both(
    monkeypatch, tmp_path, captured_up
):
    config = tmp_path / "up.toml"
    config.write_text('window_ms = 9000\nmaster = "local[3]"\nrate = 50.0\n')
    monkeypatch.setenv("KAFKA_AUDIT_UP_WINDOW_MS", "7000")
    monkeypatch.setenv("KAFKA_AUDIT_UP_MASTER", "local[5]")
    monkeypatch.setenv("KAFKA_AUDIT_UP_DATA_DIR", str(tmp_path / "state"))
    result = invoke("up", "--config", str(config), "--master", "local[6]")
    assert result.exit_code == 2, result.output
    assert captured_up["stopped"]
    s = captured_up["settings"]
    assert isinstance(s, UpSettings)
    assert s.window_ms == 7_000  # environment over the file
    assert s.master == "local[6]"  # command line over the environment
    assert s.rate == 50.0  # the file over the defaults
    assert s.data_dir == tmp_path / "state"
    assert s.spark_grace_ms == UpSettings.model_fields["spark_grace_ms"].default


# ---------------------------------------------------------------------------------------------- the assembly
def test_build_audit_job_wires_the_alert_pipeline_and_the_control_loop(tmp_path):
    def results(batch_id, rows):
        pass

    decisions: list = []
    settings = SparkJobSettings(bootstrap_servers="127.0.0.1:9", checkpoint_dir=tmp_path / "c")
    built = build_audit_job(
        settings,
        alerts=AlertSettings(),
        control=ControlSettings(mode="advise"),
        listeners=[results],
        control_listeners=[decisions.append],
    )
    job = built.job
    try:
        assert job.s is settings
        assert job.listeners == [results, built.alerts.on_batch, built.control.on_batch]
        assert job.control_listeners == [built.alerts.on_control, decisions.append]
        assert built.alerts.close in job.closers and built.control.close in job.closers
        assert built.alerts.settings.grace_ms == settings.grace_ms  # the pipeline follows the job
    finally:
        job.stop()  # closes the alert sinks


def test_build_audit_job_without_alerts_or_control_is_the_bare_job(tmp_path):
    settings = SparkJobSettings(bootstrap_servers="127.0.0.1:9", checkpoint_dir=tmp_path / "c")
    built = build_audit_job(settings, alerts=None, control=None)
    assert (built.alerts, built.control) == (None, None)
    assert built.job.listeners == [] and built.job.control_listeners == [] and built.job.closers == []


def test_up_builds_its_job_from_its_own_settings(tmp_path):
    from rich.console import Console

    up = UpSettings(data_dir=tmp_path, spark_grace_ms=40_000, consumer_grace_ms=10_000, master="local[3]")
    s = kafka_audit.up.Platform(up, Console()).job_settings("127.0.0.1:9")
    assert (s.bootstrap_servers, s.master, s.grace_ms, s.final_settle_ms) == (
        "127.0.0.1:9",
        "local[3]",
        40_000,
        30_000,
    )
    assert s.checkpoint_dir == Path(tmp_path) / "spark" / "checkpoint"
