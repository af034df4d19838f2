"""Issue 41: how the librdkafka plugin places an acknowledgement in its window (rdkafka_plugin/src/auditor.c).

The plugin finds an acknowledged record's window by the record's key, (topic, window of its CreateTime),
without reading the stamp header back; it falls back to the stamp's sequence (the JVM's ring) whenever the
key may not give the window on_send counted the record in. Real KRaft broker (the session fixture), a plain
``confluent_kafka.Producer`` with the plugin: records interleaved over several windows (the key path's
caches switch windows every record) and records into a ``LogAppendTime`` topic (the acknowledgement's
timestamp is the broker's, so the sequence places them) each count every record exactly once, in its window.
"""

from __future__ import annotations

import time
from collections import Counter

import confluent_kafka
import pytest

from audit_record import PRODUCER_TIER
from audit_record.reader import read_audit_log
from audit_record.record import AuditRecord
from kafka_plumbing.rdkafka_plugin import rdkafka_plugin
from kafka_plumbing.topics import ensure_topic
from tests.conftest import unique_name

pytestmark = pytest.mark.integration

WINDOW_MS = 5_000
N = 3_000


def _producer(bootstrap: str, audit_topic: str) -> confluent_kafka.Producer:
    return confluent_kafka.Producer(
        {
            "plugin.library.paths": str(rdkafka_plugin()),
            "bootstrap.servers": bootstrap,
            "kafka.audit.topic": audit_topic,
            "kafka.audit.window.ms": str(WINDOW_MS),
            "kafka.audit.grace.ms": "1000",
        }
    )


def _finals(kconfig: dict[str, str], audit_topic: str, topic: str) -> list[AuditRecord]:
    """The plugin's final producer snapshots of ``topic`` (written at the client's destruction)."""
    log = read_audit_log(kconfig, audit_topic)
    mine = [s for s in log.tier(PRODUCER_TIER) if s.topic == topic]
    assert mine and all(s.final for s in mine), "every window has its final snapshot"
    return mine


def test_records_interleaved_over_windows_count_in_their_own(
    request: pytest.FixtureRequest, kconfig: dict[str, str], bootstrap: str, topic: str
) -> None:
    audit_topic = unique_name(request, ".audit")
    ensure_topic(kconfig, audit_topic, 3)
    producer = _producer(bootstrap, audit_topic)
    now = int(time.time() * 1000)
    base = now - now % WINDOW_MS - 20 * WINDOW_MS  # 5 windows, all over: each record switches windows
    sent: Counter[int] = Counter()
    for i in range(N):
        window = base + (i % 5) * WINDOW_MS
        producer.produce(topic, key=str(i).encode(), value=b"w" * 20, timestamp=window + i % WINDOW_MS)
        sent[window] += 1
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    del producer  # rd_kafka_destroy: the finals
    finals = _finals(kconfig, audit_topic, topic)
    assert {s.window_start_ms: (s.sent, s.acknowledged, s.failed) for s in finals} == {
        w: (n, n, 0) for w, n in sent.items()
    }
    assert all(s.accounted and sum(p.acknowledged for p in s.partitions) == s.sent for s in finals)


def test_log_append_time_records_are_placed_by_their_stamps(
    request: pytest.FixtureRequest, kconfig: dict[str, str], bootstrap: str
) -> None:
    topic = unique_name(request, ".lat")
    ensure_topic(kconfig, topic, 3, topic_config={"message.timestamp.type": "LogAppendTime"})
    audit_topic = unique_name(request, ".audit")
    ensure_topic(kconfig, audit_topic, 3)
    producer = _producer(bootstrap, audit_topic)
    old = int(time.time() * 1000) - 3 * WINDOW_MS  # a CreateTime the broker's append time never equals
    for i in range(N):
        producer.produce(topic, key=str(i).encode(), value=b"l" * 20, timestamp=old)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    del producer
    (final,) = _finals(kconfig, audit_topic, topic)
    assert final.window_start_ms == old - old % WINDOW_MS  # the CreateTime's window, as on_send counted
    assert (final.sent, final.acknowledged, final.failed, final.accounted) == (N, N, 0, True)
    assert sum(p.acknowledged for p in final.partitions) == N
