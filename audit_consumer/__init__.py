"""Audit consumer: counts what one cluster really holds, exactly once across crashes.

Public surface::

    from audit_consumer import AuditedConsumer, ConsumerAuditSettings
    consumer = AuditedConsumer({"bootstrap.servers": "localhost:9092", "group.id": "billing"})

:class:`AuditedConsumer` is the application consumer tier (a ``confluent_kafka.Consumer`` that reports
what its application consumed); the cluster tier's audit consumer is :mod:`audit_consumer.consumer`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from audit_consumer.audited import AuditedConsumer, AuditStats, ConsumerAuditSettings

_EXPORTS = {
    "AuditStats": "audit_consumer.audited",
    "AuditedConsumer": "audit_consumer.audited",
    "ConsumerAuditSettings": "audit_consumer.audited",
}
__all__ = ["AuditStats", "AuditedConsumer", "ConsumerAuditSettings"]


def __getattr__(name: str) -> Any:
    """Import the public names on first use: the package's counting modules do not need the consumer."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'audit_consumer' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
