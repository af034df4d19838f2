"""Acceptance (b) and (d): SIGKILL and restart keeps counts exact; malformed input is dead-lettered."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import fastavro
import pytest
from confluent_kafka import Producer

from audit_consumer.ground_truth import verify_topic
from audit_producer import ProducerAuditSettings
from audit_producer.load import run_load
from audit_record import AuditRecord, codec, encode
from audit_record.dead_letter import REASON_HEADER
from audit_record.reader import read_audit_log
from audit_record.stamp import STAMP_HEADER, STAMP_HEADER_V1
from kafka_audit.verification_report import cluster_counts, compare_with_cluster
from kafka_plumbing.topics import read_to_end

from .helpers import CLUSTER, consumer_settings, running_consumer, wait_for, wait_for_final_windows

pytestmark = pytest.mark.integration


def _start_consumer(bootstrap: str, topic: str, audit_topics: dict[str, str], log) -> subprocess.Popen:
    env = {
        **os.environ,
        "KAFKA_AUDIT_CONSUMER_AUDIT_TOPIC": audit_topics["audit_topic"],
        "KAFKA_AUDIT_CONSUMER_STATE_TOPIC": audit_topics["state_topic"],
        "KAFKA_AUDIT_CONSUMER_DLQ_TOPIC": audit_topics["dlq_topic"],
        "KAFKA_AUDIT_CONSUMER_GROUP_ID": f"g.{audit_topics['state_topic']}",
    }
    cmd = [
        sys.executable,
        "-m",
        "kafka_audit",
        "audit-consumer",
        "-t",
        topic,
        "--cluster",
        CLUSTER,
        "--instance-id",
        "crashy",
        "--window-ms",
        "5000",
        "--grace-ms",
        "2000",
        "--commit-interval-ms",
        "300",
        "-b",
        bootstrap,
    ]
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


@pytest.mark.slow
def test_sigkill_and_restart_three_times_keeps_counts_exact(
    kconfig, bootstrap, topic, audit_topics, tmp_path
):
    audit = ProducerAuditSettings(
        window_ms=5_000,
        grace_ms=1_000,
        snapshot_interval_ms=1_000,
        audit_topic=audit_topics["audit_topic"],
        delivery_reports="errors",
    )
    results = []
    load = threading.Thread(
        target=lambda: results.append(
            run_load(
                {**kconfig, "client.id": "steady"},
                topic,
                "game",
                rate=3_000,
                count=60_000,
                duration_s=None,
                audit=audit,
            )
        )
    )
    log = open(tmp_path / "consumer.log", "wb")  # noqa: SIM115 - closed in the finally below
    rng = random.Random(7)
    kills = 0
    proc = _start_consumer(bootstrap, topic, audit_topics, log)
    load.start()
    try:
        while load.is_alive() or kills < 3:
            time.sleep(rng.uniform(2.0, 4.0))  # let it consume and commit for a while, then kill it mid-run
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            kills += 1
            proc = _start_consumer(bootstrap, topic, audit_topics, log)
        load.join()
        assert results and results[0].produced == 60_000
        wait_for_final_windows(kconfig, topic, audit_topics["audit_topic"], 120)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.close()
    assert kills >= 3
    v = verify_topic(kconfig, topic, 5_000, audit_topic=audit_topics["audit_topic"])
    assert sum(r.unique for r in v.rows.values()) == 60_000
    assert compare_with_cluster(v, CLUSTER) == [], (tmp_path / "consumer.log").read_text()[-3000:]
    counted = cluster_counts(v.audit_log, CLUSTER, topic)
    assert sum(c["received"] for c in counted.values()) == 60_000  # nothing counted twice
    assert sum(c["duplicated"] for c in counted.values()) == 0


def _malformed_audit_values(n: int) -> list[tuple[str, bytes]]:
    rng = random.Random(3)
    out: list[tuple[str, bytes]] = []
    good = AuditRecord(
        tier="producer",
        source="x",
        producer_id="x@h.1.aa",
        topic="t",
        window_start_ms=0,
        window_end_ms=5000,
        sent=10,
    )
    body = good.to_avro()
    for i in range(n):
        kind = i % 4
        if kind == 0:  # random bytes
            out.append(
                ("bad_magic", bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 200))) or b"\x00")
            )
        elif kind == 1:  # right magic, wrong schema fingerprint
            out.append(("wrong_schema", codec.SINGLE_OBJECT_MAGIC + os.urandom(8) + b"\x02xy"))
        elif kind == 2:  # our schema, negative counts (written without validation)
            import io

            buf = io.BytesIO()
            buf.write(codec.SINGLE_OBJECT_MAGIC + codec.fingerprint())
            fastavro.schemaless_writer(buf, codec.schema(), {**body, "sent": -rng.randint(1, 1000)})
            out.append(("negative_count", buf.getvalue()))
        else:  # our header, truncated body
            out.append(("undecodable", encode(good)[: rng.randint(11, 30)]))
    rng.shuffle(out)
    return out


def test_malformed_records_go_to_dead_letter_topic_and_nothing_stops(kconfig, bootstrap, topic, audit_topics):
    audit_topic, dlq = audit_topics["audit_topic"], audit_topics["dlq_topic"]
    audit = ProducerAuditSettings(
        window_ms=5_000, grace_ms=1_000, snapshot_interval_ms=1_000, audit_topic=audit_topic
    )
    raw = Producer(kconfig)
    bad_audit = _malformed_audit_values(1_000)
    with running_consumer(consumer_settings(bootstrap, [topic], audit_topics)) as consumer:
        # 1,000 data messages with broken audit stamps (v1 and v2), interleaved with good audited traffic.
        rng = random.Random(5)
        good = threading.Thread(
            target=run_load,
            args=({**kconfig, "client.id": "good"}, topic, "weblog"),
            kwargs={"rate": 2_000, "count": 5_000, "duration_s": None, "audit": audit},
        )
        good.start()
        for i in range(1_000):
            stamp = os.urandom(rng.randint(0, 8)) if i % 2 else b"bad id with spaces" + os.urandom(8)
            key = STAMP_HEADER if i % 4 < 2 else STAMP_HEADER_V1  # both formats: malformed either way
            raw.produce(topic, b"payload", headers=[(key, stamp)])
        for _, value in bad_audit:
            raw.produce(audit_topic, value, key=b"junk")
        assert raw.flush(30) == 0
        good.join()
        wait_for(lambda: consumer.stats.dead_letters >= 1_000, 60, "data-topic dead letters")
        wait_for_final_windows(kconfig, topic, audit_topic, 90)
        assert consumer.stats.dead_letters == 1_000
    # The audit-topic reader dead-letters the 1,000 malformed snapshots and reads everything else.
    table = read_audit_log(kconfig, audit_topic, dlq_topic=dlq)
    assert sum(table.malformed.values()) == 1_000
    expected_reasons = {}
    for reason, _ in bad_audit:
        expected_reasons[reason] = expected_reasons.get(reason, 0) + 1
    assert dict(table.malformed) == expected_reasons
    # Good traffic still counted exactly.
    v = verify_topic(kconfig, topic, 5_000, audit_topic=audit_topic)
    assert compare_with_cluster(v, CLUSTER) == []
    assert sum(r.unique for r in v.rows.values()) == 5_000
    # The dead-letter topic holds all 2,000, with the original bytes and the reason.
    letters = list(read_to_end(kconfig, dlq, group_id="dlq-check"))
    assert len(letters) == 2_000
    reasons = [dict(m.headers())[REASON_HEADER].decode() for m in letters]
    assert reasons.count("bad_stamp") == 1_000
    assert sorted(m.value() for m in letters if dict(m.headers())[REASON_HEADER] != b"bad_stamp") == sorted(
        v for _, v in bad_audit
    )
