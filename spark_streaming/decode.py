"""Decoding audit-topic rows inside Spark: ``mapInPandas`` with fastavro.

fastavro rather than spark-avro because the single-object header, the validation and the dead-letter
reasons are the project's own (one decoder for every reader).

Every input row becomes exactly one output row of one kind:
``snapshot`` (grouped by its topic and window), ``dead_letter`` (malformed: bytes and reason kept), or
``heartbeat`` (the job's own clock tick: only moves the watermark).

A dead letter's ``event_time`` is null: Spark's stateful step drops rows older than the watermark
(``numRowsDroppedByWatermark``), and a malformed record with an old CreateTime was dropped that way,
neither dead-lettered nor counted (found by the live fuzz run, ``bench/fuzz_live.py``). A null event
time is never late and is not taken into the watermark.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pandas as pd

from audit_record import MalformedRecordError, decode
from spark_streaming.reconcile import compact

HEARTBEAT_KEY = b"__kafka_audit_heartbeat__"
DEAD_LETTER_GROUP = "\x00dead-letter"
HEARTBEAT_GROUP = "\x00heartbeat"

DECODED_SCHEMA = (
    "kind string, g_topic string, g_window long, g_window_end long, event_time timestamp, snap_key string, "
    "payload string, raw_key binary, raw_value binary, reason string, detail string, src_partition int, "
    "src_offset long"
)


def decode_batches(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """Turn Kafka source rows (key, value, partition, offset, timestamp) into decoded rows (mapInPandas)."""
    for pdf in batches:
        out = []
        for key, value, part, off, ts in zip(
            pdf["key"], pdf["value"], pdf["partition"], pdf["offset"], pdf["timestamp"], strict=True
        ):
            key_b = bytes(key) if key is not None else None
            value_b = bytes(value) if value is not None else None
            row = {
                "g_window": 0,
                "g_window_end": 0,
                "event_time": ts,
                "snap_key": None,
                "payload": None,
                "raw_key": None,
                "raw_value": None,
                "reason": None,
                "detail": None,
                "src_partition": int(part),
                "src_offset": int(off),
            }
            if key_b == HEARTBEAT_KEY:
                row.update(kind="heartbeat", g_topic=HEARTBEAT_GROUP)
            else:
                try:
                    rec = decode(value_b)
                    row.update(
                        kind="snapshot",
                        g_topic=rec.topic,
                        g_window=rec.window_start_ms,
                        g_window_end=rec.window_end_ms,
                        snap_key=rec.key(),
                        payload=json.dumps(compact(rec, int(part), int(off))),
                    )
                except MalformedRecordError as exc:
                    row.update(
                        kind="dead_letter",
                        event_time=None,  # never late for the watermark, and never moves it (see above)
                        g_topic=DEAD_LETTER_GROUP,
                        g_window=int(part),
                        raw_key=key_b,
                        raw_value=value_b,
                        reason=exc.reason,
                        detail=exc.detail[:500],
                    )
            out.append(row)
        yield pd.DataFrame(out, columns=[c.split()[0] for c in DECODED_SCHEMA.split(", ")])
