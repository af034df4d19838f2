"""Broker metrics (issue 16): JMX exporter rules, the agent on the local brokers, scrape configs, dashboard.

Without a broker: the rules are applied here to MBean names the way the exporter applies them, the
brokers' command lines are built with a stand-in for ``subprocess.Popen``, and ``promtool check config``
judges the scrape configurations. tests/integration/test_broker_metrics.py checks the same against a
live 3-broker cluster scraped by Prometheus.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from dashboards.brokers import (
    LOSS_BY_LEADER_EXPR,
    LOSS_BY_LEADER_METRIC,
    LOSS_BY_LEADER_TITLE,
    UID,
    broker_dashboard,
)
from dashboards.build import dashboard_json, dashboards, iter_queries
from kafka_audit.cli import app
from kafka_plumbing import jmx_exporter
from kafka_plumbing import local_cluster as local_cluster_module
from kafka_plumbing.jmx_exporter import BROKER_METRICS, rules_file, scrape_config, write_scrape_config
from kafka_plumbing.local_cluster import KafkaCluster

REPO = Path(__file__).resolve().parents[2]
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) absent")

# MBean attribute -> (metric name, labels) the exporter must produce: what the issue lists, by the
# JMX exporter's bean string format ``domain<key=value, ...><>attribute``.
SAMPLES = {
    "kafka.server<type=BrokerTopicMetrics, name=BytesInPerSec><>Count": (
        "kafka_server_brokertopicmetrics_bytesin_total",
        {},
    ),
    "kafka.server<type=BrokerTopicMetrics, name=BytesInPerSec, topic=audit.weblog><>Count": (
        "kafka_server_brokertopicmetrics_bytesin_total",
        {"topic": "audit.weblog"},
    ),
    "kafka.server<type=BrokerTopicMetrics, name=BytesOutPerSec><>Count": (
        "kafka_server_brokertopicmetrics_bytesout_total",
        {},
    ),
    "kafka.server<type=BrokerTopicMetrics, name=MessagesInPerSec, topic=t><>Count": (
        "kafka_server_brokertopicmetrics_messagesin_total",
        {"topic": "t"},
    ),
    "kafka.server<type=BrokerTopicMetrics, name=FailedProduceRequestsPerSec><>Count": (
        "kafka_server_brokertopicmetrics_failedproducerequests_total",
        {},
    ),
    "kafka.server<type=BrokerTopicMetrics, name=FailedFetchRequestsPerSec><>Count": (
        "kafka_server_brokertopicmetrics_failedfetchrequests_total",
        {},
    ),
    "kafka.network<type=RequestMetrics, name=TotalTimeMs, request=Produce><>99thPercentile": (
        "kafka_network_requestmetrics_totaltimems",
        {"request": "Produce", "quantile": "0.99"},
    ),
    "kafka.network<type=RequestMetrics, name=TotalTimeMs, request=FetchConsumer><>999thPercentile": (
        "kafka_network_requestmetrics_totaltimems",
        {"request": "FetchConsumer", "quantile": "0.999"},
    ),
    "kafka.network<type=RequestMetrics, name=RequestQueueTimeMs, request=Produce><>99thPercentile": (
        "kafka_network_requestmetrics_requestqueuetimems",
        {"request": "Produce", "quantile": "0.99"},
    ),
    "kafka.network<type=RequestMetrics, name=TotalTimeMs, request=Produce><>Count": (
        "kafka_network_requestmetrics_requests_total",
        {"request": "Produce"},
    ),
    "kafka.network<type=RequestMetrics, name=ErrorsPerSec, request=Produce, error=CORRUPT_MESSAGE><>Count": (
        "kafka_network_requestmetrics_errors_total",
        {"request": "Produce", "error": "CORRUPT_MESSAGE"},
    ),
    "kafka.server<type=ReplicaManager, name=UnderReplicatedPartitions><>Value": (
        "kafka_server_replicamanager_underreplicatedpartitions",
        {},
    ),
    "kafka.server<type=ReplicaManager, name=LeaderCount><>Value": (
        "kafka_server_replicamanager_leadercount",
        {},
    ),
    "kafka.server<type=ReplicaManager, name=PartitionCount><>Value": (
        "kafka_server_replicamanager_partitioncount",
        {},
    ),
    "kafka.server<type=ReplicaManager, name=IsrShrinksPerSec><>Count": (
        "kafka_server_replicamanager_isrshrinks_total",
        {},
    ),
    "kafka.server<type=ReplicaManager, name=IsrExpandsPerSec><>Count": (
        "kafka_server_replicamanager_isrexpands_total",
        {},
    ),
    "kafka.controller<type=KafkaController, name=OfflinePartitionsCount><>Value": (
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        {},
    ),
    "kafka.controller<type=ControllerStats, name=LeaderElectionRateAndTimeMs><>Count": (
        "kafka_controller_controllerstats_leaderelections_total",
        {},
    ),
    "kafka.controller<type=ControllerStats, name=UncleanLeaderElectionsPerSec><>Count": (
        "kafka_controller_controllerstats_uncleanleaderelections_total",
        {},
    ),
    "kafka.controller<type=ControllerStats, name=ElectionFromEligibleLeaderReplicasPerSec><>Count": (
        "kafka_controller_controllerstats_electionfromeligibleleaderreplicas_total",
        {},
    ),
    "kafka.network<type=SocketServer, name=NetworkProcessorAvgIdlePercent><>Value": (
        "kafka_network_socketserver_networkprocessoravgidlepercent",
        {},
    ),
    "kafka.server<type=KafkaRequestHandlerPool, name=RequestHandlerAvgIdlePercent><>OneMinuteRate": (
        "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
        {},
    ),
}
# The agent's default JVM / process collectors (not from the rules).
JVM_METRICS = {
    "jvm_memory_used_bytes",
    "jvm_memory_max_bytes",
    "jvm_gc_collection_seconds_count",
    "jvm_gc_collection_seconds_sum",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
}
METRIC = re.compile(r"\b((?:kafka_(?:server|network|controller)|jvm|process|kafka_audit)_\w+)")


@pytest.fixture(scope="module")
def rules() -> dict:
    return yaml.safe_load(rules_file().read_text())


def apply_rules(rules: dict, bean: str) -> tuple[str, dict[str, str]] | None:
    """Name and labels the JMX exporter gives ``bean``: the first rule whose pattern matches, as it does."""
    for rule in rules["rules"]:
        match = re.match(f"^.*(?:{rule['pattern']}).*$", bean)
        if match is None:
            continue

        def fill(template: str, match: re.Match = match) -> str:
            return re.sub(r"\$(\d+)", lambda m: match.group(int(m.group(1))), template)

        name = fill(rule["name"])
        labels = {fill(k): fill(v) for k, v in (rule.get("labels") or {}).items()}
        if rules.get("lowercaseOutputName"):
            name = name.lower()
        if rules.get("lowercaseOutputLabelNames"):
            labels = {k.lower(): v for k, v in labels.items()}
        return name, labels
    return None


def included(rules: dict, bean: str) -> bool:
    """Whether ``includeObjectNames`` (JMX ObjectName patterns) selects the MBean of ``bean``."""
    domain, props = re.match(r"^([^<]+)<([^>]*)>", bean).groups()
    have = dict(p.split("=", 1) for p in props.split(", "))
    for pattern in rules["includeObjectNames"]:
        pdomain, plist = pattern.split(":", 1)
        wanted = [p for p in plist.split(",") if p != "*"]
        want = dict(p.split("=", 1) for p in wanted)
        if pdomain != domain or any(have.get(k) != v for k, v in want.items()):
            continue
        if plist.endswith(",*") or set(have) == set(want):
            return True
    return False


# ------------------------------------------------------------------------------------------ rules
def test_rules_name_every_mbean_of_the_issue(rules):
    assert rules["lowercaseOutputName"] is True
    for bean, expected in SAMPLES.items():
        assert included(rules, bean), f"includeObjectNames leaves out {bean}"
        assert apply_rules(rules, bean) == expected, bean


def test_rules_leave_out_what_is_not_asked_for(rules):
    # Other request types and attributes than the percentiles and the count are not exported.
    assert not included(
        rules, "kafka.network<type=RequestMetrics, name=TotalTimeMs, request=Metadata><>Count"
    )
    assert (
        apply_rules(rules, "kafka.server<type=BrokerTopicMetrics, name=BytesInPerSec><>OneMinuteRate") is None
    )
    assert apply_rules(rules, "kafka.server<type=app-info, id=1><>version") is None


def test_broker_metrics_contract_is_what_the_rules_and_collectors_export(rules):
    from_rules = {name for name, _ in SAMPLES.values()}
    assert from_rules - BROKER_METRICS == {
        "kafka_controller_controllerstats_leaderelections_total"
    }  # ZK only
    assert JVM_METRICS <= BROKER_METRICS
    # Every kafka_* name of the contract is something a rule can produce (its name template matches).
    templates = [
        re.compile("^" + re.sub(r"\\\$\d+", r"\\w+", re.escape(r["name"].lower())) + "$")
        for r in rules["rules"]
    ]
    for name in BROKER_METRICS - JVM_METRICS:
        assert any(t.match(name) for t in templates), name


def test_the_rules_file_ships_in_the_package():
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'kafka_plumbing = \[[^\]]*"\*\.yaml"', pyproject)
    assert rules_file() == REPO / "kafka_plumbing" / "jmx_exporter.yaml"


def test_agent_jar_is_fetched_by_bootstrap_and_the_image():
    pom = (REPO / "jvm/pom.xml").read_text()
    assert "<id>jmx-exporter</id>" in pom and "<artifactId>jmx_prometheus_javaagent</artifactId>" in pom
    assert "<jmx.exporter.version>1.0.1</jmx.exporter.version>" in pom
    loop = re.search(r"for profile in ([\w -]+); do", (REPO / "scripts/bootstrap.sh").read_text())
    assert loop is not None and "jmx-exporter" in loop.group(1).split()
    assert "for profile in kafka spark jmx-exporter; do" in (REPO / "deploy/Dockerfile").read_text()


def test_agent_jar_lookup(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_AUDIT_JARS_JMX_EXPORTER", str(tmp_path))
    assert jmx_exporter.agent_jar() is None  # no jars: bootstrap not run
    (tmp_path / "jmx_prometheus_javaagent-1.0.1.jar").write_bytes(b"PK")
    assert jmx_exporter.agent_jar() == tmp_path / "jmx_prometheus_javaagent-1.0.1.jar"
    assert jmx_exporter.javaagent_option(tmp_path / "a.jar", 9404) == (
        f"-javaagent:{tmp_path / 'a.jar'}=127.0.0.1:9404:{rules_file()}"
    )


# ------------------------------------------------------------------------------------------ local cluster
class FakePopen:
    """Records the command line instead of starting a JVM."""

    started: list[list[str]] = []  # noqa: RUF012 - shared on purpose: the test reads it

    def __init__(self, cmd, **kwargs):
        FakePopen.started.append(list(cmd))
        self.pid = 10_000_000 + len(FakePopen.started)  # beyond pid_max: never a live process


@pytest.fixture
def fake_launch(monkeypatch):
    FakePopen.started = []
    monkeypatch.setattr(local_cluster_module.subprocess, "Popen", FakePopen)
    return FakePopen.started


def test_three_brokers_each_get_the_agent_on_their_own_port(tmp_path, monkeypatch, fake_launch):
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "jmx_prometheus_javaagent-1.0.1.jar").write_bytes(b"PK")
    monkeypatch.setenv("KAFKA_AUDIT_JARS_JMX_EXPORTER", str(jars))
    cluster = KafkaCluster.create(tmp_path / "k", brokers=3, base_port=40000)
    assert [n.metrics_port for n in cluster.nodes] == [40009, 40010, 40011]  # base + 3n + i
    agent = jmx_exporter.agent_jar()
    for node in cluster.nodes:
        (cluster.data_dir / f"node-{node.node_id}").mkdir(parents=True)
        cluster._launch(node, agent)
    for node, cmd in zip(cluster.nodes, fake_launch, strict=True):
        option = f"-javaagent:{agent}=127.0.0.1:{node.metrics_port}:{rules_file()}"
        assert option in cmd and cmd.index(option) < cmd.index("-cp") < cmd.index("kafka.Kafka")
        assert node.metrics_enabled
    assert cluster.metrics_targets == {1: "127.0.0.1:40009", 2: "127.0.0.1:40010", 3: "127.0.0.1:40011"}
    assert [row["metrics"] for row in cluster.status()] == list(cluster.metrics_targets.values())
    # free ports when no base port is given: all distinct
    planned = KafkaCluster.create(tmp_path / "free", brokers=3)
    ports = [p for n in planned.nodes for p in (n.broker_port, n.controller_port, n.metrics_port)]
    assert len(set(ports)) == 9


def test_without_the_jar_brokers_start_without_agent_and_status_says_so(
    tmp_path, monkeypatch, fake_launch, caplog
):
    monkeypatch.setenv("KAFKA_AUDIT_JARS_JMX_EXPORTER", str(tmp_path / "none"))
    cluster = KafkaCluster.create(tmp_path / "k", brokers=1)
    (cluster.data_dir / "node-1").mkdir(parents=True)
    with caplog.at_level(logging.WARNING):
        cluster._launch(cluster.nodes[0], cluster._agent_jar())
    assert not any(a.startswith("-javaagent") for a in fake_launch[0])
    assert "make bootstrap" in caplog.text
    assert cluster.status()[0]["metrics"] == "off (no agent jar: make bootstrap)"
    assert cluster.metrics_targets == {}
    off = KafkaCluster.create(tmp_path / "off", brokers=1, metrics=False)
    assert off._agent_jar() is None and off.status()[0]["metrics"] == "off (disabled)"


def test_state_round_trip_and_older_state(tmp_path):
    cluster = KafkaCluster.create(tmp_path, brokers=3, base_port=41000, metrics=False)
    cluster.nodes[1].metrics_enabled = True
    cluster._save()
    loaded = KafkaCluster.load(tmp_path)
    assert loaded.nodes == cluster.nodes and loaded.metrics is False
    # cluster.json written before the exporter (no metrics keys) and by a newer version (unknown keys)
    data = json.loads((tmp_path / "cluster.json").read_text())
    for node in data["nodes"]:
        del node["metrics_port"], node["metrics_enabled"]
        node["from_the_future"] = 1
    del data["metrics"]
    (tmp_path / "cluster.json").write_text(json.dumps(data))
    old = KafkaCluster.load(tmp_path)
    assert old.metrics is True and all(n.metrics_port is None for n in old.nodes)


def test_kafka_status_lists_the_exporters(tmp_path, monkeypatch, fake_launch):
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "jmx_prometheus_javaagent-1.0.1.jar").write_bytes(b"PK")
    monkeypatch.setenv("KAFKA_AUDIT_JARS_JMX_EXPORTER", str(jars))
    cluster = KafkaCluster.create(tmp_path / "k", brokers=1, base_port=42000)
    (cluster.data_dir / "node-1").mkdir(parents=True)
    cluster._launch(cluster.nodes[0], jmx_exporter.agent_jar())
    cluster._save()
    cluster.write_prometheus_config()
    result = CliRunner().invoke(app, ["kafka", "status", "--data-dir", str(cluster.data_dir)])
    assert result.exit_code == 1  # nothing runs (a fake PID)
    assert "metrics" in result.output and "127.0.0.1:42003" in result.output
    assert f"Prometheus scrape config: {cluster.data_dir / 'prometheus.yml'}" in result.output.replace(
        "\n", ""
    )


# ------------------------------------------------------------------------------------------ scrape configs
def test_scrape_config_labels_each_broker():
    config = scrape_config({2: "127.0.0.1:9502", 1: "127.0.0.1:9501"}, scrape_interval="1s")
    [job] = config["scrape_configs"]
    assert job["job_name"] == "kafka-brokers"
    assert job["static_configs"] == [
        {"targets": ["127.0.0.1:9501"], "labels": {"broker": "1"}},
        {"targets": ["127.0.0.1:9502"], "labels": {"broker": "2"}},
    ]
    assert config["global"] == {"scrape_interval": "1s", "evaluation_interval": "1s"}


@needs_promtool
def test_promtool_accepts_the_local_cluster_scrape_config(tmp_path):
    cluster = KafkaCluster.create(tmp_path / "k", brokers=3, base_port=43000)
    for node in cluster.nodes:
        node.metrics_enabled = True
    path = cluster.write_prometheus_config()
    assert path == tmp_path / "k" / "prometheus.yml"
    config = yaml.safe_load(path.read_text())
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert jobs["kafka-audit"]["static_configs"] == [{"targets": ["127.0.0.1:9464"]}]
    assert [g["labels"]["broker"] for g in jobs["kafka-brokers"]["static_configs"]] == ["1", "2", "3"]
    done = subprocess.run(
        [PROMTOOL, "check", "config", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    bare = write_scrape_config(tmp_path / "bare.yml", {1: "127.0.0.1:1"}, rule_files=["rules.yml"])
    shutil.copy(REPO / "dashboards/prometheus-rules.yml", tmp_path / "rules.yml")
    done = subprocess.run(
        [PROMTOOL, "check", "config", str(bare)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_promtool_accepts_the_shipped_scrape_config(tmp_path):
    shutil.copy(REPO / "deploy/prometheus/prometheus.yml", tmp_path)
    shutil.copy(REPO / "dashboards/prometheus-rules.yml", tmp_path / "kafka-audit-rules.yml")
    done = subprocess.run(
        [PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_brokers_run_the_agent_that_prometheus_scrapes():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())  # merge keys resolved
    prometheus = yaml.safe_load((REPO / "deploy/prometheus/prometheus.yml").read_text())
    [job] = [j for j in prometheus["scrape_configs"] if j["job_name"] == "kafka-brokers"]
    targets = {g["targets"][0]: g["labels"]["broker"] for g in job["static_configs"]}
    brokers = {n: s for n, s in compose["services"].items() if re.fullmatch(r"kafka-\d", n)}
    assert targets == {f"{n}:9404": s["environment"]["KAFKA_NODE_ID"].__str__() for n, s in brokers.items()}
    for name, service in brokers.items():
        command = " ".join(service["command"])
        assert "-javaagent:/opt/jmx-exporter/agent/jmx_prometheus_javaagent.jar=9404:" in command, name
        assert "KAFKA_OPTS" not in service["environment"]  # the healthcheck's CLI tool must not load it
        assert (
            "./kafka_plumbing/jmx_exporter.yaml:/opt/jmx-exporter/jmx_exporter.yaml:ro" in service["volumes"]
        )
        assert service["depends_on"]["jmx-exporter-agent"]["condition"] == "service_completed_successfully"
    assert "deploy/prometheus/prometheus.yml" in " ".join(compose["services"]["prometheus"]["volumes"])


# ------------------------------------------------------------------------------------------ dashboard
@pytest.fixture(scope="module")
def model() -> dict:
    return dashboards()[UID]


def test_brokers_dashboard_is_registered_and_titled(model):
    assert model["title"] == "Kafka brokers" and model == dashboard_json(broker_dashboard())


def test_every_query_is_per_broker_and_uses_the_exporters_metrics(model):
    queries = [q for q in iter_queries(model) if not q.annotation]
    assert len(queries) >= 15
    used = set()
    for q in queries:
        names = set(METRIC.findall(q.expr))
        allowed = BROKER_METRICS | {LOSS_BY_LEADER_METRIC}  # the audit's own: kafka-audit's exporter
        assert names and names <= allowed, f"{q.panel}: {names - allowed}"
        assert 'broker=~"$broker"' in q.expr and "by (broker" in q.expr, q
        used |= names
    # what the issue asks for, per broker
    for needed in (
        "kafka_server_brokertopicmetrics_bytesin_total",
        "kafka_server_brokertopicmetrics_bytesout_total",
        "kafka_network_requestmetrics_totaltimems",
        "kafka_network_requestmetrics_requestqueuetimems",
        "kafka_server_brokertopicmetrics_failedproducerequests_total",
        "kafka_server_brokertopicmetrics_failedfetchrequests_total",
        "kafka_server_replicamanager_underreplicatedpartitions",
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        "kafka_server_replicamanager_isrshrinks_total",
        "kafka_server_replicamanager_isrexpands_total",
        "kafka_controller_controllerstats_uncleanleaderelections_total",
        "kafka_network_socketserver_networkprocessoravgidlepercent",
        "process_cpu_seconds_total",
        "jvm_memory_used_bytes",
    ):
        assert needed in used, needed
    exprs = " ".join(q.expr for q in queries)
    assert (
        'request=~"Produce", quantile="0.99"' in exprs
        and 'request=~"FetchConsumer", quantile="0.99"' in exprs
    )


def test_one_time_axis_broker_variable_and_alert_annotation(model):
    panels = [p for p in model["panels"] if p["type"] != "row"]
    assert {p["type"] for p in panels} == {"timeseries"}
    assert {p["gridPos"]["w"] for p in panels} == {12}
    assert {p["fieldConfig"]["defaults"]["custom"]["axisWidth"] for p in panels} == {64}
    assert model["graphTooltip"] == 2  # shared crosshair and tooltip
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert all("{{broker}}" in t["legendFormat"] for t in panel["targets"]), panel["title"]
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert set(variables) == {"datasource", "broker"}
    broker = variables["broker"]
    assert broker["allValue"] == ".+" and broker["multi"] and broker["includeAll"]
    assert set(METRIC.findall(broker["query"])) <= BROKER_METRICS
    [annotation] = model["annotations"]["list"]
    assert annotation["expr"] == "kafka_audit_alerts_firing == 1"
    assert annotation["titleFormat"] == "{{alertname}}"


def test_loss_per_leader_broker_panel_is_first_and_queries_the_job_metric(model):
    """Issue 16 item 2: the audit's loss per leader broker, first panel, on the brokers' time axis."""
    panels = [p for p in model["panels"] if p["type"] != "row"]
    first = panels[0]
    assert first["title"] == LOSS_BY_LEADER_TITLE
    [target] = first["targets"]
    assert target["expr"] == LOSS_BY_LEADER_EXPR
    assert LOSS_BY_LEADER_EXPR == (
        'sum by (broker) (increase(kafka_audit_window_lost_messages_by_leader_total{broker=~"$broker"}[5m]))'
    )
    assert first["gridPos"]["w"] == panels[1]["gridPos"]["w"]
    assert "TODO(lead, issue 16 item 2" not in (REPO / "dashboards/brokers.py").read_text()
    # The Spark job exports it with a broker label that is the leader's node.id, as the target label.
    from audit_record import window_result
    from spark_streaming.metrics import ResultMetrics

    metrics = ResultMetrics()
    row = window_result.blank(
        topic="t",
        window_start_ms=0,
        window_end_ms=5_000,
        tier="cluster:a",
        state="final",
        sent=10,
        unique=7,
        duplicated=0,
        partitions=[
            window_result.partition_entry(0, leader=2, leaders=[2], sent=5, unique=2, lost=3, failed=3),
            window_result.partition_entry(1, leader=1, leaders=[1], sent=5, unique=5, lost=0),
        ],
    )
    metrics.observe([row], [], [])
    lossy = {"topic": "t", "tier": "cluster:a", "broker": "2"}
    assert metrics.registry.get_sample_value(LOSS_BY_LEADER_METRIC, lossy) == 3
    zero = {"topic": "t", "tier": "cluster:a", "broker": "1"}  # a leader without loss: its series at 0
    assert metrics.registry.get_sample_value(LOSS_BY_LEADER_METRIC, zero) == 0


def test_a_fixed_heap_is_committed_at_start_and_kept_in_the_state(tmp_path, monkeypatch, fake_launch):
    monkeypatch.setenv("KAFKA_AUDIT_JARS_JMX_EXPORTER", str(tmp_path / "none"))
    growing = KafkaCluster.create(tmp_path / "g", brokers=1, heap_mb=512)
    fixed = KafkaCluster.create(tmp_path / "f", brokers=1, heap_mb=512, heap_fixed=True)
    for cluster in (growing, fixed):
        (cluster.data_dir / "node-1").mkdir(parents=True)
        cluster._launch(cluster.nodes[0], None)
    grows, kept = fake_launch
    assert "-Xmx512m" in grows and "-Xms256m" in grows and "-XX:+AlwaysPreTouch" not in grows
    assert "-Xmx512m" in kept and "-Xms512m" in kept and "-XX:+AlwaysPreTouch" in kept
    fixed._save()
    assert KafkaCluster.load(fixed.data_dir).heap_fixed is True
