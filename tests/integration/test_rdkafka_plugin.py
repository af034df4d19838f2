"""Issue 41: librdkafka clients audited by configuration alone (the plugin, rdkafka_plugin/).

Real KRaft broker (the session fixture). ``kcat`` (Debian's librdkafka 2.0.2) and a plain
``confluent_kafka.Producer`` (the wheel's bundled librdkafka, loaded RTLD_LOCAL) write N records into a
3-partition topic with nothing but ``plugin.library.paths`` (and the test's audit topic and window) set. The
verifier (:func:`audit_consumer.ground_truth.verify_topic`) reads the topic and the audit topic: every
window's final ``sent`` equals what the topic holds, their sum is N (the test's count), nothing is
unaudited. Beside a Java producer with the JVM interceptor on one topic and the audit consumer, every
window's cluster-tier count equals the verifier's and the Spark job's reconciliation gives one result per
window, exact. The snapshot bytes are Avro single objects of the
current schema that fastavro decodes and encodes back to the same bytes, and decode to the record a Python
producer writes for the same counts. A misconfigured or unloadable plugin fails the client's configuration
with librdkafka's error, naming the key.
"""

from __future__ import annotations

import dataclasses
import io
import subprocess
import time
from collections import defaultdict

import confluent_kafka
import fastavro
import pytest

from audit_consumer.ground_truth import Verification, verify_topic
from audit_record import PRODUCER_TIER, codec, stamp
from audit_record.reader import read_audit_log
from audit_record.record import AuditRecord, PartitionDelivery, ProducerConfig
from kafka_audit.verification_report import compare_with_cluster
from kafka_plumbing.interceptor_jar import PRODUCER_INTERCEPTOR
from kafka_plumbing.rdkafka_plugin import rdkafka_plugin
from kafka_plumbing.topics import ensure_topic, read_to_end
from spark_streaming.reconcile import compact, reconcile
from tests.conftest import unique_name

from .helpers import CLUSTER, consumer_settings, running_consumer, wait_for, wait_for_final_windows
from .jvm_clients import perf_producer

pytestmark = pytest.mark.integration

N = 10_000
WINDOW_MS = 5_000


def _audit_settings(audit_topic: str) -> dict[str, str]:
    return {
        "kafka.audit.topic": audit_topic,
        "kafka.audit.window.ms": str(WINDOW_MS),
        "kafka.audit.grace.ms": "1000",
    }


def _plugin_producer(bootstrap: str, audit_topic: str, **config: str | int) -> confluent_kafka.Producer:
    """A ``confluent_kafka.Producer`` audited by the plugin alone, into ``audit_topic``."""
    return confluent_kafka.Producer(
        {
            "plugin.library.paths": str(rdkafka_plugin()),  # first: it defines the kafka.audit.* properties
            "bootstrap.servers": bootstrap,
            **_audit_settings(audit_topic),
            **config,
        }
    )


def _check_exact(truth: Verification, topic: str, n: int, client_id: str) -> list[AuditRecord]:
    """Every window exact against the verifier; return the producer snapshots of ``topic``."""
    assert truth.messages == n and truth.malformed_stamps == 0
    rows = list(truth.rows.values())
    assert all(r.producer_id is not None for r in rows), "no unaudited messages"
    assert len({r.producer_id for r in rows}) == 1 and rows[0].producer_id.startswith("~")
    for r in rows:
        assert r.final, f"window {r.window_start_ms} has no final producer snapshot"
        assert (r.sent, r.unique, r.duplicated) == (r.received, r.received, 0), r
    assert sum(r.sent for r in rows) == n  # the test's count, not the plugin's
    log = truth.audit_log
    assert log is not None and not log.malformed
    producers = [s for s in log.tier(PRODUCER_TIER) if s.topic == topic]
    finals = [s for s in producers if s.final]
    assert finals and all(s.accounted and s.failed == 0 for s in finals)
    assert sum(s.acknowledged for s in finals) == n
    for s in finals:
        assert s.producer_identity is not None and s.producer_identity.library == "kafka-audit-librdkafka"
        assert s.producer_identity.client_id == client_id and s.source == client_id
        assert s.latency_p50_ms is not None and s.latency_max_ms is not None
    acked: dict[int, int] = defaultdict(int)
    for s in finals:
        for p in s.partitions:
            acked[p.partition] += p.acknowledged
            assert p.last_offset is not None and p.last_offset >= 0
    assert sorted(acked) == [0, 1, 2] and sum(acked.values()) == n
    return finals


def test_kcat_audited_by_the_plugin_alone(
    request: pytest.FixtureRequest, kconfig: dict[str, str], bootstrap: str, topic: str
) -> None:
    audit_topic = unique_name(request, ".audit")
    ensure_topic(kconfig, audit_topic, 3)
    plugin = f"plugin.library.paths={rdkafka_plugin()}"
    args = ["kcat", "-P", "-K:", "-b", bootstrap, "-t", topic, "-X", plugin]
    for k, v in {**_audit_settings(audit_topic), "client.id": "kcat-audited"}.items():
        args += ["-X", f"{k}={v}"]
    lines = "".join(f"k{i}:record-{i:06d}-{'x' * 80}\n" for i in range(N))  # keyed: every partition
    done = subprocess.run(args, input=lines, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    truth = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topic, timeout_s=60)
    finals = _check_exact(truth, topic, N, "kcat-audited")
    assert all("librdkafka 2.0" in s.producer_identity.library_version for s in finals)  # Debian's, kcat's


def test_confluent_kafka_producer_audited_by_the_plugin_alone(
    request: pytest.FixtureRequest, kconfig: dict[str, str], bootstrap: str, topic: str
) -> None:
    audit_topic = unique_name(request, ".audit")
    ensure_topic(kconfig, audit_topic, 3)
    producer = _plugin_producer(bootstrap, audit_topic, **{"client.id": "ck-audited"})
    for i in range(N):
        # every other record with application headers: the stamp is added to them
        headers = [("app", b"1")] if i % 2 else None
        producer.produce(
            topic, key=str(i).encode(), value=b"v" * 100, headers=headers
        )  # keyed: every partition
        if i % 2000 == 1999:  # the next records reuse the delivered ones' header lists (header_pool.c),
            assert producer.flush(30) == 0  # one-byte sequences' (1-127) for two-byte ones among them
    assert producer.flush(30) == 0
    del producer  # rd_kafka_destroy: the plugin's final snapshots
    truth = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topic, timeout_s=60)
    finals = _check_exact(truth, topic, N, "ck-audited")
    wheel = f"librdkafka {confluent_kafka.libversion()[0]}"  # the wheel's own copy, not Debian's
    assert all(wheel in s.producer_identity.library_version for s in finals)
    assert sum(s.bytes for s in finals) == 100 * N
    apps = [
        m.headers()
        for m in read_to_end(kconfig, topic, group_id=unique_name(request, ".headers"), read_committed=False)
    ]
    assert sum(1 for h in apps if h and ("app", b"1") in h) == N // 2, "application headers kept"
    stamps = [next(v for k, v in h if k == stamp.STAMP_HEADER) for h in apps]
    pid = finals[0].producer_id
    decoded = [stamp.decode(stamp.STAMP_HEADER, v) for v in stamps]
    assert {p for p, _ in decoded} == {pid.encode()}
    assert sorted(seq for _, seq in decoded) == list(range(1, N + 1))  # from 1, none twice, none missing
    assert all(v == stamp.encode(pid, seq) for v, (_, seq) in zip(stamps, decoded, strict=True))

    reader = unique_name(request, ".raw")
    raw = [m.value() for m in read_to_end(kconfig, audit_topic, group_id=reader, read_committed=False)]
    assert raw and all(v[:2] == codec.SINGLE_OBJECT_MAGIC and v[2:10] == codec.fingerprint() for v in raw)
    for value in raw:  # fastavro decodes the plugin's bytes and encodes them back to the same bytes
        parsed = codec.reading_schema()
        data = fastavro.schemaless_reader(io.BytesIO(value[10:]), parsed, parsed)
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, data)
        assert out.getvalue() == value[10:]
    # the record a Python producer writes for the same counts (window_counts.window_snapshots' fields)
    s = finals[0]
    python = AuditRecord(
        tier=PRODUCER_TIER,
        source="ck-audited",
        producer_id=s.producer_id,
        topic=topic,
        window_start_ms=s.window_start_ms,
        window_end_ms=s.window_start_ms + WINDOW_MS,
        final=True,
        sent=s.sent,
        acknowledged=s.sent,
        failed=0,
        bytes=100 * s.sent,
        first_sequence=s.first_sequence,
        last_sequence=s.last_sequence,
        producer_config=ProducerConfig(
            acks="all",
            enable_idempotence=False,
            batch_num_messages=10000,
            linger_ms=5.0,
            message_timeout_ms=300000,
            message_send_max_retries=2147483647,
            retry_backoff_ms=100,
        ),
        partitions=[
            PartitionDelivery(partition=p.partition, acknowledged=p.acknowledged, last_offset=p.last_offset)
            for p in s.partitions
        ],
        producer_identity=s.producer_identity,
        accounted=True,
    )
    mine = dataclasses.asdict(s)
    theirs = dataclasses.asdict(python)
    for field in ("record_id", "emitted_at_ms", "host", "latency_p50_ms", "latency_p99_ms", "latency_max_ms"):
        mine.pop(field), theirs.pop(field)  # per emission, or the plugin's extra (the JVM's latency)
    assert mine == theirs


def test_acknowledgement_latency_is_each_produce_responses_receive_time_minus_createtime(
    request: pytest.FixtureRequest, kconfig: dict[str, str], bootstrap: str, topic: str
) -> None:
    """Three bursts, each delivered before the next is produced, every record waiting ``linger.ms`` 200:
    latencies of about 200 ms in every window. The acknowledgement time is read once per Produce response
    (``on_response_received``); one left from an earlier response would put the later bursts' latencies
    below their CreateTimes, reported as 0."""
    audit_topic = unique_name(request, ".audit")
    ensure_topic(kconfig, audit_topic, 3)
    producer = _plugin_producer(bootstrap, audit_topic, **{"client.id": "ck-latency", "linger.ms": 200})
    producer.list_topics(topic, timeout=30)
    for burst in range(3):
        for i in range(100):
            producer.produce(topic, key=f"{burst}.{i}".encode(), value=b"v" * 100)  # every partition
        deadline = time.monotonic() + 30
        while len(producer) and time.monotonic() < deadline:  # not flush(): it sends without lingering
            producer.poll(0.05)
        assert len(producer) == 0
    del producer
    truth = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topic, timeout_s=60)
    finals = _check_exact(truth, topic, 300, "ck-latency")
    for s in finals:
        assert s.latency_p50_ms is not None and s.latency_max_ms is not None
        assert 150 <= s.latency_p50_ms <= s.latency_max_ms < 10_000, s


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("kafka.audit.window.ms", "soon", "kafka.audit.window.ms"),
        ("kafka.audit.enabled", "maybe", "allowed values: true, false"),
        ("kafka.audit.windw.ms", "1000", "No such configuration property"),
        ("kafka.audit.producer.acks", "sometimes", "kafka.audit.producer.acks"),
    ],
)
def test_misconfigured_plugin_fails_the_configuration_clearly(key: str, value: str, message: str) -> None:
    with pytest.raises(confluent_kafka.KafkaException) as err:
        confluent_kafka.Producer({"plugin.library.paths": str(rdkafka_plugin()), key: value})
    assert message in str(err.value) and key in str(err.value)


def test_unloadable_plugin_and_kcat_misconfiguration_fail_clearly(bootstrap: str, topic: str) -> None:
    with pytest.raises(confluent_kafka.KafkaException) as err:
        confluent_kafka.Producer({"plugin.library.paths": "/nonexistent/librdkafka-audit-plugin.so"})
    assert "/nonexistent/librdkafka-audit-plugin.so" in str(err.value)
    args = ["kcat", "-P", "-b", bootstrap, "-t", topic, "-X", f"plugin.library.paths={rdkafka_plugin()}"]
    done = subprocess.run(
        [*args, "-X", "kafka.audit.max.windows=0"], input="x\n", capture_output=True, text=True, timeout=30
    )
    assert done.returncode != 0 and "kafka.audit.max.windows" in done.stderr and "1 to 30000" in done.stderr


@pytest.mark.slow
def test_plugin_and_java_interceptor_on_one_topic_reconcile_exactly(
    kconfig: dict[str, str], bootstrap: str, topic: str, audit_topics: dict[str, str]
) -> None:
    """A confluent_kafka.Producer with the plugin and kafka-producer-perf-test with the JVM interceptor write
    one topic beside the audit consumer: per window one cluster-tier count, equal to the verifier's, and each
    producer's final sent equal to what the topic holds of it."""
    audit_topic = audit_topics["audit_topic"]
    for t in (audit_topic, audit_topics["state_topic"]):
        ensure_topic(kconfig, t, 3)
    n_python, n_java = 10_000, 10_000
    settings = consumer_settings(bootstrap, [topic], audit_topics, grace_ms=3_000)
    with running_consumer(settings):
        java = subprocess.Popen(
            perf_producer(
                topic,
                n_java,
                5_000,
                {
                    "bootstrap.servers": bootstrap,
                    "client.id": "java-audited",
                    "interceptor.classes": PRODUCER_INTERCEPTOR,
                    "kafka.audit.topic": audit_topic,
                    "kafka.audit.window.ms": str(WINDOW_MS),
                    "kafka.audit.grace.ms": "1000",
                },
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        producer = _plugin_producer(bootstrap, audit_topic, **{"client.id": "ck-audited"})
        for i in range(n_python):
            producer.produce(topic, value=b"p" * 100)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(30) == 0
        del producer
        out, _ = java.communicate(timeout=120)
        assert java.returncode == 0, out[-3000:]
        wait_for_final_windows(kconfig, topic, audit_topic, 60)
    v = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topic, timeout_s=60)
    assert v.messages == n_python + n_java and v.malformed_stamps == 0
    assert all(pid is not None and r.final for (_, pid), r in v.rows.items())
    libraries = {
        s.producer_id: s.producer_identity.library
        for s in v.audit_log.tier(PRODUCER_TIER)
        if s.topic == topic and s.producer_identity is not None
    }
    assert sorted(set(libraries.values())) == ["kafka-audit-java", "kafka-audit-librdkafka"]
    sent = defaultdict(int)
    for (_, pid), r in v.rows.items():
        assert (r.sent, r.unique, r.duplicated) == (r.received, r.received, 0), r
        sent[libraries[pid]] += r.sent
    assert sent == {"kafka-audit-java": n_java, "kafka-audit-librdkafka": n_python}
    assert compare_with_cluster(v, CLUSTER) == []  # the cluster tier's final counts per window: exact
    # The Spark job's reconciliation (its pure function) over each window's newest snapshots: one result per
    # window, whose sent sums both producers' finals and equals what the topic holds; nothing lost or doubled.
    received: dict[int, int] = defaultdict(int)
    for (start, _), r in v.rows.items():
        received[start] += r.received
    by_window: dict[int, list[AuditRecord]] = defaultdict(list)
    for s in v.audit_log.records.values():
        if s.topic == topic:
            by_window[s.window_start_ms].append(s)
    assert set(by_window) == set(received)
    for start, records in by_window.items():
        compacted = [compact(s, 0, i) for i, s in enumerate(records)]
        (row,) = reconcile(topic, start, start + WINDOW_MS, compacted, [CLUSTER], "final")
        assert row["sent"] == row["received"] == row["unique"] == received[start], row
        assert (row["duplicated"], row["unaudited"], row["failed"], row["loss_rate"]) == (0, 0, 0, 0.0), row
        assert row["producers"] == len({s.producer_id for s in records if s.tier == PRODUCER_TIER})
    assert sum(received.values()) == n_python + n_java


def test_unreachable_audit_cluster_stays_out_of_the_way(
    bootstrap: str, kconfig: dict[str, str], topic: str
) -> None:
    """The plugin's own producer cannot reach its cluster: every record still arrives, stamped, no produce()
    fails, and destroying the client waits at most kafka.audit.close.timeout.ms for the final snapshots."""
    producer = confluent_kafka.Producer(
        {
            "plugin.library.paths": str(rdkafka_plugin()),
            "bootstrap.servers": bootstrap,
            "kafka.audit.producer.bootstrap.servers": "127.0.0.1:9",  # nothing listens
            "kafka.audit.producer.log_level": "0",
            "kafka.audit.window.ms": "1000",
            "kafka.audit.grace.ms": "0",
            "kafka.audit.snapshot.interval.ms": "200",
            "kafka.audit.close.timeout.ms": "2000",
        }
    )
    n = 2_000
    for _ in range(n):
        producer.produce(topic, value=b"u" * 10)
    assert producer.flush(30) == 0
    t0 = time.monotonic()
    del producer
    assert time.monotonic() - t0 < 4  # kafka.audit.close.timeout.ms, then the client's own destruction
    got = list(read_to_end(kconfig, topic, group_id=f"{topic}.reader", read_committed=False))
    assert len(got) == n and all(m.headers() and m.headers()[0][0] == stamp.STAMP_HEADER for m in got)


def test_a_late_record_continues_its_closed_windows_counts(
    request: pytest.FixtureRequest, kconfig: dict[str, str], bootstrap: str, topic: str
) -> None:
    """A record with a CreateTime in a window whose final snapshot the audit topic already has: the window's
    next final counts it on top of the earlier ones (the JVM's retired windows), never from 0 again."""
    audit_topic = unique_name(request, ".audit")
    ensure_topic(kconfig, audit_topic, 3)
    producer = _plugin_producer(bootstrap, audit_topic, **{"kafka.audit.snapshot.interval.ms": "200"})
    old = int(time.time() * 1000) - 60_000  # a window long over: it closes once its records are reported
    start = old - old % WINDOW_MS

    def window_final() -> AuditRecord | None:
        log = read_audit_log(kconfig, audit_topic)
        mine = [s for s in log.tier(PRODUCER_TIER) if s.topic == topic and s.window_start_ms == start]
        return mine[0] if len(mine) == 1 and mine[0].final else None

    for _ in range(100):
        producer.produce(topic, value=b"a" * 10, timestamp=old)
    assert producer.flush(30) == 0
    first = wait_for(window_final, 30, "the window's final snapshot", interval_s=0.2)
    assert (first.sent, first.acknowledged) == (100, 100)
    producer.produce(topic, value=b"b" * 10, timestamp=old + 1)
    assert producer.flush(30) == 0
    del producer  # rd_kafka_destroy: the plugin's last finals, delivered within kafka.audit.close.timeout.ms

    def next_final() -> AuditRecord | None:
        s = window_final()
        return s if s is not None and s.record_id != first.record_id else None

    again = wait_for(next_final, 30, "the window's next final snapshot", interval_s=0.2)
    assert (again.sent, again.acknowledged, again.bytes) == (101, 101, 1010)
    assert again.first_sequence == first.first_sequence and again.last_sequence == 101
