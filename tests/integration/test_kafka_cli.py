"""`kafka-audit kafka start|status|stop` as a user runs it, and its clear errors."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from kafka_plumbing.cluster_ports import free_port
from kafka_plumbing.jvm import JavaNotFoundError
from kafka_plumbing.local_cluster import KafkaCluster, PortInUseError

pytestmark = pytest.mark.integration


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kafka_audit", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=180,
    )


@pytest.mark.slow
def test_three_broker_cluster_start_status_stop(tmp_path):
    data = tmp_path / "k3"
    started = cli("kafka", "start", "--brokers", "3", "--data-dir", str(data), "--heap-mb", "384")
    assert started.returncode == 0, started.stderr + started.stdout
    try:
        status = cli("kafka", "status", "--data-dir", str(data))
        assert status.returncode == 0
        assert status.stdout.count("True") == 3
        cluster = KafkaCluster.load(data)
        assert cluster is not None and cluster.replication_factor == 3 and cluster.min_insync_replicas == 2
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        assert len(admin.list_topics(timeout=10).brokers) == 3
        res = ConfigResource(ConfigResource.Type.BROKER, "1")
        cfg = admin.describe_configs([res])[res].result(timeout=10)
        assert cfg["min.insync.replicas"].value == "2" and cfg["default.replication.factor"].value == "3"
        del admin  # destroyed before its brokers stop: a live client would log "Connection refused"
    finally:
        stopped = cli("kafka", "stop", "--data-dir", str(data))
    assert stopped.returncode == 0
    assert cli("kafka", "status", "--data-dir", str(data)).returncode == 1
    assert all(not n["running"] for n in KafkaCluster.load(data).status())


def test_port_in_use_is_a_clear_error(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        cluster = KafkaCluster.create(tmp_path, brokers=1)
        cluster.nodes[0].broker_port = port
        with pytest.raises(PortInUseError, match=f"127.0.0.1:{port} is already in use"):
            cluster.start()
        result = cli("kafka", "start", "--data-dir", str(tmp_path / "x"), "--base-port", str(port))
        assert result.returncode == 2 and "already in use" in result.stderr


def test_missing_java_is_a_clear_error(tmp_path):
    cluster = KafkaCluster.create(tmp_path, brokers=1, base_port=free_port())
    env = {"PATH": "/nonexistent", "JAVA_HOME": "/nonexistent"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with pytest.raises(JavaNotFoundError, match="java not found"):
            cluster.start()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
