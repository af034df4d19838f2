"""The audit record: one cumulative snapshot of one (tier, source, producer, topic, partition, window).

The Avro schema is ``audit_record.avsc`` beside this module; this dataclass mirrors it field by field.
Snapshots are cumulative (docs/DESIGN.md, invariant 2): the newest one per :meth:`AuditRecord.key` is the
truth, so re-sending one is harmless and a lost one is healed by the next.
"""

from __future__ import annotations

import dataclasses
import math
import socket
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from numbers import Integral, Real
from typing import Any, Literal, cast

from audit_record import freshness
from kafka_plumbing.errors import ConfigError, KafkaAuditError

PRODUCER_TIER = "producer"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
CLUSTER_TIER_PREFIX = "cluster:"
CONSUMER_TIER_PREFIX = "consumer:"
TIER_PREFIXES: tuple[str, ...] = (CLUSTER_TIER_PREFIX, CONSUMER_TIER_PREFIX)
"""Prefixes of the tiers that count what arrived (``docs/DESIGN.md``, "Tiers"); ``producer`` counts what
was sent."""

COUNT_FIELDS: tuple[str, ...] = (
    "sent",
    "acknowledged",
    "failed",
    "received",
    "unique",
    "duplicated",
    "late",
    "stale",
    "unaudited",
    "bytes",
)
"""The cumulative counters of an :class:`AuditRecord` (messages; ``bytes`` in bytes), all >= 0."""


class MalformedRecordError(KafkaAuditError):
    """An audit record that cannot be decoded or is inconsistent; ``reason`` is a short machine label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def cluster_tier(cluster: str) -> str:
    """Return the tier name of the audit consumer of ``cluster``: ``cluster:<name>``."""
    return f"{CLUSTER_TIER_PREFIX}{cluster}"


def consumer_tier(group: str) -> str:
    """Return the tier name of the application consumers of consumer group ``group``: ``consumer:<group>``."""
    return f"{CONSUMER_TIER_PREFIX}{group}"


def now_ms() -> int:
    """Wall-clock time, ms since the Unix epoch UTC."""
    return time.time_ns() // 1_000_000


Acks = Literal["0", "1", "all"]
"""librdkafka ``acks`` (``request.required.acks``) in canonical form; ``-1`` is spelled ``all``."""
ACKS_VALUES: tuple[str, ...] = ("0", "1", "all", "-1")
"""The ``acks`` values librdkafka takes that a broker accepts (librdkafka ``CONFIGURATION.md``), as text."""


def canonical_acks(value: Any) -> Acks:
    """Return librdkafka ``acks`` in canonical form: ``"0"``, ``"1"`` or ``"all"`` (for ``all`` and ``-1``).

    Derive other forms from this one, e.g. the predictor's 0/1 delivery semantics is
    ``0 if canonical_acks(v) == "0" else 1`` (at-most-once vs at-least-once).

    Args:
        value: As configured: text (``"0"``, ``"1"``, ``"all"``, ``"-1"``; case and surrounding blanks
            ignored) or a whole number (0, 1, -1; also a whole float such as 1.0 from a CSV).

    Raises:
        ConfigError: for anything else (including booleans), naming ``acks`` and the allowed values.
    """
    text = None
    if isinstance(value, str):
        text = value.strip().lower()
    elif isinstance(value, Real) and not isinstance(value, bool):  # bool is an int, not an acks value
        whole = isinstance(value, Integral) or float(value).is_integer()
        text = str(int(value)) if whole else None
    if text not in ACKS_VALUES:
        raise ConfigError(f"acks={value!r}: allowed values are {', '.join(ACKS_VALUES)}")
    return cast(Acks, "all" if text == "-1" else text)


@dataclass(slots=True, kw_only=True)
class ProducerConfig:
    """librdkafka settings that drive reliability (paper Sec. III-C, Eq. 1's configuration inputs).

    Attributes:
        acks: librdkafka ``acks`` in canonical form (:func:`canonical_acks`: ``"0"``, ``"1"``, ``"all"``).
        enable_idempotence: ``enable.idempotence``.
        batch_num_messages: ``batch.num.messages`` B (messages); None for a client without it (Java).
        linger_ms: ``linger.ms`` (alias ``queue.buffering.max.ms``), ms.
        message_timeout_ms: ``message.timeout.ms`` T_o, ms.
        message_send_max_retries: ``message.send.max.retries`` (alias ``retries``).
        retry_backoff_ms: ``retry.backoff.ms``, ms.
        poll_interval_ms: The application's polling interval delta between source reads, ms; None if unknown.
        batch_size_bytes: The Java client's ``batch.size``, bytes; None for librdkafka clients.
    """

    acks: str
    enable_idempotence: bool
    batch_num_messages: int | None
    linger_ms: float
    message_timeout_ms: int
    message_send_max_retries: int
    retry_backoff_ms: int
    poll_interval_ms: float | None = None
    batch_size_bytes: int | None = None


@dataclass(slots=True, kw_only=True)
class ProducerIdentity:
    """Who an audited producer instance is: sent in its snapshots, as v2 stamps carry only a random id.

    Attributes:
        client_id: The producer's librdkafka ``client.id``.
        host: Host name of the producer process.
        process_id: Operating-system process id.
        started_at_ms: When the instance started (its id was drawn), ms since the epoch UTC.
        library: The audited client library (``kafka-audit-python``).
        library_version: Its version (with librdkafka's).
        stamp_version: The audit stamp format the instance writes (1 or 2).
    """

    client_id: str
    host: str
    process_id: int
    started_at_ms: int
    library: str
    library_version: str
    stamp_version: int = 2

    def name(self) -> str:
        """Return the readable name of the instance: ``<client.id>@<host>.<process id>``."""
        return f"{self.client_id}@{self.host}.{self.process_id}"


@dataclass(slots=True, kw_only=True)
class NetworkStats:
    """What a producer knows of its network, from librdkafka statistics (``STATISTICS.md``).

    A producer snapshot carries the statistics samples of its own window (those whose interval's
    midpoint lies in it), reduced by :class:`audit_producer.network_history.NetworkHistory`: means of
    ``rtt_avg_ms`` and ``tcp_retransmit_pct``, the maximum ``rtt_p99_ms``, the minimum ``rtt_min_ms``,
    the newest counters.

    Attributes:
        rtt_avg_ms: Mean of the brokers' ``rtt.avg`` (ms); None before the first statistics callback.
        rtt_p99_ms: Max over brokers of ``rtt.p99`` (ms).
        rtt_min_ms: Min over brokers of ``rtt.min`` (ms): the delay the network adds to a round trip
            without the queueing behind the producer's own backlog that ``rtt.avg`` includes (the
            estimate of D); None when unknown or in a record written before the field existed.
        tx_retries: Sum over brokers of ``txretries`` (cumulative).
        request_timeouts: Sum over brokers of ``req_timeouts`` (cumulative).
        tx_errors: Sum over brokers of ``txerrs`` (cumulative).
        tcp_retransmit_pct: Packet loss estimate L, percent 0-100: TCP ``RetransSegs / OutSegs`` of the
            producer's network namespace (``/proc/net/snmp``) over the last statistics interval; None
            when unknown (no segments sent, no ``/proc``, or a record written before the field existed).
        tcp_timeout_pct: Retransmission timeouts per 100 TCP segments sent, percent 0-100: ``TCPTimeouts
            / OutSegs`` of the same namespace and interval (``/proc/net/netstat``); tells loss bursts,
            which TCP repairs only after its retransmission timer fires, from random loss, which fast
            retransmit repairs (L reads the same for both); None when unknown or in a record written
            before the field existed.
    """

    rtt_avg_ms: float | None = None
    rtt_p99_ms: float | None = None
    rtt_min_ms: float | None = None
    tx_retries: int = 0
    request_timeouts: int = 0
    tx_errors: int = 0
    tcp_retransmit_pct: float | None = None
    tcp_timeout_pct: float | None = None


@dataclass(slots=True, kw_only=True)
class PartitionDelivery:
    """A producer's delivery reports for one partition in one window, and who led the partition.

    Attributes:
        partition: The partition the reports name (-1: a message that failed before it was assigned one).
        acknowledged: Successful delivery reports (messages; 0 with ``delivery_reports=errors``).
        failed: Failed delivery reports (messages).
        failed_by_error: Failed reports by librdkafka error name (``KafkaError.name()``, e.g.
            ``_MSG_TIMED_OUT``) -> messages; the values add up to ``failed``.
        leader: Broker (node id) that led the partition for the longest part of the window, from the
            producer's librdkafka statistics (its metadata); None when unknown.
        leaders: Every broker that led the partition during the window, in order of leadership.
        last_offset: Highest offset a successful delivery report gave a message of the window in this
            partition; None when none was acknowledged (acks=0 reports no offset) or in a record
            written before the field existed.
    """

    partition: int
    acknowledged: int = 0
    failed: int = 0
    failed_by_error: dict[str, int] = field(default_factory=dict)
    leader: int | None = None
    leaders: list[int] = field(default_factory=list)
    last_offset: int | None = None


@dataclass(slots=True, kw_only=True)
class ReadOffset:
    """A reading tier's position in one partition of a snapshot's topic when it emitted the snapshot.

    Attributes:
        partition: Partition of the snapshot's topic.
        offset: The next offset the tier will read (the Kafka consumer's position): the snapshot counts
            every message of the partition at a lower offset.
    """

    partition: int
    offset: int


@dataclass(slots=True, kw_only=True)
class AuditRecord:
    """One audit snapshot; see ``audit_record.avsc`` for every field's meaning and unit."""

    tier: str
    source: str
    topic: str
    window_start_ms: int
    window_end_ms: int
    producer_id: str | None = None
    partition: int = -1
    record_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    host: str = field(default_factory=socket.gethostname)
    emitted_at_ms: int = field(default_factory=now_ms)
    final: bool = False
    sent: int = 0
    acknowledged: int = 0
    failed: int = 0
    first_sequence: int | None = None
    last_sequence: int | None = None
    received: int = 0
    unique: int = 0
    duplicated: int = 0
    late: int = 0
    stale: int = 0
    unaudited: int = 0
    bytes: int = 0
    in_flight_bytes: int | None = None
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_max_ms: float | None = None
    producer_config: ProducerConfig | None = None
    network: NetworkStats | None = None
    partitions: list[PartitionDelivery] = field(default_factory=list)
    producer_identity: ProducerIdentity | None = None
    accounted: bool = False
    read_offsets: list[ReadOffset] = field(default_factory=list)
    freshness_counts: list[int] = field(default_factory=list)

    def key(self) -> str:
        """Snapshot identity ``tier|source|producer_id|topic|partition|window_start_ms``.

        Also the Kafka message key, so all snapshots of one key land in one partition in order.
        """
        return "|".join(
            (
                self.tier,
                self.source,
                self.producer_id or "",
                self.topic,
                str(self.partition),
                str(self.window_start_ms),
            )
        )

    def validate(self) -> AuditRecord:
        """Check the record is consistent and return it.

        Raises:
            MalformedRecordError: ``reason`` is one of ``bad_tier``, ``bad_window``, ``negative_count``,
                ``inconsistent_counts``, ``bad_value`` (a number that is NaN or infinite: no writer makes
                one, and one NaN latency made a window's result depend on the snapshots' order; a
                ``freshness_counts`` that is neither empty nor :data:`audit_record.freshness.N_COUNTS`
                non-negative counts).
        """
        if self.tier != PRODUCER_TIER and not any(
            self.tier.startswith(prefix) and len(self.tier) > len(prefix) for prefix in TIER_PREFIXES
        ):
            raise MalformedRecordError(
                "bad_tier",
                f"tier {self.tier!r} is neither 'producer' nor 'cluster:<name>' nor 'consumer:<group>'",
            )
        if not self.topic or not self.source:
            raise MalformedRecordError("bad_tier", "empty topic or source")
        if self.window_end_ms <= self.window_start_ms or self.window_start_ms < 0:
            raise MalformedRecordError(
                "bad_window", f"window [{self.window_start_ms}, {self.window_end_ms}) is empty or negative"
            )
        for name in COUNT_FIELDS:
            if getattr(self, name) < 0:
                raise MalformedRecordError("negative_count", f"{name}={getattr(self, name)}")
        if self.acknowledged + self.failed > self.sent:
            raise MalformedRecordError(
                "inconsistent_counts",
                f"acknowledged+failed={self.acknowledged + self.failed} > sent={self.sent}",
            )
        if self.in_flight_bytes is not None and self.in_flight_bytes < 0:
            raise MalformedRecordError("negative_count", f"in_flight_bytes={self.in_flight_bytes}")
        if any(p.acknowledged < 0 or p.failed < 0 for p in self.partitions):
            raise MalformedRecordError("negative_count", "a partition's acknowledged or failed < 0")
        if any(p.last_offset is not None and p.last_offset < 0 for p in self.partitions) or any(
            r.offset < 0 or r.partition < 0 for r in self.read_offsets
        ):
            raise MalformedRecordError("negative_count", "a last_offset, read offset or its partition < 0")
        if (wrong := freshness.problem(self.freshness_counts)) is not None:
            raise MalformedRecordError("bad_value", wrong)
        if self.unique > self.received or self.duplicated > self.received:
            raise MalformedRecordError(
                "inconsistent_counts",
                f"unique={self.unique}, duplicated={self.duplicated} exceed received={self.received}",
            )
        for part in (self, self.producer_config, self.network):
            for name in _FLOAT_FIELDS.get(type(part), ()):
                value = getattr(part, name)
                if value is not None and not math.isfinite(value):
                    raise MalformedRecordError("bad_value", f"{name}={value}")
        return self

    def to_avro(self) -> dict[str, Any]:
        """Return the record as the dict fastavro writes (nested records as dicts)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_avro(cls, data: dict[str, Any]) -> AuditRecord:
        """Build a record from the dict fastavro reads (logical types already turned into ints)."""
        values = dict(data)
        for name in ("window_start_ms", "window_end_ms", "emitted_at_ms"):
            ts = values[name]
            if isinstance(ts, datetime):  # fastavro turns timestamp-millis into an aware datetime
                values[name] = (ts - _EPOCH) // timedelta(milliseconds=1)
        if values.get("producer_config") is not None:
            values["producer_config"] = ProducerConfig(**values["producer_config"])
        if values.get("network") is not None:
            values["network"] = NetworkStats(**values["network"])
        if values.get("producer_identity") is not None:
            values["producer_identity"] = ProducerIdentity(**values["producer_identity"])
        values["partitions"] = [
            PartitionDelivery(**{**p, "failed_by_error": dict(p.get("failed_by_error") or {})})
            for p in values.get("partitions") or ()
        ]
        values["read_offsets"] = [ReadOffset(**r) for r in values.get("read_offsets") or ()]
        values["freshness_counts"] = list(values.get("freshness_counts") or ())
        return cls(**values)


_FLOAT_FIELDS: dict[type, tuple[str, ...]] = {
    AuditRecord: ("latency_p50_ms", "latency_p99_ms", "latency_max_ms"),
    ProducerConfig: ("linger_ms", "poll_interval_ms"),
    NetworkStats: ("rtt_avg_ms", "rtt_p99_ms", "rtt_min_ms", "tcp_retransmit_pct", "tcp_timeout_pct"),
}
"""The ``double`` fields of a record and its parts, which :meth:`AuditRecord.validate` requires finite."""
