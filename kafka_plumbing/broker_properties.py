"""What a local cluster's node is told: its ``server.properties`` and its storage-format SCRAM users.

Replication settings follow the broker count: 1 broker -> replication factor 1, ``min.insync.replicas``
1; 3 brokers -> 3 and 2 (:func:`replication_factor`, :func:`min_insync_replicas`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from kafka_plumbing.cluster_nodes import Node, SaslSslListener
from kafka_plumbing.cluster_ports import HOST


def replication_factor(brokers: int) -> int:
    """Replication factor for new topics: 1 on one broker, 3 on three."""
    return brokers


def min_insync_replicas(brokers: int) -> int:
    """``min.insync.replicas``: 1 on one broker, 2 on three."""
    return 1 if brokers == 1 else 2


def server_properties(
    node: Node, nodes: list[Node], broker_host: str, log_dir: Path, sasl_ssl: SaslSslListener | None
) -> str:
    """Return the ``server.properties`` text of ``node``, a combined broker + controller.

    Args:
        node: The node configured.
        nodes: Every node of the cluster (the static quorum ``controller.quorum.voters``).
        broker_host: Address of the PLAINTEXT listener, bound and advertised; the controller and
            SASL_SSL listeners are on 127.0.0.1.
        log_dir: The node's ``log.dirs``.
        sasl_ssl: The SASL_SSL listener (at ``node.sasl_ssl_port``), or None.
    """
    voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in nodes)
    rf = replication_factor(len(nodes))
    isr = min_insync_replicas(len(nodes))
    sasl_listener = f",SASL_SSL://{HOST}:{node.sasl_ssl_port}" if sasl_ssl else ""
    props: dict[str, object] = {
        "process.roles": "broker,controller",
        "node.id": node.node_id,
        "controller.quorum.voters": voters,
        "listeners": (
            f"PLAINTEXT://{broker_host}:{node.broker_port},CONTROLLER://{HOST}:{node.controller_port}"
            + sasl_listener
        ),
        "advertised.listeners": f"PLAINTEXT://{broker_host}:{node.broker_port}" + sasl_listener,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        + (",SASL_SSL:SASL_SSL" if sasl_ssl else ""),
        "log.dirs": str(log_dir),
        "num.partitions": 3,
        "default.replication.factor": rf,
        "min.insync.replicas": isr,
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": isr,
        "transaction.state.log.num.partitions": 10,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "true",
        "log.retention.hours": 24,
        "log.segment.bytes": 256 * 1024 * 1024,
        "num.network.threads": 2,
        "num.io.threads": 4,
    }
    if sasl_ssl is not None:
        props.update(sasl_ssl_properties(sasl_ssl))
    return "".join(f"{k}={v}\n" for k, v in props.items())


def sasl_ssl_properties(tls: SaslSslListener) -> dict[str, object]:
    """Return the SASL_SSL listener's broker properties (Kafka docs: SASL/SCRAM authentication)."""
    props: dict[str, object] = {"sasl.enabled.mechanisms": ",".join(tls.mechanisms)}
    for mechanism in tls.mechanisms:
        props[f"listener.name.sasl_ssl.{mechanism.lower()}.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        )
    props["ssl.keystore.type"] = "PEM"
    props["ssl.keystore.location"] = str(tls.keystore_location)
    return props


def scram_format_arguments(users: dict[str, SecretStr], sasl_ssl: SaslSslListener | None) -> list[str]:
    """``--add-scram MECHANISM=[name=...,password=...]`` for every user and SCRAM mechanism.

    These storage-tool arguments hold the passwords in clear: never log them.

    Args:
        users: SCRAM users, name -> password.
        sasl_ssl: The listener whose mechanisms the users get; None: no arguments.
    """
    if sasl_ssl is None:
        return []
    return [
        arg
        for name, password in users.items()
        for mechanism in sasl_ssl.mechanisms
        for arg in ("--add-scram", f"{mechanism}=[name={name},password={password.get_secret_value()}]")
    ]
