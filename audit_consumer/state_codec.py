"""Serialization of :class:`~audit_consumer.counts.PartitionCounts` (Avro, ``state.avsc``).

The state topic is compacted and keyed by ``group|topic|partition``; the newest committed value is the
state matching the group's committed offset for that partition (both are written in one transaction).
"""

from __future__ import annotations

import io
import json
from functools import cache
from importlib import resources
from typing import Any

import fastavro
from pyroaring import BitMap64

from audit_consumer import counts
from audit_consumer.counts import PartitionCounts


@cache
def _schema() -> Any:
    text = resources.files("audit_consumer").joinpath("state.avsc").read_text()
    return fastavro.parse_schema(json.loads(text))


def state_key(group: str, topic: str, partition: int) -> bytes:
    """Kafka key of a partition's state in the state topic."""
    return f"{group}|{topic}|{partition}".encode()


def _bucket_out(start: int, pid: bytes | None, b: list, closed: bool) -> dict[str, Any]:
    hist = b[counts.HIST]
    last = max((i for i, n in enumerate(hist) if n), default=-1)
    return {
        "window_start_ms": start,
        "producer_id": pid,
        "closed": closed,
        "received": b[counts.RECEIVED],
        "duplicated": b[counts.DUPLICATED],
        "unique": counts.unique_of(pid, b),
        "late": b[counts.LATE],
        "stale": b[counts.STALE],
        "bytes": b[counts.BYTES],
        "latency_max_ms": b[counts.LAT_MAX],
        "histogram": hist[: last + 1],
        "sequences": None if closed or b[counts.SEQS] is None else b[counts.SEQS].serialize(),
    }


def encode_state(group: str, state: PartitionCounts) -> bytes:
    """Serialize one partition's state. Pending latencies must have been folded first."""
    record = {
        "group": group,
        "topic": state.topic,
        "partition": state.partition,
        "next_offset": state.next_offset,
        "watermark_ms": state.watermark_ms,
        "closed_horizon_ms": state.closed_horizon_ms,
        "buckets": [_bucket_out(s, p, b, False) for (s, p), b in state.open.items()]
        + [_bucket_out(s, p, b, True) for (s, p), b in state.closed.items()],
    }
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _schema(), record)
    return buf.getvalue()


def decode_state(value: bytes, window_ms: int, grace_ms: int) -> PartitionCounts:
    """Rebuild a partition's state from :func:`encode_state` bytes."""
    rec: Any = fastavro.schemaless_reader(io.BytesIO(value), _schema(), None)
    st = PartitionCounts(
        topic=rec["topic"],
        partition=rec["partition"],
        window_ms=window_ms,
        grace_ms=grace_ms,
        next_offset=rec["next_offset"],
        watermark_ms=rec["watermark_ms"],
        closed_horizon_ms=rec["closed_horizon_ms"],
    )
    for bo in rec["buckets"]:
        b = counts.new_bucket()
        b[counts.RECEIVED], b[counts.DUPLICATED] = bo["received"], bo["duplicated"]
        b[counts.UNIQUE], b[counts.LATE], b[counts.STALE] = bo["unique"], bo["late"], bo["stale"]
        b[counts.BYTES], b[counts.LAT_MAX] = bo["bytes"], bo["latency_max_ms"]
        b[counts.HIST][: len(bo["histogram"])] = bo["histogram"]
        b[counts.DIRTY] = 0
        key = (bo["window_start_ms"], bo["producer_id"])
        if bo["closed"]:
            b[counts.SEQS] = None
            st.closed[key] = b
        else:
            b[counts.SEQS] = BitMap64.deserialize(bo["sequences"]) if bo["sequences"] else BitMap64()
            st.open[key] = b
    return st
