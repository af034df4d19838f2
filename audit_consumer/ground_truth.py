"""Ground truth: read a whole topic after a run and count, per window and producer, what really is there.

The paper's method (Sec. V-A): compare the unique keys found with what was sent. Here a key is the
audit stamp ``(producer id, sequence)``; a message belongs to the window of its own CreateTime. The
number sent per (window, producer) comes from the producers' final snapshots in the audit topic
(cross-checked against the sequence range they report). This code shares only the definitions of
:mod:`audit_record.stamp` (the stamp, v1 or v2, decoded by the reference :func:`~audit_record.stamp.read`)
with the audit consumer, never its counting code, on purpose: it is what every measurement is checked against.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from audit_record import PRODUCER_TIER
from audit_record.rates import duplicate_rate, loss_rate
from audit_record.reader import SnapshotTable, read_audit_log
from audit_record.stamp import read as read_stamp
from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.topics import TopicError, read_to_end


class VerifyError(KafkaAuditError):
    """The topic could not be read to its end."""


@dataclass
class WindowTruth:
    """Ground truth of one (topic, window, producer id); producer id None = unaudited messages.

    Attributes:
        sent: Messages the producer handed to Kafka in the window (from its final snapshot; 0 if unknown).
        received: Copies found in the topic, duplicates included.
        unique: Distinct sequence numbers found.
        duplicated: received - unique.
        lost: sent - unique (never negative).
    """

    topic: str
    window_start_ms: int
    producer_id: str | None
    sent: int = 0
    final: bool = False
    received: int = 0
    unique: int = 0
    duplicated: int = 0
    sequences: set[int] = field(default_factory=set, repr=False)

    @property
    def lost(self) -> int:
        """Sent - unique, floored at 0."""
        return max(0, self.sent - self.unique)

    @property
    def loss_rate(self) -> float | None:
        """R_l over the window (Eq. 3)."""
        return loss_rate(self.sent, self.unique)

    @property
    def duplicate_rate(self) -> float | None:
        """R_d over the window (Eq. 3)."""
        return duplicate_rate(self.sent, self.duplicated)


@dataclass
class Verification:
    """Result of :func:`verify_topic`: rows keyed by (window_start_ms, producer_id), plus oddities."""

    topic: str
    window_ms: int
    rows: dict[tuple[int, str | None], WindowTruth]
    malformed_stamps: int = 0
    messages: int = 0
    audit_log: SnapshotTable | None = None


def verify_topic(
    config: Mapping[str, object],
    topic: str,
    window_ms: int,
    audit_topic: str = "__kafka_audit",
    timeout_s: float = 300.0,
) -> Verification:
    """Count the ground truth of ``topic`` per (window, producer).

    Args:
        config: librdkafka connection config.
        topic: Data topic to read in full.
        window_ms: Window length, ms (as the producers used).
        audit_topic: Where the producers' snapshots are (for ``sent``).
        timeout_s: Deadline for reading everything, s.

    Raises:
        VerifyError: if the topic does not exist or cannot be read to its end in time.
    """
    messages = read_to_end(
        config,
        topic,
        group_id="kafka-audit.verify",
        read_committed=False,
        timeout_s=timeout_s,
        batch_size=5000,
    )
    try:
        result = tally(messages, topic, window_ms)
    except TopicError as exc:
        raise VerifyError(str(exc)) from exc
    rows = result.rows
    log = read_audit_log(config, audit_topic)
    result.audit_log = log
    seen: set[tuple[int, str | None]] = set()
    for rec in log.tier(PRODUCER_TIER):
        if rec.topic != topic:
            continue
        key = (rec.window_start_ms, rec.producer_id)
        row = rows.get(key)
        if row is None:
            row = rows[key] = WindowTruth(topic, rec.window_start_ms, rec.producer_id)
        if key not in seen:  # an autotuned producer adds a snapshot (counts 0) per extra configuration
            seen.add(key)  # of a window (AuditedProducer._emit): add up the snapshots of a producer
            row.sent, row.final = 0, True
        row.sent += rec.sent
        row.final = row.final and rec.final
        if rec.last_sequence is not None and row.sequences and max(row.sequences) > rec.last_sequence:
            raise VerifyError(
                f"producer {rec.producer_id} window {rec.window_start_ms}: the topic holds sequence "
                f"{max(row.sequences)} but the newest committed producer snapshot ends at "
                f"{rec.last_sequence}; its final snapshot is not visible yet (an open transaction on the "
                "audit topic holds it back). "
                "Wait until the producers' windows are final and verify again."
            )
    return result


def tally(messages: Iterable[Any], topic: str, window_ms: int) -> Verification:
    """Count messages per (window, producer id): received, unique and duplicated (``sent`` stays 0).

    The verifier's per-message loop. A message belongs to the window of its CreateTime
    (``ts - ts % window_ms``, inlined :func:`audit_record.windows.window_start`); its identity is its stamp
    (either format: :func:`audit_record.stamp.read`). A message without a stamp
    is unaudited (producer id None); one whose stamp does not decode counts in ``malformed_stamps`` only.

    Args:
        messages: ``confluent_kafka.Message`` objects (or anything with ``timestamp`` and ``headers``).
        topic: Their topic (for the rows).
        window_ms: Window length, ms.

    Raises:
        ValueError: if ``window_ms`` is not positive.
    """
    if window_ms <= 0:
        raise ValueError(f"window_ms must be > 0, got {window_ms}")
    rows: dict[tuple[int, str | None], WindowTruth] = {}
    result = Verification(topic, window_ms, rows)
    for m in messages:
        result.messages += 1
        ts = m.timestamp()[1]
        start = ts - ts % window_ms
        pid: str | None = None
        seq = -1
        try:
            stamp = read_stamp(m.headers())
        except ValueError:
            result.malformed_stamps += 1
            continue
        if stamp is not None:
            pid, seq = stamp[0].decode(), stamp[1]
        row = rows.get((start, pid))
        if row is None:
            row = rows[(start, pid)] = WindowTruth(topic, start, pid)
        row.received += 1
        if pid is not None:
            row.sequences.add(seq)
    for row in rows.values():
        row.unique = len(row.sequences) if row.producer_id is not None else 0
        row.duplicated = row.received - row.unique if row.producer_id is not None else 0
    return result


def totals_by_window(v: Verification) -> dict[int, dict[str, int]]:
    """Sum the rows of every window over producers: sent, received, unique, duplicated, lost, unaudited."""
    out: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for (start, pid), row in v.rows.items():
        t = out[start]
        if pid is None:
            t["unaudited"] += row.received
            continue
        t["sent"] += row.sent
        t["received"] += row.received
        t["unique"] += row.unique
        t["duplicated"] += row.duplicated
        t["lost"] += row.lost
    return {k: dict(v) for k, v in sorted(out.items())}
