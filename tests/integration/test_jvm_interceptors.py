"""Issue 38: Java clients audited by configuration alone (the JVM interceptors, jvm/interceptors).

Real KRaft broker (the session fixture). Kafka's own ``kafka-producer-perf-test``
(``org.apache.kafka.tools.ProducerPerformance``) writes N records into a 3-partition topic with nothing but
``interceptor.classes=io.kafkaaudit.interceptors.AuditProducerInterceptor`` (and the test's audit topic and
window) added, and ``kafka-consumer-perf-test`` (``ConsumerPerformance``) reads them back in a consumer group
with ``AuditConsumerInterceptor``. The verifier (:func:`audit_consumer.ground_truth.verify_topic`) then
reads the topic and the audit topic (decoding the Java snapshots with :mod:`audit_record.codec`): every final
window's ``sent`` equals what the topic holds, ``sent`` summed equals N (the perf tool's count, not the
interceptor's), nothing is unaudited, and the consumer tier ``consumer:<group>`` counts every record once.
A second test runs the same tools beside the real audit consumer and Spark job (local[2]): the final window
results of the tiers ``producer``, ``cluster:<name>`` and ``consumer:<group>`` equal the verifier's counts. A
third has a Java application read a MirrorMaker 2-style copy (``A.<topic>``) and report its tier under the
source topic. A fourth checks the audit record bytes both ways: Python-written records decode in Java and
Java encodes them again to the same bytes.
"""

from __future__ import annotations

import subprocess
import zlib
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupState, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from audit_consumer import counts
from audit_consumer.ground_truth import verify_topic
from audit_consumer.state_codec import decode_state
from audit_record import PRODUCER_TIER, codec
from audit_record.record import AuditRecord, PartitionDelivery, ProducerIdentity, consumer_tier
from kafka_plumbing.interceptor_jar import CONSUMER_INTERCEPTOR, PRODUCER_INTERCEPTOR, interceptor_jar
from kafka_plumbing.jvm import classpath, jars_dir, java_executable
from kafka_plumbing.topics import STATE_TOPIC_CONFIG, ensure_topic, read_to_end
from spark_streaming.job import ReconciliationJob
from spark_streaming.results import final_results, read_results
from spark_streaming.settings import SparkJobSettings
from tests.conftest import unique_name

from .helpers import CLUSTER, consumer_settings, running_consumer, wait_for

pytestmark = pytest.mark.integration

N = 30_000
WINDOW_MS = 5_000


def _java_command(main: str, *args: str) -> list[str]:
    """A Kafka tool's main class with the Kafka jars and the interceptors' jar on the class path."""
    return [java_executable(), "-Xmx512m", "-cp", f"{classpath('kafka')}:{interceptor_jar()}", main, *args]


def _java(main: str, *args: str, timeout_s: float = 180.0) -> subprocess.CompletedProcess[str]:
    """Run :func:`_java_command` to its end."""
    return subprocess.run(_java_command(main, *args), capture_output=True, text=True, timeout=timeout_s)


def _perf_producer(bootstrap: str, topic: str, n: int, audit_topic: str) -> None:
    """kafka-producer-perf-test: ``n`` records of 100 bytes, audited by ``interceptor.classes`` alone."""
    produced = _java(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", topic,
        "--num-records", str(n),
        "--record-size", "100",
        "--throughput", "10000",
        "--command-property",
        f"bootstrap.servers={bootstrap}",
        f"interceptor.classes={PRODUCER_INTERCEPTOR}",
        "client.id=perf-producer",
        f"kafka.audit.topic={audit_topic}",
        f"kafka.audit.window.ms={WINDOW_MS}",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr[-3000:]


def _start_perf_consumer(
    bootstrap: str, topic: str, n: int, group: str, props: Path, timeout_ms: int = 60_000
) -> subprocess.Popen[str]:
    """Start kafka-consumer-perf-test: up to ``n`` records in group ``group`` (settings file ``props``).

    It stops after ``n`` records or ``timeout_ms`` without any (counted from its start).
    """
    return subprocess.Popen(
        _java_command(
            "org.apache.kafka.tools.ConsumerPerformance",
            "--bootstrap-server", bootstrap,
            "--topic", topic,
            "--num-records", str(n),
            "--group", group,
            "--command-config", str(props),
            "--timeout", str(timeout_ms),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _finish(consumer: subprocess.Popen[str], timeout_s: float = 180.0) -> str:
    """Wait for a perf consumer to exit; return its stdout; fail with its stderr if it failed."""
    try:
        out, err = consumer.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        consumer.kill()
        out, err = consumer.communicate()
    assert consumer.returncode == 0, err[-3000:]
    return out


def _perf_consumer(
    bootstrap: str, topic: str, n: int, group: str, props: Path, timeout_ms: int = 60_000
) -> None:
    """kafka-consumer-perf-test to its end (:func:`_start_perf_consumer`)."""
    _finish(_start_perf_consumer(bootstrap, topic, n, group, props, timeout_ms))


def _group_reads(admin: AdminClient, group: str, topic: str) -> bool:
    """Whether consumer group ``group`` is stable with every partition of ``topic`` assigned."""
    [description] = admin.describe_consumer_groups([group]).values()
    try:
        d = description.result(timeout=10)
    except KafkaException:
        return False
    assigned = {
        tp.partition
        for m in d.members
        if m.assignment
        for tp in m.assignment.topic_partitions
        if tp.topic == topic
    }
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    return d.state == ConsumerGroupState.STABLE and assigned == set(partitions)


def test_perf_tools_audited_by_configuration_alone(
    request: pytest.FixtureRequest, kconfig: dict[str, str], bootstrap: str, topic: str, tmp_path: Path
) -> None:
    audit_topic = unique_name(request, ".audit")
    dlq_topic = unique_name(request, ".dlq")
    ensure_topic(kconfig, audit_topic, 3)
    audit = [f"kafka.audit.topic={audit_topic}", f"kafka.audit.window.ms={WINDOW_MS}"]
    _perf_producer(bootstrap, topic, N, audit_topic)
    group = unique_name(request, ".group")
    state_topic = unique_name(request, ".state")
    ensure_topic(kconfig, state_topic, 3, topic_config=STATE_TOPIC_CONFIG)
    props = tmp_path / "consumer.properties"
    props.write_text(
        "\n".join(
            [
                f"interceptor.classes={CONSUMER_INTERCEPTOR}",
                f"kafka.audit.dlq.topic={dlq_topic}",
                f"kafka.audit.state.topic={state_topic}",
                *audit,
            ]
        )
    )
    # The group reads the topic in two runs, as an application restarted halfway: the second member reads
    # the first one's state back and continues its counts.
    _perf_consumer(bootstrap, topic, N // 2, group, props)
    _perf_consumer(bootstrap, topic, N, group, props, timeout_ms=8_000)

    truth = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topic, timeout_s=120)
    assert truth.messages == N and truth.malformed_stamps == 0
    rows = list(truth.rows.values())
    assert all(r.producer_id is not None for r in rows), "no unaudited messages"
    assert len({r.producer_id for r in rows}) == 1 and rows[0].producer_id.startswith("~")
    for r in rows:  # every window: the producer's final sent equals what the topic holds
        assert r.final, f"window {r.window_start_ms} has no final producer snapshot"
        assert (r.sent, r.unique, r.duplicated) == (r.received, r.received, 0), r
    assert sum(r.sent for r in rows) == N  # the perf tool's count, not the interceptor's

    log = truth.audit_log
    assert log is not None and not log.malformed
    producers = [s for s in log.tier(PRODUCER_TIER) if s.topic == topic]
    assert all(s.final and s.accounted and s.failed == 0 for s in producers)
    assert all(
        s.producer_identity is not None and s.producer_identity.library == "kafka-audit-java"
        for s in producers
    )
    assert all(s.producer_identity.client_id == "perf-producer" for s in producers)
    assert sum(s.acknowledged for s in producers) == N
    # the client's own request latency (JMX producer-node-metrics), as librdkafka's rtt.avg
    assert any(s.network is not None and s.network.rtt_avg_ms for s in producers)
    acked_by_partition: dict[int, int] = defaultdict(int)
    for s in producers:
        for p in s.partitions:
            acked_by_partition[p.partition] += p.acknowledged
            assert p.last_offset is not None and p.last_offset >= 0
    assert sorted(acked_by_partition) == [0, 1, 2] and sum(acked_by_partition.values()) == N

    consumers = [s for s in log.tier(consumer_tier(group)) if s.topic == topic]
    assert consumers, "the consumer tier reported"
    assert sum(s.received for s in consumers) == N
    assert sum(s.unique for s in consumers) == N
    assert sum(s.duplicated + s.unaudited + s.late for s in consumers) == 0
    by_window: dict[int, int] = defaultdict(int)
    for s in consumers:
        by_window[s.window_start_ms] += s.unique
        assert s.read_offsets and s.read_offsets[0].partition == s.partition
    assert dict(by_window) == {r.window_start_ms: r.unique for r in rows}
    records = list(read_to_end(kconfig, state_topic, group_id=unique_name(request, ".reader")))
    # in the partition librdkafka's clients (AuditedConsumer) put the key in: one log per key for mixed groups
    assert records and all(m.partition() == zlib.crc32(m.key()) % 3 for m in records)
    states = {m.key(): decode_state(m.value(), WINDOW_MS, 30_000) for m in records}
    assert states, "the consumer tier's state, in AuditedConsumer's format"
    newest = [states[k] for k in states if k.startswith(consumer_tier(group).encode())]
    assert sorted(st.partition for st in newest) == [0, 1, 2]
    assert sum(b[counts.RECEIVED] for st in newest for b in (*st.open.values(), *st.closed.values())) == N


@pytest.mark.slow
def test_java_tiers_reconcile_exactly_in_the_spark_job(
    request: pytest.FixtureRequest,
    kconfig: dict[str, str],
    bootstrap: str,
    topic: str,
    audit_topics: dict[str, str],
    tmp_path: Path,
) -> None:
    """Java producer and consumer group beside the audit consumer: every tier's final results are exact.

    The job writes one result per (topic, window, reading tier); each carries the producers' ``sent``.
    """
    n = 20_000
    audit_topic = audit_topics["audit_topic"]
    for t in (audit_topic, audit_topics["state_topic"]):
        ensure_topic(kconfig, t, 3)
    settings = SparkJobSettings(
        bootstrap_servers=bootstrap,
        audit_topic=audit_topic,
        dlq_topic=audit_topics["dlq_topic"],
        results_topic=f"{audit_topic}.results",
        commits_topic=f"{audit_topic}.commits",
        checkpoint_dir=tmp_path / "checkpoint",
        parquet_dir=tmp_path / "parquet",
        clusters=[CLUSTER],
        trigger_ms=1_000,
        watermark_delay_ms=2_000,
        grace_ms=8_000,
        heartbeat_ms=500,
        query_name=f"q-jvm-{audit_topic[-8:]}",
    )
    group = unique_name(request, ".group")
    tiers = {f"cluster:{CLUSTER}", consumer_tier(group)}  # results per reading tier; sent is the producers'
    props = tmp_path / "consumer.properties"
    props.write_text(
        f"interceptor.classes={CONSUMER_INTERCEPTOR}\nkafka.audit.topic={audit_topic}\n"
        f"kafka.audit.window.ms={WINDOW_MS}\nkafka.audit.dlq.topic={audit_topics['dlq_topic']}\n"
        f"kafka.audit.state.topic={audit_topics['state_topic']}\n"
    )
    job = ReconciliationJob(settings)
    job.start()
    try:
        with running_consumer(consumer_settings(bootstrap, [topic], audit_topics, window_ms=WINDOW_MS)):
            # the group reads before the producer starts, so the tier reports the window before its proof
            # holds (a consumer tier that has reported nothing by then is not waited for: late, by design)
            consumer = _start_perf_consumer(bootstrap, topic, n, group, props, timeout_ms=180_000)
            try:
                admin = AdminClient(kconfig)
                wait_for(lambda: _group_reads(admin, group, topic), 120, "the perf consumer's group assigned")
                _perf_producer(bootstrap, topic, n, audit_topic)
            except BaseException:
                consumer.kill()
                consumer.communicate()
                raise
            _finish(consumer)
            truth = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topic, timeout_s=120)
            windows = {start for start, _ in truth.rows}

            def all_final() -> dict[tuple[str, int, str], list[dict]] | None:
                if job.exception() is not None:
                    raise AssertionError(f"the Spark query failed: {job.exception()}")
                finals = final_results(read_results(kconfig, settings.results_topic))
                done = {(w, t) for (tp, w, t) in finals if tp == topic}
                return finals if all((w, t) in done for w in windows for t in tiers) else None

            try:
                finals = wait_for(all_final, 240, "final results of every window and tier")
            except AssertionError as exc:  # say which (window, tier) waits for what
                latest = {
                    (r["window_start_ms"], r["tier"]): (r["state"], r.get("final_rule"), r.get("waiting_for"))
                    for r in read_results(kconfig, settings.results_topic)
                    if r["topic"] == topic
                }
                raise AssertionError(f"{exc}; windows {sorted(windows)}; latest results {latest}") from exc
    finally:
        job.stop()
    assert sum(r.sent for r in truth.rows.values()) == n
    for start in windows:
        rows = [r for (s, _), r in truth.rows.items() if s == start]
        sent = sum(r.sent for r in rows)
        assert sent == sum(r.unique for r in rows) == sum(r.received for r in rows)
        for tier in tiers:
            results = finals[(topic, start, tier)]
            assert len(results) == 1, f"one final result per (topic, window, tier): {tier} {start}"
            res = results[0]
            assert (res["sent"], res["unique"], res["duplicated"], res["unaudited"]) == (sent, sent, 0, 0), (
                tier,
                start,
                res,
            )
            assert res["loss_rate"] == 0.0 and res["producers"] == 1 and res["acknowledged"] == sent


def test_a_consumer_of_a_mirrormaker2_copy_counts_under_the_source_topic(
    request: pytest.FixtureRequest, kconfig: dict[str, str], bootstrap: str, topic: str, tmp_path: Path
) -> None:
    """A Java application reading MirrorMaker 2's copy ``A.<topic>`` (``kafka.audit.replication.sources=A``):
    its tier counts the copy under the source topic, so it reconciles with the producers of ``<topic>``.

    The copy is made as MirrorMaker 2 makes it (each record to the same partition of ``A.<topic>`` with its
    key, value, headers and CreateTime), by a plain client on the one session broker.
    """
    audit_topic = unique_name(request, ".audit")
    state_topic = unique_name(request, ".state")
    ensure_topic(kconfig, audit_topic, 3)
    ensure_topic(kconfig, state_topic, 3, topic_config=STATE_TOPIC_CONFIG)
    n = 3_000
    _perf_producer(bootstrap, topic, n, audit_topic)
    copy = f"A.{topic}"
    ensure_topic(kconfig, copy, 3)
    mirror = Producer({**kconfig, "enable.idempotence": True})
    for m in read_to_end(kconfig, topic, group_id=unique_name(request, ".mirror")):
        _, create_time = m.timestamp()
        mirror.produce(copy, m.value(), m.key(), m.partition(), timestamp=create_time, headers=m.headers())
    assert mirror.flush(30) == 0
    group = unique_name(request, ".group")
    props = tmp_path / "consumer.properties"
    props.write_text(
        "\n".join(
            [
                f"interceptor.classes={CONSUMER_INTERCEPTOR}",
                f"kafka.audit.topic={audit_topic}",
                f"kafka.audit.state.topic={state_topic}",
                f"kafka.audit.window.ms={WINDOW_MS}",
                "kafka.audit.replication.sources=A",
            ]
        )
    )
    _perf_consumer(bootstrap, copy, n, group, props)

    truth = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topic, timeout_s=120)
    log = truth.audit_log
    assert log is not None
    consumers = list(log.tier(consumer_tier(group)))
    assert consumers and {s.topic for s in consumers} == {topic}, "the copy counted under its source topic"
    by_window: dict[int, int] = defaultdict(int)
    for s in consumers:
        by_window[s.window_start_ms] += s.unique
    assert dict(by_window) == {r.window_start_ms: r.sent for r in truth.rows.values()}
    assert sum(by_window.values()) == n


def test_audit_record_bytes_both_ways() -> None:
    """A Python-written record decodes in Java, and Java writes it back byte for byte (codec.py's bytes)."""
    records = [
        AuditRecord(
            tier="producer",
            source="app",
            topic="t",
            window_start_ms=60_000,
            window_end_ms=120_000,
            producer_id="~0123456789abcdef",
            sent=5,
            acknowledged=4,
            failed=1,
            first_sequence=1,
            last_sequence=5,
            partitions=[PartitionDelivery(partition=0, acknowledged=4, failed=1, failed_by_error={"X": 1})],
            producer_identity=ProducerIdentity(
                client_id="c", host="h", process_id=1, started_at_ms=2, library="kafka-audit-python",
                library_version="0.1.0",
            ),
        ),
        AuditRecord(tier="consumer:g", source="g", topic="t", window_start_ms=0, window_end_ms=5, received=3),
    ]  # fmt: skip
    written = [codec.encode(r) for r in records]
    jars = f"{jars_dir('kafka') / 'kafka-clients-4.3.1.jar'}:{classpath('kafka')}:{interceptor_jar()}"
    out = subprocess.run(
        [java_executable(), "-cp", jars, "io.kafkaaudit.interceptors.AuditRecordTool"],
        input="\n".join(b.hex() for b in written) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = out.stdout.strip().splitlines()
    assert len(lines) == len(records)
    for line, original, record in zip(lines, written, records, strict=True):
        text, again = line.split("\t")
        assert bytes.fromhex(again) == original
        assert f'"tier": "{record.tier}"' in text
        assert codec.decode(bytes.fromhex(again)) == record
