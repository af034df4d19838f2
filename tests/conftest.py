"""Session fixtures: one real Kafka broker (KRaft) on free ports, and a unique topic per test.

``make test`` runs the tests on two pytest-xdist workers (``--dist loadgroup``), each with its own
session broker: :func:`pytest_collection_modifyitems` keeps every module on one worker (its module
fixtures start once) and every module of :data:`HOST_NETWORK_MODULES` on the same worker, one after
the other (they change the host's network). Tests marked ``solo`` run afterwards, alone.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import shutil
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


HOST_NETWORK_GROUP = "host-network"
HOST_NETWORK_MODULES = frozenset(
    {
        "tests.integration.test_testbed",
        "tests.integration.test_alert_end_to_end",
        "tests.integration.test_lossy_long_timeout",
        "tests.integration.test_attribution",
        "tests.integration.test_soak",
    }
)
"""Modules that create network namespaces, NFQUEUE handlers or iptables rules: one worker runs them."""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every test without an ``xdist_group`` mark its module's group (or the host-network one)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            module = item.module.__name__ if item.module is not None else item.nodeid.split("::")[0]
            group = HOST_NETWORK_GROUP if module in HOST_NETWORK_MODULES else module
            item.add_marker(pytest.mark.xdist_group(group))


def release_clients() -> None:
    """Destroy the Kafka clients nothing refers to any more, before their brokers stop.

    A client left in a reference cycle (a delivery callback that refers to its owner) lives until the
    garbage collector runs; if its brokers stop first, librdkafka logs ``Connect to ...: Connection
    refused`` to stderr about once a second until then, noise in the test run's output. Clients still in
    use must be closed by their tests.
    """
    gc.collect()


@pytest.fixture(scope="session", autouse=True)
def no_stale_host_rules() -> None:
    """Remove the iptables chains and testbed namespaces of test or soak processes that were killed.

    Their rules stay in the host's ``OUTPUT`` chain after SIGKILL and drop loopback traffic of whatever
    later draws their ports (docs/DESIGN.md, "Chains of a killed process"). Only chains and namespaces
    named for a process that has ended are removed, so a concurrent session's are kept. Without root, or
    without the lab installed, nothing to do.
    """
    try:
        from testbed.host_chains import remove_stale_chains
        from testbed.netns import NetworkError, cleanup_stale
    except ImportError:
        return
    removed = remove_stale_chains()
    if os.geteuid() == 0 and shutil.which("ip"):
        with contextlib.suppress(NetworkError):
            removed += cleanup_stale()
    if removed:
        logging.getLogger(__name__).warning("removed what killed processes left: %s", ", ".join(removed))


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster.create(tmp_path_factory.mktemp("kafka"), brokers=1)
    cluster.start()
    try:
        yield cluster
    finally:
        release_clients()
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
