"""The audit stamp that audited producers put on every data message: formats v2 (written) and v1 (read).

One Kafka header per message; its key says the format (docs/DESIGN.md, "The audit stamp"):

* **v2** (written by default): key :data:`STAMP_HEADER` (``"~a"``, 2 bytes); value = the producer
  instance id, 8 random bytes, then the sequence number as an unsigned LEB128 varint (1 to 9 bytes,
  minimal, at most 6 bytes for sequences below 2**42). Key + value: 11 to 19 bytes, at most 16 bytes
  for sequences below 2**42. The id's text form is :data:`V2_ID_PREFIX` + 16 lowercase hex digits
  (``~0123456789abcdef``); ``~`` is outside the v1 id alphabet, so the two id spaces never meet.
* **v1** (read, and written on request): key :data:`STAMP_HEADER_V1` (``"kafka-audit.stamp"``); value =
  the producer id as text (``[A-Za-z0-9._:@-]{1,200}``, UTF-8) then an 8-byte big-endian sequence.

Identity is ``(producer_id, sequence)``: a second copy of the same pair is a duplicate (invariant 3).
Decoders return the producer id as the bytes of its text form (v1: the id; v2: ``~`` + hex), which is
what the audit consumer keys its state by and what snapshots and results carry. Who a v2 instance is
(client.id, host, process, start) travels in its producer's snapshots, not in the messages.
``stamp_vectors.json`` next to this module holds the shared test vectors (read by every implementation).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterable
from typing import Literal

from kafka_plumbing.errors import KafkaAuditError

StampVersion = Literal[1, 2]

STAMP_HEADER = "~a"
"""Header key of a v2 stamp (what writers emit): ``producer_id (8 bytes) || varint(sequence)``."""

STAMP_HEADER_V1 = "kafka-audit.stamp"
"""Header key of a v1 stamp: ``producer_id (UTF-8) || sequence (8 bytes, big-endian)``."""

STAMP_HEADERS = (STAMP_HEADER, STAMP_HEADER_V1)
"""Keys of every stamp format; a message's first header with one of them is its stamp."""

STAMP_VERSION: StampVersion = 2
"""The format writers emit unless told otherwise."""

PRODUCER_ID_BYTES = 8
"""Length of a v2 producer instance id in a stamp, bytes (random; big-endian when read as a number)."""

V2_ID_PREFIX = "~"
"""First character of a v2 id's text form (``~`` + 16 lowercase hex digits); not a v1 id character."""

VARINT_MAX_BYTES = 9
"""Longest v2 sequence varint, bytes (7 bits per byte: 9 bytes hold every sequence below 2**63)."""

SEQUENCE_BYTES = 8
"""Length of the sequence number at the end of a v1 stamp, bytes."""

SEQUENCE_BYTEORDER = "big"
"""Byte order of the v1 sequence number (``int.to_bytes`` / ``int.from_bytes`` argument)."""

SEQUENCE_LIMIT = 1 << 63
"""Exclusive upper bound of a sequence number (a signed 64-bit integer, as Spark and Avro read it)."""

_PRODUCER_ID = re.compile(r"[A-Za-z0-9._:@-]{1,200}")
"""A v1 producer id, matched whole (``fullmatch``: ``$`` would let a trailing newline through)."""

_V2_ID = re.compile(r"~[0-9a-f]{16}")
"""The text form of a v2 producer id, matched whole."""


class MalformedStampError(KafkaAuditError, ValueError):
    """An audit stamp header that cannot be decoded (wrong length, bad UTF-8, bad characters, bad varint).

    Also a ``ValueError``, as before it derived from :class:`~kafka_plumbing.errors.KafkaAuditError`.

    Attributes:
        reason: Why, as a stable code shared with the test vectors (``stamp_vectors.json``): ``too_short``,
            ``bad_producer_id``, ``sequence_range``, ``varint_length``, ``varint_continuation``,
            ``varint_not_minimal``, ``not_a_stamp_key``.
    """

    def __init__(self, message: str, reason: str = "bad_producer_id") -> None:
        super().__init__(message)
        self.reason = reason


def new_producer_id(client_id: str, version: StampVersion = STAMP_VERSION) -> str:
    """Return a new producer instance id, unique per producer start; sequences restart at 1 with each.

    Args:
        client_id: The producer's ``client.id`` (only v1 ids contain it).
        version: 2: ``~`` + 16 hex digits of 64 random bits (``os.urandom``; the chance that two of n
            instances share an id is below n**2 / 2**65: 2.7e-8 for a million instances);
            1: ``<client.id>@<host>.<pid>.<random>``.
    """
    if version == 2:
        return V2_ID_PREFIX + os.urandom(PRODUCER_ID_BYTES).hex()
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", client_id or "producer")[:80]
    return f"{safe}@{socket.gethostname()[:40]}.{os.getpid()}.{os.urandom(4).hex()}"


def version_of(producer_id: str) -> StampVersion:
    """Return the stamp format of a producer id's text form: 2 for ``~`` + 16 hex digits, else 1.

    Raises:
        MalformedStampError: if the id is neither a v2 id nor a valid v1 id.
    """
    if _V2_ID.fullmatch(producer_id):
        return 2
    if not _PRODUCER_ID.fullmatch(producer_id):
        raise MalformedStampError(f"invalid producer id {producer_id[:40]!r}")
    return 1


def header_key(producer_id: str) -> str:
    """Return the stamp header key for a producer id (:data:`STAMP_HEADER` or :data:`STAMP_HEADER_V1`).

    Raises:
        MalformedStampError: if the id is invalid.
    """
    return STAMP_HEADER if version_of(producer_id) == 2 else STAMP_HEADER_V1


def encode_prefix(producer_id: str) -> bytes:
    """Return the constant part of a stamp value: v2: the 8 id bytes; v1: the id's UTF-8 bytes.

    Raises:
        MalformedStampError: if the id is neither a v2 id nor a valid v1 id (``[A-Za-z0-9._:@-]{1,200}``).
    """
    if version_of(producer_id) == 2:
        return bytes.fromhex(producer_id[1:])
    return producer_id.encode()


def encode_varint(n: int) -> bytes:
    """Return ``n`` as an unsigned LEB128 varint: 7 bits per byte, low group first, high bit = more follow.

    Minimal (no trailing zero groups): 1 byte below 2**7, 6 bytes below 2**42, 9 bytes below 2**63.

    Raises:
        OverflowError: if ``n`` is negative or not below :data:`SEQUENCE_LIMIT`.
    """
    if not 0 <= n < SEQUENCE_LIMIT:
        raise OverflowError(f"sequence out of range: {n}")
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def decode_varint(data: bytes) -> int:
    """Return the number that a byte string holds as a minimal unsigned LEB128 varint (:func:`encode_varint`).

    Raises:
        MalformedStampError: if ``data`` is empty or longer than :data:`VARINT_MAX_BYTES`, a byte but the last
            lacks the continuation bit or the last has it, the encoding is not minimal (last byte 0 after
            others), or the number is not below :data:`SEQUENCE_LIMIT`.
    """
    k = len(data)
    if not 1 <= k <= VARINT_MAX_BYTES:
        raise MalformedStampError(
            f"sequence varint of {k} bytes (allowed: 1 to {VARINT_MAX_BYTES})", "varint_length"
        )
    n = 0
    for i, byte in enumerate(data):
        if (byte >= 0x80) != (i < k - 1):
            raise MalformedStampError("sequence varint has a wrong continuation bit", "varint_continuation")
        n |= (byte & 0x7F) << (7 * i)
    if k > 1 and data[-1] == 0:
        raise MalformedStampError("sequence varint is not minimal", "varint_not_minimal")
    if n >= SEQUENCE_LIMIT:
        raise MalformedStampError(f"sequence out of range: {n}", "sequence_range")
    return n


def encode(producer_id: str, sequence: int) -> bytes:
    """Return the stamp header value for ``(producer_id, sequence)``, sequence in ``[0, 2**63)``.

    The definition of the stamp (its key: :func:`header_key`). ``AuditedProducer.produce`` inlines it
    (:func:`audit_producer.stamp_packer.stamp_packer`) and must agree with it (property-tested).

    Raises:
        MalformedStampError: if the producer id is invalid (see :func:`encode_prefix`).
        OverflowError: if ``sequence`` is negative or not below :data:`SEQUENCE_LIMIT`.
    """
    prefix = encode_prefix(producer_id)
    if len(prefix) == PRODUCER_ID_BYTES and producer_id[0] == V2_ID_PREFIX:
        return prefix + encode_varint(sequence)
    if not 0 <= sequence < SEQUENCE_LIMIT:
        raise OverflowError(f"sequence out of range: {sequence}")
    return prefix + sequence.to_bytes(SEQUENCE_BYTES, SEQUENCE_BYTEORDER)


def header(producer_id: str, sequence: int) -> tuple[str, bytes]:
    """Return the stamp header ``(key, value)`` for ``(producer_id, sequence)`` (see :func:`encode`).

    Raises:
        MalformedStampError, OverflowError: as :func:`encode`.
    """
    return header_key(producer_id), encode(producer_id, sequence)


def stamp_of(headers: Iterable[tuple[str, bytes | None]] | None) -> tuple[str, bytes] | None:
    """Return a message's stamp header ``(key, value)``: its first header with a key of :data:`STAMP_HEADERS`.

    Returns:
        None if there is no stamp header (an unaudited message); value ``b""`` if the header has no value
        (a malformed stamp: :func:`decode` rejects it).
    """
    if not headers:
        return None
    for key, value in headers:
        if key in STAMP_HEADERS:
            return key, value if value is not None else b""
    return None


def v2_id_bytes(raw: bytes) -> bytes:
    """Return the text form of a v2 id as bytes (``b"~"`` + 16 hex digits) from its 8 raw bytes."""
    return b"~" + raw.hex().encode()


def decode(key: str, value: bytes | None) -> tuple[bytes, int]:
    """Decode the stamp header ``(key, value)`` into ``(producer_id, sequence)``.

    The id is returned as the bytes of its text form (the consumer's hot path keys its state by them;
    :func:`producer_id_text` makes it a ``str``). The definition of a valid stamp: the audit consumer's
    counting loop (:func:`audit_consumer.counts.count_batch`) inlines it and must agree (property-tested).

    Args:
        key: The header key, :data:`STAMP_HEADER` (v2) or :data:`STAMP_HEADER_V1`.
        value: The header value (None: missing, malformed).

    Raises:
        MalformedStampError: v2: if the value is not 8 id bytes and a valid varint (see
            :func:`decode_varint`); v1: if it is not longer than 8 bytes, its sequence is not below
            :data:`SEQUENCE_LIMIT` or its id part is not a valid id; either: if ``key`` is no stamp key.
    """
    if key == STAMP_HEADER:
        if value is None or len(value) <= PRODUCER_ID_BYTES:
            n = 0 if value is None else len(value)
            raise MalformedStampError(f"v2 stamp too short ({n} bytes)", "too_short")
        return v2_id_bytes(value[:PRODUCER_ID_BYTES]), decode_varint(value[PRODUCER_ID_BYTES:])
    if key != STAMP_HEADER_V1:
        raise MalformedStampError(f"not a stamp header key: {key[:40]!r}", "not_a_stamp_key")
    if value is None or len(value) <= SEQUENCE_BYTES:
        n = 0 if value is None else len(value)
        raise MalformedStampError(f"stamp too short ({n} bytes)", "too_short")
    pid = value[:-SEQUENCE_BYTES]
    seq = int.from_bytes(value[-SEQUENCE_BYTES:], SEQUENCE_BYTEORDER)
    if seq >= SEQUENCE_LIMIT:
        raise MalformedStampError(f"sequence out of range: {seq}", "sequence_range")
    if not is_v1_id(pid):
        raise MalformedStampError(f"invalid v1 producer id {pid[:40]!r}")
    return pid, seq


def is_v1_id(pid: bytes) -> bool:
    """Return whether bytes are a valid v1 producer id (UTF-8 ``[A-Za-z0-9._:@-]{1,200}``)."""
    try:
        return _PRODUCER_ID.fullmatch(pid.decode()) is not None
    except UnicodeDecodeError:
        return False


def read(headers: Iterable[tuple[str, bytes | None]] | None) -> tuple[bytes, int] | None:
    """Return a message's ``(producer_id, sequence)`` (:func:`stamp_of` then :func:`decode`); None: no stamp.

    Raises:
        MalformedStampError: if the stamp does not decode.
    """
    found = stamp_of(headers)
    return None if found is None else decode(*found)


def producer_id_text(pid: bytes) -> str:
    """Decode and validate a producer id's text bytes (a v1 id, or a v2 id's ``~`` + 16 hex digits).

    Raises:
        MalformedStampError: if the bytes are not a valid producer id of either format.
    """
    try:
        text = pid.decode()
    except UnicodeDecodeError as exc:
        raise MalformedStampError("producer id is not UTF-8") from exc
    if not (_PRODUCER_ID.fullmatch(text) or _V2_ID.fullmatch(text)):
        raise MalformedStampError(f"invalid producer id {text[:40]!r}")
    return text
