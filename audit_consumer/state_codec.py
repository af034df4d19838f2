"""Serialization of :class:`~audit_consumer.counts.PartitionCounts` (Avro, ``state.avsc``).

The state topic is compacted and keyed by ``group|topic|partition``; the newest committed value is the
state matching the group's committed offset for that partition (both are written in one transaction).

Schemaless Avro (the JVM consumer interceptor writes and reads the same bytes). ``state.avsc`` adds the
buckets' freshness histograms as its last field to ``state.v1.avsc``, so a v1 value is a prefix of a
current one: :func:`decode_state` reads the v1 part, then the freshness field only if bytes remain. A
bucket restored without a freshness histogram (v1 state, or a writer that does not measure it) keeps it
unmeasured (None) if it had counted messages: its snapshots then say "not measured" rather than count
part of the window.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources
from typing import Any, TypeVar

import fastavro
from confluent_kafka import Message
from pyroaring import BitMap64

from audit_consumer import counts
from audit_consumer.counts import PartitionCounts
from kafka_plumbing.topics import STATE_MAX_MESSAGE_BYTES

log = logging.getLogger(__name__)
K = TypeVar("K")


@cache
def _schema(name: str = "state") -> Any:
    text = resources.files("audit_consumer").joinpath(f"{name}.avsc").read_text()
    return fastavro.parse_schema(json.loads(text))


@cache
def _tail_schema() -> Any:
    """Return the fields ``state.avsc`` has after ``state.v1.avsc``'s, as a record (same bytes)."""
    doc = json.loads(resources.files("audit_consumer").joinpath("state.avsc").read_text())
    v1 = {
        f["name"]
        for f in json.loads(resources.files("audit_consumer").joinpath("state.v1.avsc").read_text())["fields"]
    }
    fields = [f for f in doc["fields"] if f["name"] not in v1]
    return fastavro.parse_schema({"type": "record", "name": "StateTail", "fields": fields})


def state_key(group: str, topic: str, partition: int) -> bytes:
    """Kafka key of a partition's state in the state topic."""
    return f"{group}|{topic}|{partition}".encode()


def newest_values(messages: Iterable[Message], wanted: Mapping[bytes, K]) -> dict[K, bytes]:
    """Return the newest value of each wanted key among state-topic ``messages`` (in any partition order).

    A key's records share one partition, whose log order decides (the key's last record there). A key met in
    two partitions (a JVM interceptor placed keys with Kafka's murmur2 until it placed them as librdkafka
    does, ``audit_record/partition_vectors.json``) is taken from the partition whose last record of the key
    has the later timestamp (CreateTime, ms; ties: the higher partition), as the JVM's ``StateTopicReader``
    does. A tombstone (no value) there means no state.

    Args:
        messages: consumed records of the state topic, without errors, each partition's in offset order.
        wanted: state key (:func:`state_key`) -> what to return it under.

    Returns:
        ``wanted``'s value -> the newest value found; keys with none are absent.
    """
    last: dict[K, dict[int, tuple[int, bytes | None]]] = {}  # -> partition -> (timestamp ms, value)
    for m in messages:
        key = wanted.get(m.key() or b"")
        if key is not None:
            last.setdefault(key, {})[m.partition()] = (m.timestamp()[1], m.value())
    out: dict[K, bytes] = {}
    for key, by_partition in last.items():
        _, (_, value) = max(by_partition.items(), key=lambda pv: (pv[1][0], pv[0]))
        if value is not None:
            out[key] = value
    return out


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


def _freshness_out(b: list) -> list[int]:
    fresh = b[counts.FRESH]
    return [] if fresh is None else list(fresh)


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
        "freshness": [_freshness_out(b) for b in state.open.values()]
        + [_freshness_out(b) for b in state.closed.values()],
    }
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _schema(), record)
    return buf.getvalue()


def encode_state_within_limit(group: str, state: PartitionCounts, if_over: str) -> bytes | None:
    """Serialize one partition's state (:func:`encode_state`) unless the state topic would refuse it.

    Returns None, logged as an error ending with ``if_over`` (what follows for the partition), when the value
    is over :data:`~kafka_plumbing.topics.STATE_MAX_MESSAGE_BYTES`: produced, it would fail its transaction.
    """
    value = encode_state(group, state)
    if len(value) <= STATE_MAX_MESSAGE_BYTES:
        return value
    log.error(
        "state of %s[%d] is %d bytes, over the %d-byte limit: %s",
        state.topic, state.partition, len(value), STATE_MAX_MESSAGE_BYTES, if_over,
    )  # fmt: skip
    return None


def decode_state(value: bytes, window_ms: int, grace_ms: int) -> PartitionCounts:
    """Rebuild a partition's state from :func:`encode_state` bytes."""
    buf = io.BytesIO(value)
    rec: Any = fastavro.schemaless_reader(buf, _schema("state.v1"), None)
    fresh: list[list[int]] = []
    if buf.tell() < len(value):
        fresh = fastavro.schemaless_reader(buf, _tail_schema(), None)["freshness"] or []  # type: ignore[index]
    st = PartitionCounts(
        topic=rec["topic"],
        partition=rec["partition"],
        window_ms=window_ms,
        grace_ms=grace_ms,
        next_offset=rec["next_offset"],
        watermark_ms=rec["watermark_ms"],
        closed_horizon_ms=rec["closed_horizon_ms"],
    )
    for i, bo in enumerate(rec["buckets"]):
        b = counts.new_bucket()
        measured = fresh[i] if i < len(fresh) else []
        if len(measured) == len(b[counts.FRESH]):
            b[counts.FRESH] = list(measured)
        elif bo["received"]:
            b[counts.FRESH] = None  # counted before freshness was: not measured for this window
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
