"""`kafka-audit alerts ...` commands (in-process webhook receiver; no external process)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kafka_audit.cli import app
from tests.integration.alertmanager import WebhookReceiver
from tests.unit.test_alert_engine import bad_gamma, window


@pytest.fixture(autouse=True)
def _no_alert_env(monkeypatch):
    for name in ("ALERTMANAGER_URL", "WEBHOOK_URL", "BOOTSTRAP_SERVERS"):
        monkeypatch.delenv(f"KAFKA_AUDIT_ALERTS_{name}", raising=False)


@pytest.mark.parametrize(
    "cmd", [["alerts"], ["alerts", "rules"], ["alerts", "test-fire"], ["alerts", "evaluate"]]
)
def test_help(cmd):
    result = CliRunner().invoke(app, [*cmd, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_rules_json_applies_overrides():
    result = CliRunner().invoke(app, ["alerts", "rules", "--json", "-S", "gamma_for_windows=3"])
    assert result.exit_code == 0, result.output
    rules = {r["alertname"]: r for r in json.loads(result.output)}
    assert list(rules) == [
        "KafkaAuditCompletenessBelowTarget",
        "KafkaAuditGammaBelowTarget",
        "KafkaAuditPredictionDrift",
        "KafkaAuditAuditLag",
        "KafkaAuditUnauditedProducers",
        "KafkaAuditUnauditedTraffic",
        "KafkaAuditUnaccountedMessages",
    ]
    assert rules["KafkaAuditGammaBelowTarget"]["fire_after"].startswith("3 bad")
    assert rules["KafkaAuditCompletenessBelowTarget"]["threshold"] == "99.9000%"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-S", "gamma_for_windows=0"], "KAFKA_AUDIT_ALERTS_GAMMA_FOR_WINDOWS"),
        (["-S", "nope=1"], "expected key=value with key one of"),
        (["-S", "gamma_for_windows"], "expected key=value"),
    ],
)
def test_bad_settings_exit_2_naming_the_key(args, message):
    result = CliRunner().invoke(app, ["alerts", "rules", *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_evaluate_replays_a_results_file(tmp_path):
    rows = [window(0), bad_gamma(1), bad_gamma(2), window(3), window(4)]
    for i, r in enumerate(rows):
        r["result_at_ms"] = r["window_end_ms"] + 1000 + i
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(app, ["alerts", "evaluate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.output.splitlines()]
    assert [(e["alertname"], e["status"]) for e in events] == [
        ("KafkaAuditGammaBelowTarget", "firing"),
        ("KafkaAuditGammaBelowTarget", "resolved"),
    ]
    assert events[0]["starts_at_ms"] == rows[2]["result_at_ms"]


def test_evaluate_bad_file_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("{not json\n")
    result = CliRunner().invoke(app, ["alerts", "evaluate", str(path)])
    assert result.exit_code == 2
    # rich folds the long temporary path anywhere (the xdist worker's directory makes it longer)
    assert "bad.jsonl:1:notJSON" in "".join(result.output.split())


def test_test_fire_sends_firing_then_resolved_to_the_webhook():
    with WebhookReceiver() as rx:
        result = CliRunner().invoke(app, ["alerts", "test-fire", "--webhook-url", rx.url])
    assert result.exit_code == 0, result.output
    assert [(a["alertname"], a["status"]) for a in rx.alerts()] == [
        ("KafkaAuditTestAlert", "firing"),
        ("KafkaAuditTestAlert", "resolved"),
    ]


def test_test_fire_without_sinks_or_with_a_dead_one_exits_2():
    result = CliRunner().invoke(app, ["alerts", "test-fire"])
    assert result.exit_code == 2
    assert "no sink configured" in result.output
    with WebhookReceiver() as rx:
        rx.fail_with = 500
        result = CliRunner().invoke(app, ["alerts", "test-fire", "--webhook-url", rx.url])
    assert result.exit_code == 2
    assert "FAILED" in result.output and "HTTP 500" in result.output
