"""Issue 15 items 1 and 6 at the audit consumer, on the real broker.

Topics matching a pattern are found, also when created while the consumer runs (internal ones never);
a window whose producers reported a long ``message.timeout.ms`` stays open that long after its end, so a
retried message arriving after the grace is counted (not late), while a window without producer reports
closes after the grace.
"""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import Producer

from audit_record import AuditRecord, ProducerConfig, cluster_tier, encode, stamp
from audit_record.reader import read_audit_log
from audit_record.windows import window_start
from kafka_plumbing.topics import ensure_topic
from tests.conftest import unique_name
from tests.integration.helpers import CLUSTER, consumer_settings, running_consumer, wait_for

pytestmark = pytest.mark.integration

WINDOW_MS = 10_000
GRACE_MS = 1_000
TIMEOUT_MS = 8_000  # the producer's message.timeout.ms
MARGIN_MS = 2_000


def _snapshot(producer_id: str, topic: str, start: int, sent: int) -> AuditRecord:
    """A producer-tier snapshot as AuditedProducer writes it, with message.timeout.ms = TIMEOUT_MS."""
    return AuditRecord(
        tier="producer",
        source="pytest",
        producer_id=producer_id,
        topic=topic,
        window_start_ms=start,
        window_end_ms=start + WINDOW_MS,
        sent=sent,
        acknowledged=sent,
        producer_config=ProducerConfig(
            acks="1",
            enable_idempotence=False,
            batch_num_messages=1,
            linger_ms=0,
            message_timeout_ms=TIMEOUT_MS,
            message_send_max_retries=2,
            retry_backoff_ms=100,
        ),
    )


def _finals(kconfig, audit_topic: str, topic: str) -> list[AuditRecord]:
    log = read_audit_log(kconfig, audit_topic)
    return [r for r in log.tier(cluster_tier(CLUSTER)) if r.topic == topic and r.final]


def test_patterns_find_new_topics_and_windows_wait_for_the_producers_timeout(
    request, kconfig, bootstrap, audit_topics
):
    prefix = unique_name(request, ".mon")
    audited, unaudited, later = f"{prefix}.a", f"{prefix}.c", f"{prefix}.b"
    internal = f"{prefix}.x.internal"
    for t in (audited, unaudited, internal):
        ensure_topic(kconfig, t, partitions=1)
    settings = consumer_settings(
        bootstrap,
        [],
        audit_topics,
        topic_patterns=[re.escape(prefix) + r"\..*"],
        discovery_interval_ms=1_000,
        window_ms=WINDOW_MS,
        grace_ms=GRACE_MS,
        delivery_margin_ms=MARGIN_MS,
        max_final_wait_ms=60_000,
    )
    raw = Producer({**kconfig, "linger.ms": 0})
    pid = stamp.new_producer_id("pytest-mon")
    with running_consumer(settings) as consumer:
        wait_for(lambda: audited in consumer.topics, 30, "the consumer to subscribe to the matches")
        assert unaudited in consumer.topics and internal not in consumer.topics
        assert not any(t.startswith("__") or t == audit_topics["audit_topic"] for t in consumer.topics)
        assert consumer.timeouts is not None
        wait_for(consumer.timeouts.ready.is_set, 30, "the producer snapshots read to the end")
        # A fresh window with room before its end.
        wait_for(lambda: time.time() * 1000 % WINDOW_MS < 2_000, WINDOW_MS / 1000 + 1, "a window start", 0.05)
        start = window_start(int(time.time() * 1000), WINDOW_MS)
        end = start + WINDOW_MS
        n = 50
        for seq in range(1, n + 1):
            headers = [stamp.header(pid, seq)]
            raw.produce(audited, f"m{seq}".encode(), timestamp=start + seq, headers=headers)
            raw.produce(unaudited, f"u{seq}".encode(), timestamp=start + seq)  # no stamp: unaudited
        record = _snapshot(pid, audited, start, n + 1)  # the retried message is sent in this window too
        raw.produce(audit_topics["audit_topic"], encode(record), record.key().encode())
        assert raw.flush(30) == 0
        wait_for(
            lambda: consumer.timeouts.message_timeout_ms(audited, start) == TIMEOUT_MS,
            5,
            "the producer's message.timeout.ms",
            0.1,
        )
        # The retried message: created in the window, appended 3 s after its end (after the grace).
        wait_for(lambda: time.time() * 1000 >= end + 3_000, WINDOW_MS / 1000 + 5, "3 s after the end", 0.05)
        headers = [stamp.header(pid, n + 1)]
        raw.produce(audited, b"retried", timestamp=end - 1, headers=headers)
        assert raw.flush(30) == 0
        # A topic created while the consumer runs is audited without a restart.
        ensure_topic(kconfig, later, partitions=1)
        wait_for(lambda: later in consumer.topics, 30, "the new topic to be discovered")
        for seq in range(1, 11):
            raw.produce(later, f"b{seq}".encode(), headers=[stamp.header(pid, 1000 + seq)])
        assert raw.flush(30) == 0
        wait_for(lambda: _finals(kconfig, audit_topics["audit_topic"], audited), 60, "the held window final")
        wait_for(
            lambda: sum(r.received for r in _finals(kconfig, audit_topics["audit_topic"], later)) == 10,
            90,
            "the new topic's window final with its 10 messages",
        )
    [held] = [r for r in _finals(kconfig, audit_topics["audit_topic"], audited) if r.window_start_ms == start]
    assert (held.received, held.unique, held.late) == (n + 1, n + 1, 0)  # the retried message counted
    first_final = min(
        r.emitted_at_ms
        for r in read_audit_log(kconfig, audit_topics["audit_topic"]).records.values()
        if r.topic == audited and r.final and r.tier == cluster_tier(CLUSTER)
    )
    assert first_final >= end + TIMEOUT_MS + MARGIN_MS  # not end + grace
    [plain] = [
        r for r in _finals(kconfig, audit_topics["audit_topic"], unaudited) if r.window_start_ms == start
    ]
    assert (plain.received, plain.unaudited, plain.unique) == (n, n, 0)
    assert plain.emitted_at_ms < end + TIMEOUT_MS + MARGIN_MS  # no producer report: the grace alone
