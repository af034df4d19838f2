"""Issue 36 item 5 acceptance: stamps that no producer accounts for are shown, not absorbed.

Real broker, audit consumer and Spark job (local[2]) with the alert pipeline. An audited producer writes
to a monitored topic; beside it, 500 messages carry a stamp naming a producer that never reports. v1:
kcat with the header ``kafka-audit.stamp=not-a-valid-stamp`` (17 bytes, which the v1 format reads as
producer ``not-a-val`` with one sequence, ``id-stamp``), as a new user tried it; v2: well-formed v2
stamps (key ``~a``, a random 8-byte id, sequences 1-500) from a plain producer that sends no snapshots.
The window results count the 500 as ``unaccounted`` (their distinct stamps as ``unaccounted_unique``),
never as sent, lost or duplicated: R_l and R_d of the audited producer equal the verifier's exactly.
The exporter's metrics, the live table and the report show them, and ``KafkaAuditUnaccountedMessages``
fires in the alerts topic; nothing goes to the dead-letter topic.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from confluent_kafka import Producer
from rich.console import Console

from alerts import AlertSettings, attach_to_job
from alerts.codec import decode_alert
from alerts.event import UNACCOUNTED_MESSAGES
from audit_consumer.ground_truth import verify_topic
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_record import PRODUCER_TIER, cluster_tier, stamp, window_result
from audit_record.reader import read_audit_log
from dashboards.report_tables import summary_table, unaudited_table
from kafka_audit.results_table import results_table
from kafka_plumbing.topics import read_to_end
from spark_streaming.job import ReconciliationJob
from spark_streaming.settings import SparkJobSettings
from tests.conftest import unique_name

from .helpers import CLUSTER, consumer_settings, running_consumer, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WINDOW_MS = 5_000
FORGED = 500
FORGED_STAMP = b"not-a-valid-stamp"
"""Issue 36's header value: the v1 format reads it as producer ``not-a-val``, sequence ``id-stamp``."""
FORGED_V1_PRODUCER = "not-a-val"
AUDITED_SECONDS = 8.0
AUDITED_RATE = 200  # messages per second


def _kcat_v1(bootstrap: str, topic: str) -> str:
    """Write :data:`FORGED` messages stamped ``kafka-audit.stamp=not-a-valid-stamp`` with kcat.

    Returns:
        The producer id the stamps name (as the v1 format reads them).
    """
    assert shutil.which("kcat"), "kcat (Debian package kcat) is a required dev tool: make bootstrap"
    lines = "".join(f"forged {i}\n" for i in range(FORGED))
    subprocess.run(
        ["kcat", "-P", "-b", bootstrap, "-t", topic, "-H", f"kafka-audit.stamp={FORGED_STAMP.decode()}"],
        input=lines,
        text=True,
        check=True,
        timeout=120,
    )
    return FORGED_V1_PRODUCER


def _forge_v2(bootstrap: str, topic: str) -> str:
    """Write :data:`FORGED` messages with well-formed v2 stamps of an id that never reports.

    A plain ``confluent_kafka.Producer`` (no snapshots): key ``~a``, a fresh random 8-byte id, the
    sequences 1 to 500, as a producer whose snapshots were all lost would leave them.

    Returns:
        The producer id the stamps name (its text form, ``~`` + 16 hex digits).
    """
    forged_id = stamp.new_producer_id("forger", 2)
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for seq in range(1, FORGED + 1):
        key, value = stamp.header(forged_id, seq)
        assert key == stamp.STAMP_HEADER and len(key) + len(value) <= 16
        plain.produce(topic, f"forged {seq}".encode(), headers=[(key, value)])
        plain.poll(0)
    assert plain.flush(30) == 0
    return forged_id


FORGERS: dict[str, Callable[[str, str], str]] = {"v1": _kcat_v1, "v2": _forge_v2}
"""Stamp format -> writes the forged messages (bootstrap, topic) and returns the producer id they name."""


def _produce_audited(producer: AuditedProducer, topic: str, seconds: float) -> int:
    """Send :data:`AUDITED_RATE` messages/s for ``seconds`` s; return how many were produced."""
    n, start = 0, time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        while n < elapsed * AUDITED_RATE:
            producer.produce(topic, f"audited {n}".encode())
            n += 1
        producer.poll(0.01)
    return n


def _render(table: Any) -> str:
    console = Console(width=220, record=True, color_system=None)
    console.print(table)
    return console.export_text()


@pytest.mark.parametrize("stamp_format", sorted(FORGERS))
def test_stamps_naming_no_reporting_producer_are_counted_shown_and_alerted(
    stamp_format: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    bootstrap: str,
    topic: str,
    audit_topics,
) -> None:
    kconfig = {"bootstrap.servers": bootstrap}
    tier = cluster_tier(CLUSTER)
    alerts_topic = unique_name(request, ".alerts")
    finals: dict[int, dict[str, Any]] = {}
    lock = threading.Lock()

    def on_results(_batch: int, rows: list[dict[str, Any]]) -> None:
        with lock:
            for r in rows:
                if r["state"] == window_result.FINAL and r["topic"] == topic and r["tier"] == tier:
                    finals[r["window_start_ms"]] = r

    job = ReconciliationJob(
        SparkJobSettings(
            bootstrap_servers=bootstrap,
            clusters=[CLUSTER],
            audit_topic=audit_topics["audit_topic"],
            dlq_topic=audit_topics["dlq_topic"],
            results_topic=unique_name(request, ".results"),
            commits_topic=unique_name(request, ".commits"),
            checkpoint_dir=tmp_path / "spark" / "checkpoint",
            parquet_dir=tmp_path / "spark" / "results",
            training_dir=tmp_path / "spark" / "training",
            model_registry_dir=tmp_path / "spark" / "models",
            trigger_ms=1_000,
            watermark_delay_ms=2_000,
            grace_ms=8_000,
            heartbeat_ms=500,
            query_name=f"q-unaccounted-{audit_topics['audit_topic'][-8:]}",
            predict=False,  # the unaccounted count needs no predictor; saves loading torch
            retrain=False,
        ),
        listeners=[on_results],
    )
    attach_to_job(job, AlertSettings(bootstrap_servers=bootstrap, alerts_topic=alerts_topic))
    job.start()
    try:
        with running_consumer(consumer_settings(bootstrap, [topic], audit_topics, window_ms=WINDOW_MS)):
            audit = ProducerAuditSettings(
                window_ms=WINDOW_MS,
                grace_ms=1_000,
                snapshot_interval_ms=1_000,
                audit_topic=audit_topics["audit_topic"],
            )
            producer = AuditedProducer(
                {**kconfig, "client.id": "audited", "acks": "all", "message.timeout.ms": 5_000}, audit
            )
            sent = _produce_audited(producer, topic, AUDITED_SECONDS / 2)
            forged_id = FORGERS[stamp_format](bootstrap, topic)  # while the audited producer writes
            sent += _produce_audited(producer, topic, AUDITED_SECONDS / 2)
            assert producer.flush(30) == 0
            producer.close()
            audited_id = producer.producer_id

            # Every window the audited producer or the forger wrote in gets its final result.
            log = read_audit_log(kconfig, audit_topics["audit_topic"])
            windows = {r.window_start_ms for r in log.tier(PRODUCER_TIER) if r.topic == topic}
            windows |= {r.window_start_ms for r in log.tier(tier) if r.topic == topic}

            def all_final() -> bool:
                assert job.exception() is None, job.exception()
                with lock:
                    done = windows <= set(finals)
                    counted = sum(r["unaccounted"] or 0 for r in finals.values())
                return done and counted >= FORGED

            wait_for(all_final, 180, "final results of every window, the forged messages counted", 1.0)
    finally:
        job.stop()

    rows = sorted(finals.values(), key=lambda r: r["window_start_ms"])
    # Counted in their own category, per window: all 500, one distinct stamp per window they fell in.
    assert sum(r["unaccounted"] for r in rows) == FORGED, rows
    with_forged = [r for r in rows if r["unaccounted"]]
    assert all(r["unaudited_producers"] == 1 for r in with_forged)
    # Distinct stamps per partition, summed: v1's one stamp copied 500 times (kcat spreads the copies over
    # the 3 partitions) counts once per partition it landed in; v2's 500 sequences are all distinct.
    for r in with_forged:
        if stamp_format == "v1":
            assert 1 <= r["unaccounted_unique"] <= min(3, r["unaccounted"]), r
        else:
            assert r["unaccounted_unique"] == r["unaccounted"], r
    # Never as sent, lost or duplicated: the audited producer's rates equal the verifier's exactly.
    truth = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topics["audit_topic"])
    assert sum(t.received for (_, pid), t in truth.rows.items() if pid == forged_id) == FORGED
    assert sum(r["sent"] for r in rows) == sent
    for r in rows:
        assert r["unique"] + r["duplicated"] + r["unaudited"] + r["unaccounted"] == r["received"], r
        mine = truth.rows.get((r["window_start_ms"], audited_id))
        forged = truth.rows.get((r["window_start_ms"], forged_id))
        assert r["unaccounted"] == (forged.received if forged else 0), r
        if stamp_format == "v2":  # all distinct, so per partition = over the topic
            assert r["unaccounted_unique"] == (forged.unique if forged else 0), r
        if mine is None or not mine.sent:
            assert r["sent"] == 0 and r["loss_rate"] is None, r
            continue
        assert (r["sent"], r["unique"], r["duplicated"]) == (mine.sent, mine.unique, mine.duplicated), r
        assert (r["loss_rate"], r["duplicate_rate"]) == (mine.loss_rate, mine.duplicate_rate), r
    assert truth.malformed_stamps == 0  # a stamp that decodes: not a dead letter
    assert list(read_to_end(kconfig, audit_topics["dlq_topic"], group_id="t", missing_ok=True)) == []

    # Shown: the exporter's metrics (what the dashboards and the Prometheus rule query), the live
    # table, the report.
    value = job.metrics.registry.get_sample_value
    labels = {"topic": topic, "tier": tier}
    assert value("kafka_audit_messages_unaccounted_total", labels) == FORGED
    assert value("kafka_audit_messages_lost_total", labels) == sum(
        max(0, r["sent"] - r["unique"]) for r in rows
    )
    table = _render(results_table({(topic, r["window_start_ms"], tier): r for r in rows}, {}))
    assert "unaccounted" in table.splitlines()[2]
    first = with_forged[0]
    cell = f"{first['unaccounted']:,} ({first['unaccounted_unique']:,} stamp"
    assert any(cell in line for line in table.splitlines() if topic[:20] in line), table
    report = unaudited_table(pd.DataFrame(rows))
    assert report.count("<tr>") == 1 + len(with_forged) and "(1 producer id)" in report
    assert f"<td>{FORGED}</td>" in summary_table(pd.DataFrame(rows))

    # Alerted: KafkaAuditUnaccountedMessages fired for the topic, on the first window with them.
    events = [decode_alert(m.value()) for m in read_to_end(kconfig, alerts_topic, group_id="t")]
    fired = [e for e in events if e.alertname == UNACCOUNTED_MESSAGES and e.topic == topic and e.firing]
    assert fired, [(e.alertname, e.topic, e.status) for e in events]
    assert (fired[0].window_start_ms, fired[0].value) == (first["window_start_ms"], first["unaccounted"])
    assert fired[0].numbers["unaccounted"] == first["unaccounted"] and fired[0].tier == tier
    assert "never reported" in fired[0].summary
