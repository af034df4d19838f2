"""Settings precedence of the package commands: an option given, else the environment, else the default.

Each test replaces the component a command configures with a recorder and checks what reached it: the
environment variable when no option is given, the option when both are.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import alerts.cli
import control_loop.cli
import dashboards.cli
import predictor.cli
from kafka_plumbing.errors import KafkaAuditError, setting_and_env_name
from predictor.settings import RetrainSettings

STOP = "stopped by the test"


def _app(register: Any) -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """Test app."""

    register(app)
    return app


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("KAFKA_AUDIT_", "GRAFANA_")):
            monkeypatch.delenv(name)


def _run(register: Any, *args: str) -> Any:
    return CliRunner().invoke(_app(register), list(args))


# --------------------------------------------------------------------------------- predictor retrain
@pytest.fixture
def retrain_recorder(monkeypatch):
    got: dict[str, Any] = {}

    def run_retraining(registry, training_dir, base_paths, settings, *, base_model_dir=None):
        got.update(settings=settings, base_paths=list(base_paths))
        raise KafkaAuditError(STOP)

    monkeypatch.setattr("predictor.promotion.run_retraining", run_retraining)
    return got


def _retrain(tmp_path: Path, *options: str) -> Any:
    return _run(
        predictor.cli.register,
        "predictor",
        "retrain",
        "--registry",
        str(tmp_path / "models"),
        "--from-results",
        str(tmp_path / "training"),
        *options,
    )


def test_retrain_reads_the_environment_and_an_option_beats_it(tmp_path, monkeypatch, retrain_recorder):
    monkeypatch.setenv("KAFKA_AUDIT_RETRAIN_STEPS", "7")
    monkeypatch.setenv("KAFKA_AUDIT_RETRAIN_MARGIN", "0.01")
    result = _retrain(tmp_path)
    assert result.exit_code == 2 and STOP in result.output
    s = retrain_recorder["settings"]
    assert (s.steps, s.margin, s.min_windows) == (7, 0.01, 50)  # env, env, default
    assert retrain_recorder["base_paths"] == [predictor.SHARED_DATA]  # absolute: any working directory

    _retrain(tmp_path, "--steps", "9", "--min-windows", "60")
    s = retrain_recorder["settings"]
    assert (s.steps, s.margin, s.min_windows) == (9, 0.01, 60)  # option beats env; env kept


def test_retrain_names_a_bad_environment_value_by_its_variable(tmp_path, monkeypatch, retrain_recorder):
    monkeypatch.setenv("KAFKA_AUDIT_RETRAIN_MIN_WINDOWS", "2")
    result = _retrain(tmp_path)
    assert result.exit_code == 2 and not retrain_recorder
    assert "min_windows (KAFKA_AUDIT_RETRAIN_MIN_WINDOWS)" in " ".join(result.output.split())


def test_the_live_jobs_retrain_command_reaches_the_cli_unchanged(tmp_path, retrain_recorder):
    sent = RetrainSettings(min_windows=70, calibrated_mae=0.03, lr=0.004)
    assert sent.command_line() == ["--calibrated-mae", "0.03", "--lr", "0.004", "--min-windows", "70"]
    _retrain(tmp_path, *sent.command_line())
    assert retrain_recorder["settings"] == sent


def test_evaluate_defaults_to_the_package_data_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _run(predictor.cli.register, "predictor", "evaluate", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["model"] == "default" and out["split"].startswith(
        "auto: held-back rows of ['experiments.csv']"
    )
    assert out["mae_p_loss"] < 0.02 and out["coverage_90_p_loss"] >= 0.85


# ------------------------------------------------------------------------------------------- alerts
def test_alerts_rules_reads_the_environment_and_set_beats_it(monkeypatch):
    got = []
    monkeypatch.setattr("alerts.rules.rule_infos", lambda s: got.append(s) or [])
    monkeypatch.setenv("KAFKA_AUDIT_ALERTS_GAMMA_FOR_WINDOWS", "4")
    assert _run(alerts.cli.register, "alerts", "rules", "--json").exit_code == 0
    assert _run(alerts.cli.register, "alerts", "rules", "--json", "-S", "gamma_for_windows=6").exit_code == 0
    assert [s.gamma_for_windows for s in got] == [4, 6]


def test_alerts_test_fire_reads_the_environment_and_an_option_beats_it(monkeypatch):
    got = []
    monkeypatch.setattr("alerts.dispatch.sinks_from_settings", lambda s: got.append(s) or [])
    monkeypatch.setenv("KAFKA_AUDIT_ALERTS_WEBHOOK_URL", "http://env.example:8080/hook")
    monkeypatch.setenv("KAFKA_AUDIT_ALERTS_ALERTS_TOPIC", "env-alerts")
    assert _run(alerts.cli.register, "alerts", "test-fire").exit_code == 2  # no sink: the recorder has none
    url = "http://cli.example:8080/hook"
    assert _run(alerts.cli.register, "alerts", "test-fire", "--webhook-url", url).exit_code == 2
    assert [str(s.webhook_url) for s in got] == ["http://env.example:8080/hook", url]
    assert [s.alerts_topic for s in got] == ["env-alerts", "env-alerts"]


def test_alerts_evaluate_passes_the_environment_to_the_pipeline(tmp_path, monkeypatch):
    got = []

    class Pipeline:
        def __init__(self, settings, sinks=None):
            got.append(settings)
            raise KafkaAuditError(STOP)

    monkeypatch.setattr("alerts.batch_listener.AlertPipeline", Pipeline)
    monkeypatch.setenv("KAFKA_AUDIT_ALERTS_DRIFT_WINDOWS", "5")
    results = tmp_path / "results.jsonl"
    results.write_text("")
    assert _run(alerts.cli.register, "alerts", "evaluate", str(results)).exit_code == 2
    assert (
        _run(alerts.cli.register, "alerts", "evaluate", str(results), "-S", "drift_windows=8").exit_code == 2
    )
    assert [s.drift_windows for s in got] == [5, 8]


def test_alerts_tail_reads_the_environment_and_options_beat_it(monkeypatch):
    got = []
    monkeypatch.setattr(
        "kafka_plumbing.topics.read_to_end", lambda config, topic, **kw: got.append((config, topic)) or []
    )
    monkeypatch.setenv("KAFKA_AUDIT_ALERTS_BOOTSTRAP_SERVERS", "env-kafka:9092")
    monkeypatch.setenv("KAFKA_AUDIT_ALERTS_ALERTS_TOPIC", "env-alerts")
    assert _run(alerts.cli.register, "alerts", "tail", "--json").exit_code == 0
    options = ("-b", "cli-kafka:9092", "--alerts-topic", "cli-alerts", "--json")
    assert _run(alerts.cli.register, "alerts", "tail", *options).exit_code == 0
    assert [(c["bootstrap.servers"], t) for c, t in got] == [
        ("env-kafka:9092", "env-alerts"),
        ("cli-kafka:9092", "cli-alerts"),
    ]


# -------------------------------------------------------------------------------------------- control
@pytest.fixture
def control_topic_recorder(monkeypatch):
    got = []

    def read_control_topic(config, topic, timeout_s=30.0):
        got.append((config["bootstrap.servers"], topic))
        return {}, []

    monkeypatch.setattr("control_loop.topic.read_control_topic", read_control_topic)
    return got


def test_control_status_reads_the_environment_and_options_beat_it(monkeypatch, control_topic_recorder):
    monkeypatch.setenv("KAFKA_AUDIT_CONTROL_BOOTSTRAP_SERVERS", "env-kafka:9092")
    monkeypatch.setenv("KAFKA_AUDIT_CONTROL_CONTROL_TOPIC", "env-control")
    assert _run(control_loop.cli.register, "control", "status", "--json").exit_code == 0
    options = ("-b", "cli-kafka:9092", "--control-topic", "cli-control", "--json")
    assert _run(control_loop.cli.register, "control", "status", *options).exit_code == 0
    assert control_topic_recorder == [("env-kafka:9092", "env-control"), ("cli-kafka:9092", "cli-control")]


def test_control_set_reads_the_environment_and_options_beat_it(monkeypatch, control_topic_recorder):
    published = []

    class Publisher:
        def __init__(self, config, topic, timeout_ms):
            published.append((config["bootstrap.servers"], topic, timeout_ms))

        def publish(self, record):
            pass

        def close(self):
            pass

    monkeypatch.setattr("control_loop.publish.ControlPublisher", Publisher)
    monkeypatch.setenv("KAFKA_AUDIT_CONTROL_BOOTSTRAP_SERVERS", "env-kafka:9092")
    monkeypatch.setenv("KAFKA_AUDIT_CONTROL_PUBLISH_TIMEOUT_MS", "1234")
    set_acks = ("control", "set", "-g", "orders", "--acks", "1")
    assert _run(control_loop.cli.register, *set_acks).exit_code == 0
    assert _run(control_loop.cli.register, *set_acks, "-b", "cli-kafka:9092").exit_code == 0
    assert published == [
        ("env-kafka:9092", "__kafka_audit_control", 1234),
        ("cli-kafka:9092", "__kafka_audit_control", 1234),
    ]


def test_control_kill_finds_the_checkpoint_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_AUDIT_SPARK_CHECKPOINT_DIR", str(tmp_path / "env-checkpoint"))
    assert _run(control_loop.cli.register, "control", "kill").exit_code == 0
    assert (tmp_path / "env-checkpoint" / "control.kill").is_file()
    cli_dir = tmp_path / "cli-checkpoint"
    assert _run(control_loop.cli.register, "control", "kill", "--checkpoint-dir", str(cli_dir)).exit_code == 0
    assert (cli_dir / "control.kill").is_file()
    monkeypatch.setenv("KAFKA_AUDIT_CONTROL_KILL_FILE", str(tmp_path / "named.kill"))  # the setting wins
    assert _run(control_loop.cli.register, "control", "kill", "--checkpoint-dir", str(cli_dir)).exit_code == 0
    assert (tmp_path / "named.kill").is_file()


# ----------------------------------------------------------------------------------------- dashboards
def test_dashboards_push_reads_the_environment_and_options_beat_it(monkeypatch):
    got = []

    def push(url, token, dashboards, folder, timeout_s):
        got.append((url, token))
        return []

    monkeypatch.setattr("dashboards.push.push", push)
    monkeypatch.setenv("GRAFANA_URL", "http://env-grafana:3000")
    monkeypatch.setenv("GRAFANA_TOKEN", "env-token")
    assert _run(dashboards.cli.register, "dashboards", "push").exit_code == 0
    assert (
        _run(dashboards.cli.register, "dashboards", "push", "--url", "http://cli-grafana:3000").exit_code == 0
    )
    assert got == [("http://env-grafana:3000", "env-token"), ("http://cli-grafana:3000", "env-token")]


def test_report_reads_the_results_directory_from_the_environment(tmp_path, monkeypatch):
    got = []

    def write_report(results_dir, out, window, alerts_path, slo=None):
        got.append((results_dir, alerts_path))
        return 0, 0

    monkeypatch.setattr("dashboards.report.write_report", write_report)
    monkeypatch.setenv("KAFKA_AUDIT_SPARK_PARQUET_DIR", str(tmp_path / "env-results"))
    out = str(tmp_path / "r.html")
    assert _run(dashboards.cli.register, "report", "--out", out).exit_code == 0
    cli_dir = str(tmp_path / "cli-results")
    assert _run(dashboards.cli.register, "report", "--out", out, "--results-dir", cli_dir).exit_code == 0
    assert got == [
        (tmp_path / "env-results", tmp_path / "alerts.jsonl"),
        (tmp_path / "cli-results", tmp_path / "alerts.jsonl"),
    ]


# ------------------------------------------------------------------------------------ shared naming
def test_a_settings_error_names_the_setting_and_its_variable():
    name = setting_and_env_name("KAFKA_AUDIT_CONTROL_")
    assert name(("dwell_ms",)) == "dwell_ms (KAFKA_AUDIT_CONTROL_DWELL_MS)"
    assert name(()) == ""
