"""Who a v2 stamp's random producer id is: the producer's snapshots say it, readers show the name."""

from __future__ import annotations

import io
import os
import socket

import fastavro
from rich.console import Console

from audit_consumer.ground_truth import Verification, WindowTruth
from audit_producer.snapshot_emitter import LIBRARY, process_identity
from audit_producer.window_counts import window_snapshots
from audit_record import AuditRecord, NetworkStats, ProducerConfig, ProducerIdentity, codec, decode, encode
from audit_record.reader import SnapshotTable
from audit_record.stamp import new_producer_id
from kafka_audit.verification_report import producer_names, verification_table
from spark_streaming.metrics import ResultMetrics
from spark_streaming.reconcile import compact
from spark_streaming.window_state import producer_row

CONFIG = ProducerConfig(
    acks="all",
    enable_idempotence=True,
    batch_num_messages=4,
    linger_ms=5.0,
    message_timeout_ms=300,
    message_send_max_retries=2,
    retry_backoff_ms=100,
)


def _record(pid: str, identity: ProducerIdentity | None) -> AuditRecord:
    return AuditRecord(
        tier="producer",
        source="app",
        producer_id=pid,
        topic="orders",
        window_start_ms=60_000,
        window_end_ms=120_000,
        sent=10,
        producer_config=CONFIG,
        producer_identity=identity,
    )


def test_the_identity_names_this_process_and_the_stamp_format() -> None:
    pid = new_producer_id("app")
    ident = process_identity("app", pid)
    assert (ident.client_id, ident.host, ident.process_id) == ("app", socket.gethostname(), os.getpid())
    assert ident.library == LIBRARY and "librdkafka" in ident.library_version and ident.stamp_version == 2
    assert ident.name() == f"app@{socket.gethostname()}.{os.getpid()}"
    assert process_identity("app", new_producer_id("app", 1)).stamp_version == 1


def test_snapshots_carry_the_identity_and_it_round_trips_through_avro() -> None:
    pid = new_producer_id("app")
    ident = process_identity("app", pid)
    w = [0] * 20
    records = window_snapshots(
        w,
        client_id="app",
        producer_id=pid,
        topic="orders",
        start=60_000,
        end=120_000,
        final=False,
        configs=[CONFIG],
        network=NetworkStats(),
        in_flight_bytes=None,
        partitions=[],
        identity=ident,
    )
    assert records[0].producer_identity == ident
    assert decode(encode(records[0])).producer_identity == ident


def test_records_written_before_the_identity_decode_with_none() -> None:
    old = _record("app@h.1.ab", None).to_avro()
    del old["producer_identity"]
    buf = io.BytesIO()
    buf.write(codec.SINGLE_OBJECT_MAGIC + codec.fingerprint("audit_record.v6"))
    fastavro.schemaless_writer(buf, codec.schema("audit_record.v6"), old)
    rec = decode(buf.getvalue())
    assert rec.producer_identity is None and rec.producer_id == "app@h.1.ab"


def test_the_verify_table_names_producers_by_their_snapshots() -> None:
    v2 = "~0123456789abcdef"
    ident = ProducerIdentity(
        client_id="load", host="h", process_id=7, started_at_ms=1, library=LIBRARY, library_version="0"
    )
    table = SnapshotTable()
    for rec in (_record(v2, ident), _record("old@h.2.cd", None)):
        table.add(rec)
    assert producer_names(table) == {v2: "load@h.7"}
    rows = {
        (60_000, p): WindowTruth("orders", 60_000, p, sent=10, received=10, unique=10)
        for p in (v2, "old@h.2.cd")
    }
    v = Verification("orders", 60_000, rows, audit_log=table)
    rendered = io.StringIO()
    Console(file=rendered, width=200).print(verification_table(v))
    assert "load@h.7, old@h.2.cd" in rendered.getvalue()


def test_the_producer_metrics_name_v2_producers_and_keep_v1_ids() -> None:
    """Snapshot -> ``compact`` -> producer row -> Prometheus: the ``producer`` label is the readable name."""
    v2 = "~0123456789abcdef"
    ident = ProducerIdentity(
        client_id="load", host="h", process_id=7, started_at_ms=1, library=LIBRARY, library_version="0"
    )
    metrics = ResultMetrics()
    rows = [
        producer_row("orders", 60_000, 120_000, compact(_record(pid, who), 0, n))
        for n, (pid, who) in enumerate([(v2, ident), ("old@h.2.cd", None)])
    ]
    metrics.observe_producers(rows, now_s=1.0)
    named = {
        s.labels["producer_id"]: s.labels["producer"]
        for m in metrics.registry.collect()
        if m.name == "kafka_audit_producer_info"
        for s in m.samples
    }
    assert named == {v2: "load@h.7", "old@h.2.cd": "old@h.2.cd"}
