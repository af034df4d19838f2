"""A partition whose audit state outgrows Kafka's default 1 MB message limit is still written (keyed traffic).

A key spreads each producer's sequences over the partitions, so one partition's Roaring bitmap takes 8 KiB for
every 65,536 sequences: four producers at 50,000 messages/s over 12 partitions make 1.5 MB of state per
partition and open 60-s window. With librdkafka's default ``message.max.bytes`` (1,000,000) the cluster tier's
transactional producer refused that state, so the audit consumer stopped committing. Here every 15th sequence
of one producer, 640,000 messages, reaches one partition: 147 bitmap containers, a state of about 1.2 MB.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from audit_consumer.counts import DUPLICATED, RECEIVED, SEQS
from audit_consumer.state_codec import decode_state, state_key
from audit_record.stamp import header, new_producer_id
from kafka_plumbing.topics import (
    LARGE_RECORD_MINIMUMS,
    STATE_MAX_MESSAGE_BYTES,
    STATE_TOPIC_CONFIG,
    ensure_topic,
    read_to_end,
)
from tests.conftest import unique_name

from .helpers import consumer_settings, running_consumer, wait_for

pytestmark = pytest.mark.integration

MESSAGES = 640_000
STRIDE = 15  # 65,536 / 15 = 4,369 sequences a block: more than an array container's 4,096, so a bitmap
WINDOW_MS = 3_600_000


def _create_time_in_an_open_window() -> int:
    """A CreateTime whose hour-long window stays open for the test: now, or the next window's start when
    the current one ends within 5 minutes (windows close by the watermark or the wall clock)."""
    now = int(time.time() * 1000)
    start = now - now % WINDOW_MS
    return now if now - start < WINDOW_MS - 300_000 else start + WINDOW_MS + 1_000


def test_a_state_over_one_megabyte_is_committed(kconfig, bootstrap, topic, audit_topics):
    pid = new_producer_id("large-state")
    create_time = _create_time_in_an_open_window()
    p = Producer({**kconfig, "linger.ms": 50, "queue.buffering.max.messages": 1_000_000})
    for i in range(MESSAGES):
        while True:
            try:
                p.produce(topic, b"v", partition=0, timestamp=create_time, headers=[header(pid, i * STRIDE)])
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0
    settings = consumer_settings(bootstrap, [topic], audit_topics, window_ms=WINDOW_MS, grace_ms=2_000)
    key = state_key(settings.group, topic, 0)

    def full_state() -> bytes | None:
        """The newest state of the partition once it counts every message (its value), else None."""
        states = [
            m.value()
            for m in read_to_end(
                kconfig,
                audit_topics["state_topic"],
                group_id=f"{audit_topics['state_topic']}.reader",
                missing_ok=True,
            )
            if m.key() == key and m.value() is not None
        ]
        done = [v for v in states if decode_state(v, WINDOW_MS, 2_000).next_offset >= MESSAGES]
        return done[-1] if done else None

    with running_consumer(settings):
        value = wait_for(full_state, 120, f"the state of all {MESSAGES:,} messages")
    assert 1_000_000 < len(value) <= STATE_MAX_MESSAGE_BYTES, len(value)
    st = decode_state(value, WINDOW_MS, 2_000)
    (bucket,) = st.open.values()  # one producer, one window, still open: its sequence set is in the state
    assert bucket[RECEIVED] == MESSAGES and bucket[DUPLICATED] == 0
    assert bucket[SEQS] is not None and len(bucket[SEQS]) == MESSAGES


def test_an_older_state_topic_is_raised_to_the_limit_and_a_larger_one_kept(kconfig, request):
    """A state topic created before the limit (the broker's 1 MB) is raised at start, never lowered."""
    older, larger = unique_name(request, ".older"), unique_name(request, ".larger")
    ensure_topic(kconfig, older, 3, topic_config={"cleanup.policy": "compact"})
    ensure_topic(
        kconfig, larger, 3, topic_config={"cleanup.policy": "compact", "max.message.bytes": str(32 << 20)}
    )
    for name in (older, larger):
        ensure_topic(kconfig, name, 3, topic_config=STATE_TOPIC_CONFIG, minimums=LARGE_RECORD_MINIMUMS)
    admin = AdminClient(kconfig)

    def limit(name: str) -> int:
        resource = ConfigResource(ResourceType.TOPIC, name)
        return int(admin.describe_configs([resource])[resource].result(30)["max.message.bytes"].value)

    raised = STATE_MAX_MESSAGE_BYTES + 128 * 1024
    assert LARGE_RECORD_MINIMUMS["max.message.bytes"] == raised
    # the broker applies a config change asynchronously
    wait_for(lambda: limit(older) == raised, 30, f"max.message.bytes {raised} of {older}")
    assert limit(larger) == 32 << 20
