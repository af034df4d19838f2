"""Ports the local cluster picks for itself are distinct."""

from __future__ import annotations

from kafka_plumbing.cluster_ports import free_ports
from kafka_plumbing.local_cluster import KafkaCluster


def test_free_ports_are_distinct():
    for _ in range(50):
        ports = free_ports(12)
        assert len(set(ports)) == 12


def test_a_cluster_without_a_base_port_gets_distinct_ports(tmp_path):
    cluster = KafkaCluster.create(tmp_path, brokers=3)
    ports = [p for n in cluster.nodes for p in (n.broker_port, n.controller_port, n.metrics_port)]
    assert len(set(ports)) == 9
