"""Dead-letter messages: anything undecodable or inconsistent, kept with its bytes and the reason.

A dead letter is the original message's key and value, unchanged, plus headers naming the reason and
where it came from (docs/DESIGN.md, invariant 7). The default topic is :data:`DEFAULT_DLQ_TOPIC`.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_DLQ_TOPIC = "__kafka_audit_dlq"

REASON_HEADER = "kafka-audit.dlq.reason"
DETAIL_HEADER = "kafka-audit.dlq.detail"
COMPONENT_HEADER = "kafka-audit.dlq.component"
SOURCE_TOPIC_HEADER = "kafka-audit.dlq.topic"
SOURCE_PARTITION_HEADER = "kafka-audit.dlq.partition"
SOURCE_OFFSET_HEADER = "kafka-audit.dlq.offset"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One rejected message.

    Attributes:
        component: Who rejected it (``audit-consumer``, ``audit-reader``, ``spark``).
        reason: Short machine label (e.g. ``bad_magic``, ``bad_stamp``, ``negative_count``).
        detail: Human explanation.
        topic, partition, offset: Where the original message was read.
        key, value: The original bytes, unchanged.
    """

    component: str
    reason: str
    detail: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None

    def headers(self) -> list[tuple[str, bytes]]:
        """Return the Kafka headers describing the rejection."""
        return [
            (REASON_HEADER, self.reason.encode()),
            (DETAIL_HEADER, self.detail[:500].encode("utf-8", "replace")),
            (COMPONENT_HEADER, self.component.encode()),
            (SOURCE_TOPIC_HEADER, self.topic.encode()),
            (SOURCE_PARTITION_HEADER, str(self.partition).encode()),
            (SOURCE_OFFSET_HEADER, str(self.offset).encode()),
        ]
