"""What a local KRaft cluster is made of: its nodes (ports, PID) and its optional SASL_SSL listener."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
"""The SASL mechanisms a :class:`SaslSslListener` may enable (SCRAM credentials live in the metadata)."""


@dataclass
class Node:
    """One combined broker + controller.

    Attributes:
        node_id: KRaft ``node.id`` (1-based).
        broker_port: PLAINTEXT listener port on 127.0.0.1.
        controller_port: CONTROLLER listener port on 127.0.0.1.
        pid: Process id of the JVM, or None when not started.
        sasl_ssl_port: SASL_SSL listener port on 127.0.0.1, or None without that listener.
        metrics_port: Port of the node's Prometheus JMX exporter on 127.0.0.1 (None: not planned, as in
            state written before the exporter existed; ``start`` picks a free one).
        metrics_enabled: True when the running (or last started) JVM has the exporter agent.
    """

    node_id: int
    broker_port: int
    controller_port: int
    pid: int | None = None
    sasl_ssl_port: int | None = None
    metrics_port: int | None = None
    metrics_enabled: bool = False


@dataclass(frozen=True)
class SaslSslListener:
    """An extra client listener with TLS and SASL/SCRAM, next to the PLAINTEXT one.

    Inter-broker and controller traffic stay on PLAINTEXT / CONTROLLER. The broker's key and
    certificate are read from PEM (Kafka ``ssl.keystore.type=PEM``, KIP-651); SCRAM credentials are
    stored in the cluster metadata when the storage is formatted (``kafka-storage format --add-scram``).

    Attributes:
        keystore_location: PEM file with the server's unencrypted PKCS#8 private key followed by its
            certificate chain (``ssl.keystore.location``); the certificate must name 127.0.0.1 (SAN).
        mechanisms: ``sasl.enabled.mechanisms``, a subset of :data:`SCRAM_MECHANISMS`.
    """

    keystore_location: Path
    mechanisms: tuple[str, ...] = SCRAM_MECHANISMS
