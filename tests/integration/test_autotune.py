"""Autotuned producer against a real broker: forced configuration changes lose and double-count nothing.

Issue 14 acceptance: "A lossless run with 20 forced configuration changes loses no message and counts
exactly: the swap itself never loses or double-counts", and "a malformed control record is
dead-lettered and the producer keeps its configuration".
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections import Counter, defaultdict

import pytest
from confluent_kafka import Producer

from audit_consumer.ground_truth import verify_topic
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_record import PRODUCER_TIER, now_ms
from audit_record.codec import encode_object
from audit_record.control_record import ControlRecord, encode_control
from audit_record.dead_letter import COMPONENT_HEADER, REASON_HEADER
from audit_record.reader import read_audit_log
from audit_record.stamp import read as read_stamp
from kafka_plumbing.topics import CONTROL_TOPIC_CONFIG, ensure_topic, read_to_end
from spark_streaming.reconcile import compact, reconcile
from tests.conftest import unique_name

from .helpers import forced, produce_through_changes, wait_for

pytestmark = pytest.mark.integration

WINDOW_MS = 5_000
CHANGES = 20
BASE = {"client.id": "autotuned", "acks": "all", "linger.ms": 5, "batch.num.messages": 10_000}


@pytest.fixture
def control_topic(request: pytest.FixtureRequest, kconfig: dict[str, str]) -> str:
    name = unique_name(request, ".control")
    ensure_topic(kconfig, name, 1, topic_config=CONTROL_TOPIC_CONFIG)
    return name


def settings(
    audit_topics: dict[str, str], control_topic: str, group: str, delivery_reports: str = "errors"
) -> ProducerAuditSettings:
    return ProducerAuditSettings(
        window_ms=WINDOW_MS,
        grace_ms=1_000,
        snapshot_interval_ms=1_000,
        audit_topic=audit_topics["audit_topic"],
        dlq_topic=audit_topics["dlq_topic"],
        delivery_reports=delivery_reports,
        autotune=True,
        group=group,
        control_topic=control_topic,
    )


@pytest.mark.parametrize("delivery_reports", ["errors", "all"])
def test_twenty_forced_configuration_changes_lose_nothing_and_count_exactly(
    kconfig, topic, audit_topics, control_topic, delivery_reports
):
    group = f"g-{uuid.uuid4().hex[:8]}"
    events: list[dict] = []
    producer = AuditedProducer(
        {**kconfig, **BASE},
        settings(audit_topics, control_topic, group, delivery_reports),
        on_reconfigure=events.append,
    )
    producer.check()
    writer = Producer(kconfig)
    versions = [forced(group, v) for v in range(1, CHANGES + 1)]
    n = produce_through_changes(producer, topic, writer, control_topic, group, versions)
    assert producer.config_events["applied"] == CHANGES, events
    assert producer.config_events["rejected"] == producer.config_events["rolled_back"] == 0
    assert producer.active_control_version == CHANGES
    assert producer.current_config == forced(group, CHANGES).librdkafka_config()
    assert producer.last_sequence == n

    # Every message is in the topic exactly once by its stamp.
    in_topic: Counter[int] = Counter()
    by_window: Counter[int] = Counter()
    for m in read_to_end(kconfig, topic, group_id=f"verify.{topic}", read_committed=False):
        pid, seq = read_stamp(m.headers()) or (b"", -1)
        assert pid.decode() == producer.producer_id
        in_topic[seq] += 1
        ts = m.timestamp()[1]
        by_window[ts - ts % WINDOW_MS] += 1
    assert set(in_topic) == set(range(1, n + 1)) and set(in_topic.values()) == {1}

    # The producer's final snapshots sum exactly to what is in the topic, window by window.
    snaps = [
        r
        for r in read_audit_log(kconfig, audit_topics["audit_topic"]).tier(PRODUCER_TIER)
        if r.topic == topic
    ]
    assert snaps and all(r.final for r in snaps)
    windows: dict[int, list] = defaultdict(list)
    for r in snaps:
        windows[r.window_start_ms].append(r)
    assert set(windows) == set(by_window)
    configs_seen = set()
    mixed = 0
    for start, records in windows.items():
        sent = sum(r.sent for r in records)
        assert sent == sum(r.acknowledged for r in records) == by_window[start], start
        assert sum(r.failed for r in records) == 0
        configs_seen |= {r.producer_config.batch_num_messages for r in records}
        # ... and reconciliation (the Spark job's pure function) sees every configuration of the window
        (row,) = reconcile(
            topic, start, start + WINDOW_MS, [compact(r, 0, i) for i, r in enumerate(records)], ["c"], "final"
        )
        assert row["sent"] == sent and row["producers"] == 1
        assert row["producer_configs"] == len({r.producer_config.batch_num_messages for r in records})
        mixed += row["producer_configs"] > 1
    assert configs_seen == {10_000} | {100 + v for v in range(1, CHANGES + 1)}
    assert mixed >= 1
    # The testbed verifier (what every measurement is checked against) agrees, extra snapshots included.
    v = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topics["audit_topic"])
    assert {start: row.sent for (start, _), row in v.rows.items()} == dict(by_window)
    for row in v.rows.values():
        assert row.final and row.unique == row.sent and row.lost == row.duplicated == 0


def test_malformed_or_refused_control_records_change_nothing(kconfig, topic, audit_topics, control_topic):
    group = f"g-{uuid.uuid4().hex[:8]}"
    events: list[dict] = []
    producer = AuditedProducer(
        {**kconfig, **BASE}, settings(audit_topics, control_topic, group), on_reconfigure=events.append
    )
    producer.check()
    before = producer.current_config
    writer = Producer(kconfig)
    garbage = b"this is not a control record"
    out_of_range = encode_object(
        "control_record", {**dataclasses.asdict(forced(group, 2)), "batch_num_messages": 0}
    )
    refused = encode_control(dataclasses.replace(forced(group, 3), acks="1", enable_idempotence=True))
    for key, value in (
        (group, garbage),
        (group, out_of_range),
        ("another-group", garbage),  # not this producer's: skipped, not dead-lettered by it
        (group, refused),  # valid, but librdkafka refuses idempotence with acks=1
    ):
        writer.produce(control_topic, value, key.encode())
    assert writer.flush(10) == 0

    def settled() -> bool:
        producer.produce(topic, b"x")
        producer.poll(0)
        return producer.control_records_dead_lettered == 2 and producer.config_events["rejected"] == 1

    wait_for(settled, 30, "two dead letters and one rejection", 0.05)
    assert producer.current_config == before and producer.active_control_version is None
    assert events[0]["kind"] == "rejected" and events[0]["version"] == 3
    assert "librdkafka rejected" in events[0]["reason"]

    writer.produce(control_topic, encode_control(forced(group, 4)), group.encode())  # a valid one applies
    assert writer.flush(10) == 0

    def applied() -> bool:
        producer.produce(topic, b"y")
        producer.poll(0)
        return producer.active_control_version == 4

    wait_for(applied, 30, "version 4", 0.05)
    producer.close()
    dead = list(
        read_to_end(kconfig, audit_topics["dlq_topic"], group_id=f"dlq.{topic}", read_committed=False)
    )
    assert sorted(dict(m.headers())[REASON_HEADER] for m in dead) == [b"bad_control", b"bad_magic"]
    assert {dict(m.headers())[COMPONENT_HEADER] for m in dead} == {b"audit-producer"}
    assert {m.value() for m in dead} == {garbage, out_of_range} and {m.key() for m in dead} == {
        group.encode()
    }


def test_the_producers_hint_scales_the_load_out_and_back_and_every_producer_counts_exactly(
    kconfig, topic, audit_topics, control_topic
):
    """Issue 14 item 2: the load follows the ``producers`` hint with the same offered stream."""
    from audit_producer.load import run_load

    group = f"g-{uuid.uuid4().hex[:8]}"
    same = dict(acks="all", batch_num_messages=10_000, linger_ms=5.0, message_timeout_ms=300_000)
    writer = Producer(kconfig)
    result: list = []
    load = threading.Thread(
        target=lambda: result.append(
            run_load(
                {**kconfig, **BASE, "message.timeout.ms": 300_000},
                topic,
                rate=1_000,
                duration_s=6,
                audit=settings(audit_topics, control_topic, group),
            )
        ),
        daemon=True,
    )
    load.start()
    for version, producers, pause_s in ((1, 3, 1.5), (2, 1, 2.5)):  # 3 producers from 1.5 s to 4 s
        time.sleep(pause_s)
        record = ControlRecord(
            group=group, version=version, producers=producers, reason="forced", issued_at_ms=now_ms(), **same
        )
        writer.produce(control_topic, encode_control(record), group.encode())
        assert writer.flush(10) == 0
    load.join(60)
    (r,) = result
    assert r.max_producers == 3 and len(r.producer_ids) == 3 and r.producer_ids[0] == r.producer_id
    assert r.offered == r.produced >= 5_000 and r.not_handed_over == 0
    assert not [e for e in r.config_events if e["kind"] != "applied"]  # hints only: nothing swapped
    v = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topics["audit_topic"])
    sent_by_pid: Counter[str] = Counter()
    for (_, pid), row in v.rows.items():
        assert row.final and row.unique == row.sent and row.lost == row.duplicated == 0
        sent_by_pid[pid] += row.sent
    assert set(sent_by_pid) == set(r.producer_ids) and sum(sent_by_pid.values()) == r.produced
    assert all(n >= 100 for n in sent_by_pid.values())  # the extras took their share
