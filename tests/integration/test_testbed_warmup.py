"""The testbed's warm-up load, and a load that begins on a schedule (``run_load(start_at=...)``)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME
from testbed.warmup import warm_up

from audit_producer import ProducerAuditSettings
from audit_producer.load import run_load
from audit_record.stamp import stamp_of
from kafka_plumbing.topics import read_to_end

pytestmark = pytest.mark.integration


def test_the_warm_up_delivers_its_load_unaudited(kconfig: dict[str, str], topic: str) -> None:
    done = warm_up(kconfig, topic, {"acks": "1", "linger.ms": 1}, rate=2_000, seconds=1.0, message_bytes=100)

    assert 1_800 <= done.offered <= 2_000
    assert (done.delivered, done.failed) == (done.offered, 0)
    messages = list(read_to_end(kconfig, topic, group_id=f"{topic}.reader"))
    assert len(messages) == done.offered
    assert all(len(m.value()) == 100 for m in messages)
    assert not any(stamp_of(m.headers()) is not None for m in messages)  # nothing the audit counts


def test_a_load_with_start_at_begins_then(
    kconfig: dict[str, str], topic: str, audit_topics: dict[str, str]
) -> None:
    start_at = time.time() + 3.0
    result = run_load(
        dict(kconfig),
        topic,
        rate=500,
        duration_s=1.0,
        audit=ProducerAuditSettings(audit_topic=audit_topics["audit_topic"]),
        start_at=start_at,
    )

    messages = list(read_to_end(kconfig, topic, group_id=f"{topic}.reader"))
    assert len(messages) == result.produced > 0
    created_ms = [m.timestamp()[1] for m in messages if m.timestamp()[0] == TIMESTAMP_CREATE_TIME]
    assert len(created_ms) == len(messages)
    assert min(created_ms) >= start_at * 1000 - 1  # CreateTime is whole ms
    assert max(created_ms) < (start_at + 1.5) * 1000  # a 1-s load that began on time
