"""Audited producer: stamps, counts per event-time window, and emits snapshots to the audit topic."""

from audit_producer.producer import AuditedProducer
from audit_producer.settings import ProducerAuditSettings

__all__ = ["AuditedProducer", "ProducerAuditSettings"]
