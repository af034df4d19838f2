"""Reading the results topic back (for ``kafka-audit verify``, reports and tests)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from audit_record.codec import decode_object
from kafka_audit.errors import KafkaAuditError


def read_results(config: Mapping[str, Any], topic: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Return every committed WindowResult in ``topic``, in offset order per partition.

    Raises:
        KafkaAuditError: if the topic is not read to its end within ``timeout_s``.
    """
    c = Consumer(
        {
            **config,
            "group.id": "kafka-audit.results-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    out: list[dict[str, Any]] = []
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            return out
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in md.partitions])
        pending = set(md.partitions)
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise KafkaAuditError(f"results topic {topic!r} not read to its end in {timeout_s:.0f} s")
            for m in c.consume(1000, 0.5):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        pending.discard(m.partition())
                    continue
                out.append(decode_object("window_result", m.value()))
    finally:
        c.close()
    return out


def final_results(rows: list[dict[str, Any]]) -> dict[tuple[str, int, str], list[dict[str, Any]]]:
    """Group the final results by (topic, window_start_ms, tier): each list should hold exactly one."""
    out: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r["state"] == "final":
            out.setdefault((r["topic"], r["window_start_ms"], r["tier"]), []).append(r)
    return out
