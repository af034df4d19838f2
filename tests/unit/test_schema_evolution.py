"""Audit record / window result schema evolution, the L estimate, and the D / L / M columns of a window."""

import dataclasses
import io
import json

import fastavro
import pandas as pd
import pytest

from audit_producer.network_stats import (
    MIN_OUT_SEGMENTS,
    TcpRetransmitMeter,
    parse_statistics,
    read_tcp_counters,
    read_tcp_timeouts,
)
from audit_record import (
    AuditRecord,
    MalformedRecordError,
    NetworkStats,
    ProducerConfig,
    codec,
    decode,
    encode,
    window_result,
)
from audit_record.window_result import FINAL
from spark_streaming.predict import predictable
from spark_streaming.reconcile import compact, reconcile
from spark_streaming.window_state import RESULT_COLUMNS

# Fingerprints of the schemas as first released, in the Avro specification's byte order (records written
# before issue 38 carry them reversed: codec.legacy_fingerprint). If a v1 file is edited by mistake
# (anything but docs), these change and old records stop decoding.
V1_FINGERPRINTS = {"audit_record.v1": "0699995adc3000c9", "window_result.v1": "cc442459afe35717"}


def _single_object(schema_name: str, body: dict) -> bytes:
    buf = io.BytesIO()
    buf.write(codec.SINGLE_OBJECT_MAGIC + codec.fingerprint(schema_name))
    fastavro.schemaless_writer(buf, codec.schema(schema_name), body)
    return buf.getvalue()


def _record(**kw):
    base = dict(
        tier="producer",
        source="app",
        producer_id="app@h.1.ab",
        topic="orders",
        window_start_ms=60_000,
        window_end_ms=120_000,
        sent=10,
        acknowledged=10,
        bytes=2_000,
        producer_config=ProducerConfig(
            acks="all",
            enable_idempotence=True,
            batch_num_messages=4,
            linger_ms=5.0,
            message_timeout_ms=300,
            message_send_max_retries=2,
            retry_backoff_ms=100,
        ),
        network=NetworkStats(rtt_avg_ms=1.5, tx_retries=3, tcp_retransmit_pct=12.5),
    )
    base.update(kw)
    return AuditRecord(**base)


def test_v1_schemas_are_the_released_ones():
    assert {n: codec.fingerprint(n).hex() for n in V1_FINGERPRINTS} == V1_FINGERPRINTS
    assert codec.fingerprint("audit_record") != codec.fingerprint("audit_record.v1")


def test_fingerprints_follow_the_avro_specification_and_the_old_byte_order_still_decodes():
    """Avro spec: the single object's fingerprint is the CRC-64-AVRO of the canonical form, little endian.

    The specification's value for the schema ``"null"`` is 0x63DD24E7CC258F8A (Java's
    ``SchemaNormalization.parsingFingerprint64``); records written before issue 38 carry the 8 bytes
    reversed, and still decode (audit record, window result and alert event alike).
    """
    assert codec.crc64_fingerprint(fastavro.parse_schema("null")) == (0x63DD24E7CC258F8A).to_bytes(
        8, "little"
    )
    record = _record()
    value = encode(record)
    assert value[2:10] == codec.fingerprint("audit_record")
    legacy = value[:2] + codec.legacy_fingerprint(value[2:10]) + value[10:]
    assert legacy != value and decode(legacy) == decode(value) == record
    body = record.to_avro()
    del body["network"]["tcp_retransmit_pct"]  # the v1 writer has no such field
    old = _single_object("audit_record.v1", body)
    assert decode(old[:2] + codec.legacy_fingerprint(old[2:10]) + old[10:]) == decode(old)


def test_record_written_with_v1_schema_decodes_with_null_loss_estimate():
    old = _record().to_avro()
    del old["network"]["tcp_retransmit_pct"]  # the v1 writer has no such field
    rec = decode(_single_object("audit_record.v1", old))
    assert rec.network == NetworkStats(rtt_avg_ms=1.5, tx_retries=3, tcp_retransmit_pct=None)
    assert (rec.sent, rec.producer_config.acks, rec.key()) == (10, "all", _record().key())


def test_current_records_round_trip_the_loss_estimate_and_unknown_schemas_are_rejected():
    assert decode(encode(_record())).network.tcp_retransmit_pct == 12.5
    with pytest.raises(MalformedRecordError) as exc:
        decode(codec.SINGLE_OBJECT_MAGIC + bytes.fromhex("0102030405060708") + b"\x00")
    assert exc.value.reason == "wrong_schema"


def test_window_result_written_with_v1_schema_decodes_with_null_predictions():
    v1_fields = [f["name"] for f in codec.schema("window_result.v1")["fields"]]
    row = {n: None for n, _ in RESULT_COLUMNS}
    row.update(
        topic="t",
        window_start_ms=0,
        window_end_ms=10,
        tier="cluster:a",
        state="final",
        result_at_ms=5,
        sent=4,
        acknowledged=4,
        failed=0,
        received=4,
        unique=4,
        duplicated=0,
        late=0,
        stale=0,
        unaudited=0,
        producers=1,
        unaudited_producers=0,
        tx_retries=0,
        request_timeouts=0,
        loss_rate=0.0,
    )
    out = codec.decode_object(
        "window_result", _single_object("window_result.v1", {k: row[k] for k in v1_fields})
    )
    assert out["loss_rate"] == 0.0 and out["sent"] == 4
    new = [n for n, _ in RESULT_COLUMNS if n not in v1_fields]
    assert "p_loss" in new and "suggestion" in new
    assert all(out[n] is None for n in new if n not in window_result.STRUCTURED_FIELDS)
    assert out["partitions"] == []  # structure defaults to empty, not null


def test_records_written_before_partitions_decode_with_none():
    old = _record().to_avro()
    del old["partitions"]
    assert decode(_single_object("audit_record.v2", old)).partitions == []
    v3 = _record(network=NetworkStats(rtt_avg_ms=9.0, rtt_min_ms=4.0)).to_avro()
    del v3["network"]["rtt_min_ms"]
    rec = decode(_single_object("audit_record.v3", v3))
    assert rec.network is not None and (rec.network.rtt_avg_ms, rec.network.rtt_min_ms) == (9.0, None)
    row = window_result.blank(topic="t", window_start_ms=0, tier="cluster:a")
    v4 = {f["name"] for f in codec.schema("window_result.v4")["fields"]}
    body = {k: v for k, v in row.items() if k in v4}
    body.update({k: 0 for k in ("window_end_ms", "sent", "acknowledged", "failed", "received", "unique")})
    body.update(
        {k: 0 for k in ("duplicated", "late", "stale", "unaudited", "producers", "unaudited_producers")}
    )
    body.update(state="final", result_at_ms=1, tx_retries=0, request_timeouts=0)
    assert codec.decode_object("window_result", _single_object("window_result.v4", body))["partitions"] == []


def _snmp(path, out_segs, retrans):
    path.write_text(
        "Ip: Forwarding DefaultTTL\nIp: 1 64\n"
        "Tcp: RtoAlgorithm RtoMin OutSegs RetransSegs InErrs\n"
        f"Tcp: 1 200 {out_segs} {retrans} 0\n"
    )


def test_tcp_retransmit_meter_ratio_over_the_interval(tmp_path):
    snmp = tmp_path / "snmp"
    _snmp(snmp, 1_000, 50)
    assert read_tcp_counters(snmp) == (1_000, 50)
    meter = TcpRetransmitMeter(snmp)
    _snmp(snmp, 1_200, 80)
    assert meter.sample() == pytest.approx(100 * 30 / 200)
    # too few segments (a stalled link): the last estimate again, and the interval extends
    _snmp(snmp, 1_200 + MIN_OUT_SEGMENTS - 1, 90)
    assert meter.sample() == pytest.approx(100 * 30 / 200)
    _snmp(snmp, 1_400, 91)
    assert meter.sample() == pytest.approx(100 * 11 / 200)
    _snmp(snmp, 10, 0)  # counters went back (another namespace): start over
    assert meter.sample() is None
    _snmp(snmp, 10 + MIN_OUT_SEGMENTS - 1, 0)  # too few and no estimate yet
    assert meter.sample() is None
    assert TcpRetransmitMeter(tmp_path / "missing").sample() is None


def test_the_real_proc_counters_are_read_on_linux():
    counters = read_tcp_counters()
    assert counters is not None and counters[0] >= counters[1] >= 0


def test_parse_statistics_carries_the_loss_estimate():
    stats = '{"brokers": {"b1": {"nodeid": 1, "rtt": {"cnt": 3, "avg": 4000, "p99": 9000}, "txretries": 2}}}'
    n = parse_statistics(stats, 7.5)
    assert (n.rtt_avg_ms, n.rtt_p99_ms, n.tx_retries, n.tcp_retransmit_pct) == (4.0, 9.0, 2, 7.5)
    brokers = {
        "b1": {"nodeid": 1, "rtt": {"cnt": 3, "avg": 90_000, "min": 41_000, "p99": 1}},
        "b2": {"nodeid": 2, "rtt": {"cnt": 2, "avg": 60_000, "min": 40_000, "p99": 1}},
        "b3": {"nodeid": 3, "rtt": {"cnt": 0, "avg": 0, "min": 0, "p99": 0}},  # no requests: no RTT
        "boot": {"nodeid": -1, "rtt": {"cnt": 1, "avg": 1, "min": 1, "p99": 1}},
    }
    assert parse_statistics(json.dumps({"brokers": brokers})).rtt_min_ms == 40.0
    assert parse_statistics("not json", 1.0).tcp_retransmit_pct == 1.0


def test_d_is_the_smallest_round_trip_of_the_window_where_producers_report_it():
    # p1: mean RTT 140 ms of which 100 ms queueing behind its backlog, best round trip 40 ms; p2 (an older
    # producer) reports no minimum: its mean RTT / 2 stands in.
    p1 = compact(_record(producer_id="p1", network=NetworkStats(rtt_avg_ms=140.0, rtt_min_ms=40.0)), 0, 1)
    p2 = compact(_record(producer_id="p2", network=NetworkStats(rtt_avg_ms=20.0)), 0, 2)
    [row] = reconcile("orders", 60_000, 120_000, [p1, p2], ["a"], FINAL)
    assert row["delay_ms_est"] == pytest.approx((40.0 + 10.0) / 2)
    assert row["rtt_avg_ms"] == pytest.approx(80.0)  # the mean RTT is still reported as measured
    [alone] = reconcile("orders", 60_000, 120_000, [p1], ["a"], FINAL)
    assert alone["delay_ms_est"] == pytest.approx(40.0)


def test_window_estimates_d_l_m_from_producer_snapshots():
    p1 = compact(_record(producer_id="p1", sent=300, bytes=30_000), 0, 1)
    p2 = compact(
        _record(
            producer_id="p2",
            sent=100,
            bytes=50_000,
            network=NetworkStats(rtt_avg_ms=4.5, tcp_retransmit_pct=2.0),
        ),
        0,
        2,
    )
    cluster = compact(
        _record(tier="cluster:a", producer_id="p1", sent=0, bytes=0, received=300, unique=300), 1, 1
    )
    [row] = reconcile("orders", 60_000, 120_000, [p1, p2, cluster], ["a"], FINAL)
    assert row["delay_ms_est"] == pytest.approx((1.5 + 4.5) / 2 / 2)  # no rtt_min_ms: D = mean RTT / 2
    assert row["packet_loss_pct_est"] == pytest.approx((12.5 * 300 + 2.0 * 100) / 400)  # weighted by sent
    assert row["message_size_bytes"] == pytest.approx(80_000 / 400)
    # State written by an older job: positional config and network lists (the network one without the
    # estimate), snapshots without bytes.
    network = p1["network"]
    old = {
        **p1,
        "network": [network["rtt_avg_ms"], network["tx_retries"], network["request_timeouts"]],
        "config": [p1["config"][k] for k in window_result.CONFIG_FIELDS],
    }
    del old["bytes"]
    [row] = reconcile("orders", 60_000, 120_000, [old, cluster], ["a"], FINAL)
    assert (row["packet_loss_pct_est"], row["message_size_bytes"], row["delay_ms_est"]) == (None, None, 0.75)
    assert {k: row[k] for k in window_result.CONFIG_FIELDS} == p1["config"]


def test_records_written_before_in_flight_bytes_decode_with_none():
    old = _record(in_flight_bytes=None).to_avro()
    del old["in_flight_bytes"]
    assert decode(_single_object("audit_record.v4", old)).in_flight_bytes is None
    assert decode(encode(_record(in_flight_bytes=12))).in_flight_bytes == 12


def _netstat(path, timeouts):
    path.write_text(
        "TcpExt: SyncookiesSent TCPTimeouts TCPLossProbes\n"
        f"TcpExt: 0 {timeouts} 7\n"
        "IpExt: InNoRoutes\nIpExt: 0\n"
    )


def test_the_meter_measures_retransmission_timeouts_per_segment_over_the_same_interval(tmp_path):
    snmp, netstat = tmp_path / "snmp", tmp_path / "netstat"
    _snmp(snmp, 1_000, 50)
    _netstat(netstat, 4)
    assert read_tcp_timeouts(netstat) == 4
    meter = TcpRetransmitMeter(snmp, netstat)
    assert meter.timeout_pct is None  # no interval measured yet
    _snmp(snmp, 1_200, 80)
    _netstat(netstat, 10)
    assert meter.sample() == pytest.approx(15.0)
    assert meter.timeout_pct == pytest.approx(100 * 6 / 200)  # 6 RTOs over the same 200 segments
    # a stalled link: the interval extends for both estimates
    _snmp(snmp, 1_205, 80)
    _netstat(netstat, 12)
    assert (meter.sample(), meter.timeout_pct) == (pytest.approx(15.0), pytest.approx(3.0))
    _snmp(snmp, 1_400, 90)
    assert meter.sample() == pytest.approx(5.0)
    assert meter.timeout_pct == pytest.approx(100 * 2 / 200)  # the 2 RTOs of the stall count here
    # no netstat file (or no TCPTimeouts in it): L is still measured, the rate is unknown
    blind = TcpRetransmitMeter(snmp, tmp_path / "missing")
    _snmp(snmp, 1_600, 100)
    assert blind.sample() == pytest.approx(5.0) and blind.timeout_pct is None
    assert read_tcp_timeouts(tmp_path / "missing") is None


def test_the_real_proc_timeout_counter_is_read_on_linux():
    timeouts = read_tcp_timeouts()
    assert timeouts is not None and timeouts >= 0


def test_records_written_before_the_timeout_rate_decode_with_none_and_the_window_weights_it_by_sent():
    old = _record().to_avro()
    del old["network"]["tcp_timeout_pct"]
    assert decode(_single_object("audit_record.v5", old)).network.tcp_timeout_pct is None
    assert decode(encode(_record(network=NetworkStats(tcp_timeout_pct=2.5)))).network.tcp_timeout_pct == 2.5
    assert parse_statistics("{}", 3.0, 0.4).tcp_timeout_pct == 0.4
    p1 = compact(_record(producer_id="p1", sent=300, network=NetworkStats(tcp_timeout_pct=3.0)), 0, 1)
    p2 = compact(_record(producer_id="p2", sent=100, network=NetworkStats(tcp_timeout_pct=1.0)), 0, 2)
    p3 = compact(_record(producer_id="p3", sent=100, network=NetworkStats()), 0, 3)  # unknown: not counted
    cluster = compact(_record(tier="cluster:a", producer_id="p1", sent=0, received=300, unique=300), 1, 1)
    [row] = reconcile("orders", 60_000, 120_000, [p1, p2, p3, cluster], ["a"], FINAL)
    assert row["tcp_timeout_pct_est"] == pytest.approx((3.0 * 300 + 1.0 * 100) / 400)
    [row] = reconcile("orders", 60_000, 120_000, [p3, cluster], ["a"], FINAL)
    assert row["tcp_timeout_pct_est"] is None


def test_window_results_written_before_unaccounted_decode_with_none():
    row = window_result.blank(topic="t", window_start_ms=0, tier="cluster:a")
    v6 = {f["name"] for f in codec.schema("window_result.v6")["fields"]}
    assert {"unaccounted", "unaccounted_unique"} <= set(window_result.FIELDS) - v6
    body = {k: v for k, v in row.items() if k in v6}
    body.update({k: 0 for k in ("window_end_ms", "sent", "acknowledged", "failed", "received", "unique")})
    body.update(
        {k: 0 for k in ("duplicated", "late", "stale", "unaudited", "producers", "unaudited_producers")}
    )
    body.update(state="final", result_at_ms=1, tx_retries=0, request_timeouts=0)
    out = codec.decode_object("window_result", _single_object("window_result.v6", body))
    assert (out["unaccounted"], out["unaccounted_unique"], out["sent"]) == (None, None, 0)
    now = dict(body, unaccounted=500, unaccounted_unique=1)
    out = codec.decode_object("window_result", _single_object("window_result", {**row, **now}))
    assert (out["unaccounted"], out["unaccounted_unique"]) == (500, 1)


def test_a_java_producer_config_has_no_batch_num_messages_and_v8_records_still_decode():
    """Audit record v9: ``batch_num_messages`` nullable (Java batches by bytes: ``batch_size_bytes``)."""
    java = dataclasses.replace(
        _record().producer_config, batch_num_messages=None, batch_size_bytes=16_384, acks="all"
    )
    rec = _record(producer_config=java)
    assert decode(encode(rec)).producer_config == java
    body = _record().to_avro()
    del body["producer_config"]["batch_size_bytes"]  # the v8 writer has no such field
    old = decode(_single_object("audit_record.v8", body))
    assert old.producer_config is not None
    assert (old.producer_config.batch_num_messages, old.producer_config.batch_size_bytes) == (4, None)


def test_windows_without_batch_num_messages_get_no_prediction_and_are_no_training_examples():
    row = {"kind": "result", "state": "final", "sent": 1_000, "acks": "all", "previous_tier": "producer"}
    rows = pd.DataFrame(
        [
            {**row, "batch_num_messages": 4, "message_timeout_ms": 300_000},
            {**row, "batch_num_messages": None, "message_timeout_ms": 120_000},  # a Java producer
        ]
    )
    assert predictable(rows).tolist() == [True, False]
