"""The TCP ports of a local cluster's nodes on 127.0.0.1: planned from a base port, or free ones."""

from __future__ import annotations

import socket
from typing import NamedTuple

HOST = "127.0.0.1"
"""Where the local cluster's controller, SASL_SSL and metrics listeners bind (and its brokers by default)."""


class NodePorts(NamedTuple):
    """The ports of one node (see :func:`plan_ports`).

    Attributes:
        broker: PLAINTEXT listener.
        controller: CONTROLLER listener.
        sasl_ssl: SASL_SSL listener, or None without it.
        metrics: The Prometheus JMX exporter.
    """

    broker: int
    controller: int
    sasl_ssl: int | None
    metrics: int


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports on 127.0.0.1 that are free right now.

    All are held open until each is known: one :func:`free_port` after another can return the same
    port twice (the OS hands out a port just released), and a node whose listener and controller got
    one port fails to format ("two listeners on the same port", seen once in ``make test``).

    Raises:
        OSError: the OS has no free port (or no socket) left.
    """
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((HOST, 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_is_free(port: int) -> bool:
    """Return True if ``port`` on 127.0.0.1 can be bound right now (``SO_REUSEADDR``, as Kafka binds)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def plan_ports(brokers: int, base_port: int | None, sasl_ssl: bool) -> list[NodePorts]:
    """Return the ports of each of ``brokers`` nodes, in ``node.id`` order.

    Args:
        brokers: How many nodes.
        base_port: First port: node i (0-based) uses ``base_port + 2i`` (broker), ``+ 2i + 1``
            (controller), ``base_port + 2n + i`` (SASL_SSL) and ``base_port + 3n + i`` (JMX exporter)
            with n brokers. None: free ports, all distinct (:func:`free_ports`).
        sasl_ssl: Plan a SASL_SSL listener port too.

    Raises:
        OSError: ``base_port`` is None and the OS has no free port left.
    """
    if base_port is None:
        ports = iter(free_ports(4 * brokers))
        return [
            NodePorts(next(ports), next(ports), next(ports) if sasl_ssl else None, next(ports))
            for _ in range(brokers)
        ]
    return [
        NodePorts(
            base_port + 2 * i,
            base_port + 2 * i + 1,
            base_port + 2 * brokers + i if sasl_ssl else None,
            base_port + 3 * brokers + i,
        )
        for i in range(brokers)
    ]
