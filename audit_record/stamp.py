"""The audit stamp that audited producers put on every data message.

One Kafka header, :data:`STAMP_HEADER`, whose value is the producer instance id (UTF-8) followed by an
8-byte big-endian sequence number. Identity is ``(producer_id, sequence)``: a second copy of the same
pair is a duplicate (docs/DESIGN.md, invariant 3). One header keeps the per-message cost low on both sides.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterable

from kafka_plumbing.errors import KafkaAuditError

STAMP_HEADER = "kafka-audit.stamp"
"""Header key carrying ``producer_id || sequence``."""

SEQUENCE_BYTES = 8
"""Length of the sequence number at the end of a stamp, bytes."""

SEQUENCE_BYTEORDER = "big"
"""Byte order of the sequence number (``int.to_bytes`` / ``int.from_bytes`` argument)."""

SEQUENCE_LIMIT = 1 << 63
"""Exclusive upper bound of a sequence number (a signed 64-bit integer, as Spark and Avro read it)."""

_PRODUCER_ID = re.compile(r"[A-Za-z0-9._:@-]{1,200}")
"""A producer id, matched whole (``fullmatch``: ``$`` would let a trailing newline through)."""


class MalformedStampError(KafkaAuditError, ValueError):
    """An audit stamp header that cannot be decoded (wrong length, bad UTF-8, bad characters).

    Also a ``ValueError``, as before it derived from :class:`~kafka_plumbing.errors.KafkaAuditError`.
    """


def new_producer_id(client_id: str) -> str:
    """Return a producer instance id: ``<client.id>@<host>.<pid>.<random>``, unique per process start.

    Sequence numbers restart at 1 with every producer instance, so the id must never be reused.
    """
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", client_id or "producer")[:80]
    return f"{safe}@{socket.gethostname()[:40]}.{os.getpid()}.{os.urandom(4).hex()}"


def encode_prefix(producer_id: str) -> bytes:
    """Return the constant part of a stamp (the producer id bytes); :func:`encode` appends the sequence.

    Raises:
        MalformedStampError: if the id is empty, too long or has characters outside ``[A-Za-z0-9._:@-]``.
    """
    if not _PRODUCER_ID.fullmatch(producer_id):
        raise MalformedStampError(f"invalid producer id {producer_id!r}")
    return producer_id.encode()


def encode(producer_id: str, sequence: int) -> bytes:
    """Return the stamp header value for ``(producer_id, sequence)``; sequence in ``[0, 2**63)``.

    The definition of the stamp. ``AuditedProducer.produce`` inlines it (:func:`encode_prefix` once per
    producer, then the sequence with the constants above) and must agree with it (property-tested).

    Raises:
        MalformedStampError: if the producer id is invalid (see :func:`encode_prefix`).
        OverflowError: if ``sequence`` is negative or does not fit in :data:`SEQUENCE_BYTES` bytes.
    """
    return encode_prefix(producer_id) + sequence.to_bytes(SEQUENCE_BYTES, SEQUENCE_BYTEORDER)


def stamp_of(headers: Iterable[tuple[str, bytes | None]] | None) -> bytes | None:
    """Return the stamp header value of a message's headers: the first :data:`STAMP_HEADER` header's.

    Returns:
        None if there is no stamp header (an unaudited message); ``b""`` if the header is there with
        no value (a malformed stamp: :func:`decode` rejects it); else its value.
    """
    if not headers:
        return None
    for key, value in headers:
        if key == STAMP_HEADER:
            return value if value is not None else b""
    return None


def decode(value: bytes | None) -> tuple[bytes, int]:
    """Split a stamp into ``(producer_id_bytes, sequence)``.

    The id is returned as bytes (the consumer's hot path keys its state by them); decode with
    :func:`producer_id_text`. The definition of a valid stamp: the audit consumer's counting loop
    (:func:`audit_consumer.counts.count_batch`) inlines it with the constants above and must agree
    with it (property-tested).

    Raises:
        MalformedStampError: if the value is missing, too short, its sequence is not below
            :data:`SEQUENCE_LIMIT`, or its id part is not a valid id.
    """
    if value is None or len(value) <= SEQUENCE_BYTES:
        raise MalformedStampError(f"stamp too short ({0 if value is None else len(value)} bytes)")
    pid = value[:-SEQUENCE_BYTES]
    seq = int.from_bytes(value[-SEQUENCE_BYTES:], SEQUENCE_BYTEORDER)
    if seq >= SEQUENCE_LIMIT:
        raise MalformedStampError(f"sequence out of range: {seq}")
    producer_id_text(pid)
    return pid, seq


def producer_id_text(pid: bytes) -> str:
    """Decode and validate producer id bytes from a stamp.

    Raises:
        MalformedStampError: if the bytes are not a valid producer id.
    """
    try:
        text = pid.decode()
    except UnicodeDecodeError as exc:
        raise MalformedStampError("producer id is not UTF-8") from exc
    if not _PRODUCER_ID.fullmatch(text):
        raise MalformedStampError(f"invalid producer id {text[:40]!r}")
    return text
