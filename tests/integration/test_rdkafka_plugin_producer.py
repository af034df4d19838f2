"""Issue 41 item 3: ``AuditedProducer`` on the plugin path (``counting="plugin"``).

Real KRaft broker (the session fixture). The librdkafka plugin (reader mode) stamps and counts inside the
inner producers; the audited producer reads its counts and sends the snapshots. Every final window is
exact against the verifier (:func:`audit_consumer.ground_truth.verify_topic`), the stamps are the
plugin's with the producer's own id and sequences 1..N, the application's delivery callback gets every
report. Live reconfiguration keeps working: forced configuration changes from the control topic swap the
inner producer (the new one shares the plugin's auditor), and nothing is lost or counted twice.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter, defaultdict

import pytest
from confluent_kafka import KafkaError, Message, Producer

from audit_consumer.ground_truth import verify_topic
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_producer.rdkafka_plugin_counts import PluginCounts, plugin_config
from audit_producer.window_counts import ACKED, BYTES, FAILED, FAILED_BY, FIRST_SEQ, LAST_SEQ, SENT
from audit_record import PRODUCER_TIER, now_ms
from audit_record.reader import read_audit_log
from audit_record.stamp import new_producer_id
from audit_record.stamp import read as read_stamp
from kafka_plumbing.rdkafka_plugin import rdkafka_plugin
from kafka_plumbing.topics import CONTROL_TOPIC_CONFIG, ensure_topic, read_to_end
from tests.conftest import unique_name

from .helpers import forced, produce_through_changes, wait_for

pytestmark = pytest.mark.integration

N = 10_000
WINDOW_MS = 5_000
CHANGES = 4


def _settings(audit_topic: str, **kw: object) -> ProducerAuditSettings:
    return ProducerAuditSettings(
        counting="plugin",
        audit_topic=audit_topic,
        window_ms=WINDOW_MS,
        grace_ms=1_000,
        snapshot_interval_ms=1_000,
        **kw,
    )


def _in_topic(kconfig: dict[str, str], topic: str, producer_id: str) -> tuple[Counter[int], Counter[int]]:
    """Return the topic's messages by stamp sequence and by window; every stamp is ``producer_id``'s."""
    by_seq: Counter[int] = Counter()
    by_window: Counter[int] = Counter()
    for m in read_to_end(kconfig, topic, group_id=f"verify.{topic}", read_committed=False):
        pid, seq = read_stamp(m.headers()) or (b"", -1)
        assert pid.decode() == producer_id
        by_seq[seq] += 1
        ts = m.timestamp()[1]
        by_window[ts - ts % WINDOW_MS] += 1
    return by_seq, by_window


def test_audited_producer_on_the_plugin_path_is_exact(
    request: pytest.FixtureRequest, kconfig: dict[str, str], bootstrap: str, topic: str
) -> None:
    audit_topic = unique_name(request, ".audit")
    ensure_topic(kconfig, audit_topic, 3)
    reports: list[KafkaError | None] = []

    statistics: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        reports.append(err)

    def measured_rtt() -> bool:
        return any(
            b.get("rtt", {}).get("cnt", 0) > 0
            for doc in statistics
            for b in json.loads(doc).get("brokers", {}).values()
        )

    config = {
        "bootstrap.servers": bootstrap,
        "client.id": "ap-plugin",
        "on_delivery": on_delivery,
        "statistics.interval.ms": 500,  # network statistics per window: the producer's stats_cb
        "stats_cb": statistics.append,  # the application's own, called after the producer's
    }
    with AuditedProducer(config, _settings(audit_topic)) as producer:
        assert type(producer).__name__ == "PluginAuditedProducer"
        producer.check()
        for i in range(N):
            headers = [("app", b"1")] if i % 2 else None
            producer.produce(topic, value=b"v" * 100, key=str(i).encode(), headers=headers)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(30) == 0
        # a statistics document with a round trip before the finals (10,000 messages can take < 500 ms)
        wait_for(lambda: producer.poll(0.1) is not None and measured_rtt(), 20, "a round trip", 0.1)
    assert producer.last_sequence == N
    assert len(reports) == N and not any(reports), "the application's callback got every report"
    reading = producer.plugin_reading
    assert reading is not None and (
        reading.unattributed,
        reading.windows_dropped,
        reading.internal_errors,
    ) == (0, 0, 0)

    by_seq, by_window = _in_topic(kconfig, topic, producer.producer_id)
    assert set(by_seq) == set(range(1, N + 1)) and set(by_seq.values()) == {1}
    truth = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topic, timeout_s=60)
    assert truth.messages == N and truth.malformed_stamps == 0
    assert {pid for _, pid in truth.rows} == {producer.producer_id}
    for r in truth.rows.values():
        assert r.final and (r.sent, r.unique, r.duplicated) == (r.received, r.received, 0), r
    assert {start: r.sent for (start, _), r in truth.rows.items()} == dict(by_window)
    finals = [
        s for s in read_audit_log(kconfig, audit_topic).tier(PRODUCER_TIER) if s.topic == topic and s.final
    ]
    assert finals and all(s.accounted and s.failed == 0 for s in finals)
    assert sum(s.acknowledged for s in finals) == N and sum(s.bytes for s in finals) == 100 * N
    assert all(s.producer_identity.library == "kafka-audit-python" for s in finals)
    # the Python-only features still act: network statistics, the TCP drain wait before each final
    assert any(s.network is not None and s.network.rtt_avg_ms is not None for s in finals)
    assert all(s.in_flight_bytes == 0 for s in finals)
    acked: dict[int, int] = defaultdict(int)
    for s in finals:
        for p in s.partitions:
            acked[p.partition] += p.acknowledged
            assert p.last_offset is not None and p.last_offset >= 0
    assert sorted(acked) == [0, 1, 2] and sum(acked.values()) == N


def test_reader_mode_clients_of_one_id_share_one_sequence_and_one_count() -> None:
    """No broker: two clients with one ``kafka.audit.id`` in reader mode stamp one sequence into one window
    table; a purge's failures count per partition and error; the last client's destruction closes it."""
    pid = new_producer_id("reader")
    library = rdkafka_plugin()
    cfg = {"bootstrap.servers": "127.0.0.1:9", "log_level": 0, **plugin_config(library, pid, 60_000)}
    first = Producer(cfg)
    counts = PluginCounts(library, pid)
    for _ in range(10):
        first.produce("t1", b"x" * 10, timestamp=120_000)
    second = Producer(cfg)  # a swapped-in inner producer: the same auditor
    for _ in range(5):
        second.produce("t1", b"y", timestamp=125_000)
    assert counts.last_sequence() == 15
    windows: dict[tuple[str, int], list] = {}
    counts.add_to(windows, now_ms(), lambda *_: None)
    w = windows[("t1", 120_000)]
    assert (w[SENT], w[BYTES], w[FIRST_SEQ], w[LAST_SEQ], w[ACKED], w[FAILED]) == (15, 105, 1, 15, 0, 0)
    second.purge()
    second.flush(5)
    failures: list[tuple[int, str]] = []
    counts.add_to(windows, now_ms(), lambda seq, err: failures.append((seq, err.name())))
    assert w[FAILED] == 5 and w[FAILED_BY] == {(-1, "_PURGE_QUEUE"): 5}
    assert failures == [(15, "_PURGE_QUEUE")] * 5
    del second  # one client of two destroyed: the auditor goes on counting the other's messages
    first.produce("t1", b"z", timestamp=121_000)
    counts.add_to(windows, now_ms(), lambda *_: None)
    assert (w[SENT], counts.last_sequence()) == (16, 16)
    first.purge()
    first.flush(5)
    del first
    reading = counts.read()
    assert reading.closed and reading.windows == [] and reading.unattributed == 0


def test_live_reconfiguration_on_the_plugin_path_loses_and_doubles_nothing(
    request: pytest.FixtureRequest, kconfig: dict[str, str], topic: str, audit_topics: dict[str, str]
) -> None:
    control_topic = unique_name(request, ".control")
    ensure_topic(kconfig, control_topic, 1, topic_config=CONTROL_TOPIC_CONFIG)
    group = f"g-{uuid.uuid4().hex[:8]}"
    audit_topic = audit_topics["audit_topic"]
    producer = AuditedProducer(
        {
            **kconfig,
            "client.id": "autotuned-plugin",
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 10_000,
        },
        _settings(
            audit_topic,
            autotune=True,
            group=group,
            control_topic=control_topic,
            dlq_topic=audit_topics["dlq_topic"],
        ),
    )
    producer.check()
    writer = Producer(kconfig)
    versions = [forced(group, v) for v in range(1, CHANGES + 1)]
    n = produce_through_changes(producer, topic, writer, control_topic, group, versions)
    assert producer.config_events["applied"] == CHANGES
    assert producer.config_events["rejected"] == producer.config_events["rolled_back"] == 0
    assert producer.current_config == forced(group, CHANGES).librdkafka_config()
    assert producer.last_sequence == n

    by_seq, by_window = _in_topic(kconfig, topic, producer.producer_id)
    assert set(by_seq) == set(range(1, n + 1)) and set(by_seq.values()) == {1}
    snaps = [r for r in read_audit_log(kconfig, audit_topic).tier(PRODUCER_TIER) if r.topic == topic]
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
        configs = {r.producer_config.batch_num_messages for r in records}
        configs_seen |= configs
        mixed += len(configs) > 1  # a window that ran with several configurations: one snapshot each
    assert configs_seen == {10_000} | {100 + v for v in range(1, CHANGES + 1)}
    assert mixed >= 1
    v = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topic)
    assert {start: row.sent for (start, _), row in v.rows.items()} == dict(by_window)
    for row in v.rows.values():
        assert row.final and row.unique == row.sent and row.lost == row.duplicated == 0
