"""The audit record, its Avro schema, the message stamp and window arithmetic.

Everything every tier agrees on lives here and nowhere else.
"""

from audit_record.codec import decode, encode, schema, schema_json
from audit_record.control_record import DEFAULT_CONTROL_TOPIC, ControlRecord, decode_control, encode_control
from audit_record.dead_letter import DEFAULT_DLQ_TOPIC, DeadLetter
from audit_record.record import (
    PRODUCER_TIER,
    AuditRecord,
    MalformedRecordError,
    NetworkStats,
    PartitionDelivery,
    ProducerConfig,
    ProducerIdentity,
    ReadOffset,
    canonical_acks,
    cluster_tier,
    consumer_tier,
    now_ms,
)
from audit_record.windows import DEFAULT_WINDOW_MS, window_bounds, window_start

DEFAULT_AUDIT_TOPIC = "__kafka_audit"

__all__ = [
    "DEFAULT_AUDIT_TOPIC",
    "DEFAULT_CONTROL_TOPIC",
    "DEFAULT_DLQ_TOPIC",
    "DEFAULT_WINDOW_MS",
    "PRODUCER_TIER",
    "AuditRecord",
    "ControlRecord",
    "DeadLetter",
    "MalformedRecordError",
    "NetworkStats",
    "PartitionDelivery",
    "ProducerConfig",
    "ProducerIdentity",
    "ReadOffset",
    "canonical_acks",
    "cluster_tier",
    "consumer_tier",
    "decode",
    "decode_control",
    "encode",
    "encode_control",
    "now_ms",
    "schema",
    "schema_json",
    "window_bounds",
    "window_start",
]
