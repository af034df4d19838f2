"""Attribution (issue 16 item 2): leaders from statistics, per-partition breakdown, alert, metric, sinks."""

from __future__ import annotations

import json
from typing import Any

import pyarrow.parquet as pq
import pytest

from alerts import AlertEngine, AlertSettings
from alerts.codec import decode_alert, encode_alert, schema
from alerts.event import COMPLETENESS_BELOW_TARGET
from audit_producer.leaders import LeaderHistory, partition_leaders
from audit_record import AuditRecord, PartitionDelivery, codec, decode, encode, window_result
from audit_record.window_result import FINAL
from spark_streaming.reconcile import compact, partition_breakdown, reconcile
from spark_streaming.sinks import ParquetResultSink


def _stats(leaders: dict[int, int], topic: str = "t") -> str:
    parts = {str(p): {"partition": p, "leader": b} for p, b in leaders.items()}
    parts["-1"] = {"partition": -1, "leader": -1}  # librdkafka's internal unassigned partition
    return json.dumps({"topics": {topic: {"partitions": parts}}})


def test_partition_leaders_from_statistics():
    assert partition_leaders(_stats({0: 1, 1: 2, 2: -1})) == {("t", 0): 1, ("t", 1): 2}
    assert partition_leaders("not json") == {}
    assert partition_leaders("{}") == {}


def test_leader_history_longest_leader_and_changes_in_a_window():
    h = LeaderHistory()
    h.observe({("t", 0): 1, ("t", 1): 2}, 1_000)
    h.observe({("t", 0): 1, ("t", 1): 2}, 2_000)  # unchanged: no entry
    h.observe({("t", 0): 3}, 7_000)  # partition 0 moves to broker 3
    assert h.during("t", 0, 0, 5_000) == (1, [1])  # before the first observation: unknown, then 1
    assert h.during("t", 0, 5_000, 10_000) == (3, [1, 3])  # 2 s on 1, 3 s on 3
    assert h.during("t", 0, 5_000, 7_500) == (1, [1, 3])
    assert h.during("t", 1, 10_000, 15_000) == (2, [2])  # the newest holds until now
    assert h.during("t", 0, -5_000, 0) == (1, [1])  # a window before any observation: the first one
    assert h.during("t", 9, 0, 5_000) == (None, [])
    h.forget_before(8_000)
    assert h.during("t", 0, 8_000, 9_000) == (3, [3])


def _producer(order, pid, sent, parts, **kw):
    return compact(
        AuditRecord(
            tier="producer",
            source="s",
            producer_id=pid,
            topic="t",
            window_start_ms=0,
            window_end_ms=10,
            sent=sent,
            acknowledged=sum(p.acknowledged for p in parts),
            failed=sum(p.failed for p in parts),
            partitions=parts,
            **kw,
        ),
        *order,
    )


def _cluster(order, pid, partition, unique, duplicated=0):
    rec = AuditRecord(
        tier="cluster:a",
        source="c",
        producer_id=pid,
        topic="t",
        window_start_ms=0,
        window_end_ms=10,
        partition=partition,
        received=unique + duplicated,
        unique=unique,
        duplicated=duplicated,
    )
    return compact(rec, *order)


def _snaps() -> list[dict[str, Any]]:
    return [
        _producer(
            (0, 1),
            "p1",
            100,
            [
                PartitionDelivery(partition=0, acknowledged=50, leader=1, leaders=[1]),
                PartitionDelivery(
                    partition=1,
                    acknowledged=20,
                    failed=30,
                    failed_by_error={"_MSG_TIMED_OUT": 28, "NOT_LEADER_OR_FOLLOWER": 2},
                    leader=2,
                    leaders=[2, 3],
                ),
            ],
        ),
        _producer((0, 2), "p2", 10, [PartitionDelivery(partition=1, acknowledged=10, leader=3, leaders=[3])]),
        _cluster((1, 1), "p1", 0, 50, duplicated=2),
        _cluster((1, 2), "p1", 1, 21),  # one of the failed reports was appended after all
        _cluster((1, 3), "p2", 1, 10),
        _cluster((1, 4), "ghost", 1, 99),  # unaudited producer: not counted
    ]


def test_reconcile_breaks_the_window_down_by_partition_with_leaders():
    [row] = reconcile("t", 0, 10, _snaps(), ["a"], FINAL)
    p0, p1 = row["partitions"]
    assert p0 == window_result.partition_entry(
        0, leader=1, leaders=[1], sent=50, acknowledged=50, unique=50, duplicated=2, lost=0
    )
    assert p1["failed_by_error"] == {"_MSG_TIMED_OUT": 28, "NOT_LEADER_OR_FOLLOWER": 2}
    assert (p1["sent"], p1["acknowledged"], p1["failed"], p1["unique"], p1["lost"]) == (60, 30, 30, 31, 29)
    assert (
        p1["leaders"] == [2, 3] and p1["leader"] == 2
    )  # p1 reported 50 messages with leader 2, p2 10 with 3
    assert row["sent"] - row["unique"] == p0["lost"] + p1["lost"]
    assert window_result.partition_losses(row) == [{"partition": 1, "leader": 2, "lost": 29, "failed": 30}]
    assert window_result.lost_by_leader(row) == {2: 29}


def test_sent_per_partition_unknown_when_a_producer_reports_failures_only():
    snaps = [
        _producer(  # delivery_reports=errors: no successful reports, so 10 of 100 are accounted for
            (0, 1),
            "p1",
            100,
            [PartitionDelivery(partition=2, failed=10, failed_by_error={"_MSG_TIMED_OUT": 10})],
        ),
        _cluster((1, 1), "p1", 2, 40),
    ]
    [entry] = partition_breakdown([s for s in snaps if s["tier"] == "producer"], snaps[1:], {"p1"})
    assert (entry["sent"], entry["lost"], entry["failed"], entry["unique"]) == (None, None, 10, 40)
    # ... and the loss is then told by the failed reports
    row = {"partitions": [entry]}
    assert window_result.partition_losses(row) == [{"partition": 2, "leader": None, "lost": 10, "failed": 10}]


def test_breakdown_survives_avro_spark_transport_and_parquet(tmp_path):
    [row] = reconcile("t", 0, 10, _snaps(), ["a"], FINAL)
    row.update(result_at_ms=1, tx_retries=0, request_timeouts=0, producers=2, unaudited_producers=1)
    back = codec.decode_object("window_result", codec.encode_object("window_result", row))
    assert back["partitions"] == row["partitions"]
    spark = window_result.to_spark(row)
    assert isinstance(spark["partitions"], str)
    assert window_result.from_spark(spark)["partitions"] == row["partitions"]
    [path] = ParquetResultSink(tmp_path).write(7, [row])
    [read] = pq.read_table(path).to_pylist()
    assert [p["partition"] for p in read["partitions"]] == [0, 1]
    assert dict(read["partitions"][1]["failed_by_error"]) == row["partitions"][1]["failed_by_error"]
    assert window_result.from_spark(read)["partitions"] == row["partitions"]  # maps are dicts again


def test_producer_record_round_trips_its_partitions():
    rec = AuditRecord(
        tier="producer",
        source="s",
        producer_id="p",
        topic="t",
        window_start_ms=0,
        window_end_ms=10,
        sent=3,
        failed=3,
        partitions=[
            PartitionDelivery(partition=4, failed=3, failed_by_error={"_MSG_TIMED_OUT": 3}, leader=2)
        ],
    )
    assert decode(encode(rec)) == rec


def _lossy_row() -> dict[str, Any]:
    [row] = reconcile("t", 0, 10, _snaps(), ["a"], FINAL)
    row.update(completeness=row["unique"] / row["sent"], loss_rate=1 - row["unique"] / row["sent"])
    return row


def test_completeness_alert_names_partitions_and_leaders():
    engine = AlertEngine(AlertSettings())
    [event] = [e for e in engine.observe([_lossy_row()], 1_000) if e.alertname == COMPLETENESS_BELOW_TARGET]
    assert event.attribution == [{"partition": 1, "leader": 2, "lost": 29, "failed": 30}]
    assert "lost most in partition(s) 1 led by broker(s) 2" in event.summary
    assert "Lost most: partition 1 (leader broker 2): 29 lost." in event.description
    assert event.annotations()["lost_partitions"] == "1" and event.annotations()["lost_leaders"] == "2"
    assert decode_alert(encode_alert(event)) == event


def test_alert_written_before_attribution_decodes_with_none():
    import io

    import fastavro

    from alerts import codec as alert_codec
    from audit_record.codec import SINGLE_OBJECT_MAGIC

    engine = AlertEngine(AlertSettings())
    [event] = [e for e in engine.observe([_lossy_row()], 1_000) if e.alertname == COMPLETENESS_BELOW_TARGET]
    old = {k: v for k, v in event.to_dict().items() if k != "attribution"}
    buf = io.BytesIO()
    buf.write(SINGLE_OBJECT_MAGIC + alert_codec.schema_fingerprint("alert.v1"))
    fastavro.schemaless_writer(buf, alert_codec.schema("alert.v1"), old)
    assert decode_alert(buf.getvalue()).attribution == []
    assert alert_codec.schema_fingerprint("alert.v1") != alert_codec.schema_fingerprint()
    assert "attribution" in {f["name"] for f in schema()["fields"]}


@pytest.mark.parametrize("name", ["audit_record", "window_result"])
def test_current_schemas_differ_from_their_previous_versions(name):
    previous = codec.WRITER_VERSIONS[name][0]
    assert codec.fingerprint(name) != codec.fingerprint(previous)
