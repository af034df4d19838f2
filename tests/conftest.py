"""Session fixtures: one real Kafka broker (KRaft) on free ports, and a unique topic per test."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import pytest

from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.topics import ensure_topic

# Windows wait for their producers' message.timeout.ms (docs/DESIGN.md, invariant 8): librdkafka's default
# of 300 s would keep the windows of most tests open for 5 minutes. Tests that do not name
# max_final_wait_ms get the fixed grace; tests of adaptive finality pass it explicitly (arguments win).
os.environ.setdefault("KAFKA_AUDIT_CONSUMER_MAX_FINAL_WAIT_MS", "0")
os.environ.setdefault("KAFKA_AUDIT_SPARK_MAX_FINAL_WAIT_MS", "0")


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster.create(tmp_path_factory.mktemp("kafka"), brokers=1)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def bootstrap(kafka_cluster: KafkaCluster) -> str:
    return kafka_cluster.bootstrap_servers


@pytest.fixture
def kconfig(bootstrap: str) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap}


def unique_name(request: pytest.FixtureRequest, kind: str = "") -> str:
    base = re.sub(r"[^A-Za-z0-9._-]", "_", request.node.name)[:60]
    return f"pytest_{base}{kind}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic(request: pytest.FixtureRequest, kconfig: dict[str, str]) -> str:
    name = unique_name(request)
    ensure_topic(kconfig, name, partitions=3)
    return name


@pytest.fixture
def audit_topics(request: pytest.FixtureRequest) -> dict[str, str]:
    """Per-test audit, state and dead-letter topics, so tests never see each other's records."""
    return {
        "audit_topic": unique_name(request, ".audit"),
        "state_topic": unique_name(request, ".state"),
        "dlq_topic": unique_name(request, ".dlq"),
    }
