"""Structural fuzzing of what kafka-audit reads: Avro single objects and data-message stamps.

Mutations know the structure they break. An Avro single object (``C3 01`` + fingerprint + body,
:mod:`audit_record.codec`) is split into the tokens of its schema (:func:`avro_tokens`: every varint -
int, long, string length, union branch, array/map block count - string content, double, boolean), and
a mutation hits one token the way a bug or an attacker would: an extreme or over-long varint, a length
past the end or negative, a union branch that does not exist, a boolean byte of 7, NaN, invalid UTF-8, a
token deleted, repeated or swapped, a cut at a token boundary, trailing bytes, a wrong magic or another
schema's fingerprint, or a field set to a value :meth:`~audit_record.AuditRecord.validate` forbids and
written without validation. A stamp (:mod:`audit_record.stamp`, v1 or v2) is mutated in its parts: a
v1 producer id (bad characters, invalid UTF-8, empty, too long), a v1 sequence (too short, >= 2**63), a
v2 varint (open end, trailing byte, not minimal, too long, cut) and the header itself (no value, a bad
first stamp header before a good one, a v2 value under the v1 key).

Every mutant is classified by the reference decoders (:func:`audit_record.decode`,
:func:`audit_record.stamp.read`): :func:`audit_mutants` and :func:`stamp_mutants` yield only mutants the
reference rejects, with the reason the live components must report, so a live run can require that
every one is dead-lettered (:func:`run_live`, used by ``bench/fuzz_live.py`` and the integration test).
"""

from __future__ import annotations

import io
import json
import math
import random
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro

from audit_record import (
    AuditRecord,
    MalformedRecordError,
    NetworkStats,
    ProducerConfig,
    codec,
    decode,
    encode,
)
from audit_record.codec import SINGLE_OBJECT_MAGIC
from audit_record.stamp import (
    PRODUCER_ID_BYTES,
    SEQUENCE_BYTES,
    STAMP_HEADER,
    STAMP_HEADER_V1,
    VARINT_MAX_BYTES,
    MalformedStampError,
)
from audit_record.stamp import header as stamp_header
from audit_record.stamp import read as read_stamp

HEADER_LEN = 10
"""Bytes before the Avro body of a single object: magic (2) and fingerprint (8)."""


@dataclass(frozen=True, slots=True)
class Token:
    """One encoded Avro value: ``body[start:end]``.

    Attributes:
        start, end: Byte offsets in the single object (header included).
        kind: ``varint`` (int, long, length, union branch, block count), ``bytes`` (string or bytes
            content), ``double``, ``float`` or ``boolean``.
        role: What the value is: the Avro type (``int``, ``long``, ``string``...), ``length``, ``branch``
            or ``block``.
        path: Field path, e.g. ``producer_config.acks``.
    """

    start: int
    end: int
    kind: str
    role: str
    path: str


class _Reader:
    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def varint(self) -> tuple[int, int, int]:
        start, shift, acc = self.pos, 0, 0
        while True:
            if self.pos >= len(self.data) or shift > 63:
                raise ValueError("varint past the end")
            b = self.data[self.pos]
            self.pos += 1
            acc |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return start, self.pos, (acc >> 1) ^ -(acc & 1)

    def take(self, n: int) -> tuple[int, int]:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("value past the end")
        start = self.pos
        self.pos += n
        return start, self.pos


def avro_tokens(schema_json: str, value: bytes) -> list[Token]:
    """Split a valid single object's body into its tokens, in order (see :class:`Token`).

    Args:
        schema_json: The writer schema as JSON text (:func:`audit_record.codec.schema_json`).
        value: A single object written with it.

    Raises:
        ValueError: if ``value`` does not follow the schema.
    """
    names: dict[str, Any] = {}
    out: list[Token] = []
    r = _Reader(value, HEADER_LEN)

    def walk(t: Any, path: str, namespace: str = "") -> None:
        if isinstance(t, list):
            s, e, branch = r.varint()
            out.append(Token(s, e, "varint", "branch", path))
            walk(t[branch], path, namespace)
            return
        if isinstance(t, str):
            if t in names or f"{namespace}.{t}" in names:
                walk(names.get(t) or names[f"{namespace}.{t}"], path, namespace)
                return
            if t == "null":
                return
            if t in ("int", "long"):
                s, e, _ = r.varint()
                out.append(Token(s, e, "varint", t, path))
            elif t in ("string", "bytes"):
                s, e, n = r.varint()
                out.append(Token(s, e, "varint", "length", path))
                s, e = r.take(n)
                out.append(Token(s, e, "bytes", t, path))
            elif t == "double":
                out.append(Token(*r.take(8), "double", t, path))
            elif t == "float":
                out.append(Token(*r.take(4), "float", t, path))
            elif t == "boolean":
                out.append(Token(*r.take(1), "boolean", t, path))
            else:
                raise ValueError(f"unknown type {t}")
            return
        kind = t["type"]
        if kind == "record":
            ns = t.get("namespace", namespace)
            names[t["name"]] = t
            names[f"{ns}.{t['name']}"] = t
            for f in t["fields"]:
                walk(f["type"], f"{path}.{f['name']}" if path else f["name"], ns)
        elif kind in ("array", "map"):
            while True:
                s, e, count = r.varint()
                out.append(Token(s, e, "varint", "block", path))
                if count == 0:
                    break
                if count < 0:
                    s, e, _ = r.varint()
                    out.append(Token(s, e, "varint", "long", f"{path}[size]"))
                for _ in range(abs(count)):
                    if kind == "map":
                        walk("string", f"{path}{{key}}", namespace)
                    walk(t["items" if kind == "array" else "values"], f"{path}[]", namespace)
        elif kind == "enum":
            s, e, _ = r.varint()
            out.append(Token(s, e, "varint", "enum", path))
        elif kind == "fixed":
            out.append(Token(*r.take(t["size"]), "bytes", "fixed", path))
        else:
            walk(kind, path, namespace)

    walk(json.loads(schema_json), "")
    if r.pos != len(value):
        raise ValueError(f"{len(value) - r.pos} bytes after the body")
    return out


def zigzag(n: int) -> bytes:
    """Return the Avro varint (zig-zag) encoding of ``n``, any size (over-long for |n| >= 2**63)."""
    z = (n << 1) if n >= 0 else ((-n) << 1) - 1
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


EXTREME_INTS: tuple[int, ...] = (
    -1,
    -2,
    1 << 31,
    -(1 << 31) - 1,
    (1 << 32) + 5,
    (1 << 63) - 1,
    -(1 << 63),
    1 << 40,
    -(1 << 40),
)
"""Varint values a mutation puts in place of an int or long (outside int32, at the int64 edges)."""

SPECIAL_DOUBLES: tuple[float, ...] = (math.nan, math.inf, -math.inf, -1.0, -0.0, 1e308, -1e-300)

_INVALID_UTF8: tuple[bytes, ...] = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80")


def _replace(value: bytes, tok: Token, new: bytes) -> bytes:
    return value[: tok.start] + new + value[tok.end :]


MutationFn = Callable[[random.Random, bytes, list[Token]], bytes]


def _m_magic(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    i = rng.randrange(2)
    return v[:i] + bytes([v[i] ^ (1 << rng.randrange(8))]) + v[i + 1 :]


def _m_fingerprint(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    other = rng.choice([*(codec.fingerprint(n) for n in _OTHER_SCHEMAS), rng.randbytes(8)])
    return v[:2] + other + v[HEADER_LEN:]


def _m_truncate(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    if rng.random() < 0.5:
        return v[: rng.choice(toks).start]  # at a token boundary
    return v[: rng.randrange(len(v))]


def _m_trailing(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    return v + rng.randbytes(rng.randint(1, 16))


def _m_varint_value(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    tok = rng.choice([t for t in toks if t.kind == "varint"])
    return _replace(v, tok, zigzag(rng.choice(EXTREME_INTS)))


def _m_varint_overlong(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    tok = rng.choice([t for t in toks if t.kind == "varint"])
    n = rng.randint(10, 14)
    tail = b"" if rng.random() < 0.3 else b"\x01"  # unterminated or past 64 bits
    return _replace(v, tok, b"\xff" * n + tail)


def _m_length(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    lengths = [t for t in toks if t.role in ("length", "block")]
    tok = rng.choice(lengths)
    new = rng.choice([len(v) - tok.end + rng.randint(1, 100), -rng.randint(1, 50), 1 << 40, -(1 << 40)])
    return _replace(v, tok, zigzag(new))


def _m_branch(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    tok = rng.choice([t for t in toks if t.role == "branch"])
    return _replace(v, tok, zigzag(rng.choice([2, 3, 99, -1, 1 << 33])))


def _m_branch_swap(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    tok = rng.choice([t for t in toks if t.role == "branch"])
    return _replace(v, tok, zigzag(1 - (v[tok.start] >> 1)))


def _m_boolean(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    tok = rng.choice([t for t in toks if t.kind == "boolean"])
    return _replace(v, tok, bytes([rng.randint(2, 255)]))


def _m_double(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    doubles = [t for t in toks if t.kind == "double"]
    if not doubles:
        return _m_bitflip(rng, v, toks)
    return _replace(v, rng.choice(doubles), struct.pack("<d", rng.choice(SPECIAL_DOUBLES)))


def _m_utf8(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    strings = [t for t in toks if t.role == "string" and t.end > t.start]
    if not strings:
        return _m_bitflip(rng, v, toks)
    tok = rng.choice(strings)
    bad = rng.choice(_INVALID_UTF8)
    body = bytearray(v[tok.start : tok.end])
    at = rng.randrange(len(body))
    body[at : at + len(bad)] = bad
    body = body[: tok.end - tok.start]  # same length: only the content is broken
    return _replace(v, tok, bytes(body))


def _m_delete(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    tok = rng.choice(toks)
    return _replace(v, tok, b"")


def _m_duplicate(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    tok = rng.choice(toks)
    return v[: tok.end] + v[tok.start : tok.end] + v[tok.end :]


def _m_swap(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    a, b = sorted(rng.sample(range(len(toks)), 2))
    ta, tb = toks[a], toks[b]
    return v[: ta.start] + v[tb.start : tb.end] + v[ta.end : tb.start] + v[ta.start : ta.end] + v[tb.end :]


def _m_bitflip(rng: random.Random, v: bytes, toks: list[Token]) -> bytes:
    i = rng.randrange(HEADER_LEN, len(v))
    return v[:i] + bytes([v[i] ^ (1 << rng.randrange(8))]) + v[i + 1 :]


MUTATIONS: dict[str, MutationFn] = {
    "magic": _m_magic,
    "fingerprint": _m_fingerprint,
    "truncate": _m_truncate,
    "trailing": _m_trailing,
    "varint_value": _m_varint_value,
    "varint_overlong": _m_varint_overlong,
    "length": _m_length,
    "union_branch": _m_branch,
    "union_swap": _m_branch_swap,
    "boolean": _m_boolean,
    "double": _m_double,
    "utf8": _m_utf8,
    "delete_token": _m_delete,
    "duplicate_token": _m_duplicate,
    "swap_tokens": _m_swap,
    "bitflip": _m_bitflip,
}
"""Structural mutations of an Avro single object, by name."""

_OTHER_SCHEMAS = ("audit_record.v1", "control_record", "window_result")


def mutate_object(rng: random.Random, value: bytes, schema_json: str, rounds: int = 1) -> tuple[str, bytes]:
    """Apply ``rounds`` structural mutations to a valid single object; return ``(names, mutant)``.

    The tokens are those of the original (later rounds hit offsets that may have moved: the mutation is
    then less structured, which is also worth trying).
    """
    toks = avro_tokens(schema_json, value)
    names = []
    for _ in range(rounds):
        name = rng.choice(list(MUTATIONS))
        names.append(name)
        if len(value) <= HEADER_LEN:
            value = value + rng.randbytes(4)
            continue
        usable = [t for t in toks if t.end <= len(value)] or toks[:1]
        try:
            value = MUTATIONS[name](rng, value, usable)
        except (IndexError, ValueError):  # no token of the kind the mutation needs: flip a bit instead
            value = _m_bitflip(rng, value, usable)
    return "+".join(names), value


# ------------------------------------------------------------------------------------ audit records
def sample_record(rng: random.Random, topic: str = "fuzz.topic", now: int | None = None) -> AuditRecord:
    """Return a valid audit record of either tier, with optional parts present or not."""
    now = now if now is not None else 1_800_000_000_000
    start = now - now % 5_000
    producer = rng.random() < 0.5
    sent = rng.randint(0, 10_000)
    received = rng.randint(0, 10_000)
    unique = rng.randint(0, received)
    return AuditRecord(
        tier="producer" if producer else "cluster:fuzz",
        source=rng.choice(["app", "fuzz-consumer", "s"]),
        producer_id=rng.choice([None, "app@host.1.aabbccdd", "p@h.2.00"]),
        topic=topic,
        partition=rng.randint(-1, 11),
        window_start_ms=start,
        window_end_ms=start + 5_000,
        emitted_at_ms=now,
        final=rng.random() < 0.3,
        sent=sent if producer else 0,
        acknowledged=sent // 2 if producer else 0,
        failed=sent // 4 if producer else 0,
        first_sequence=rng.choice([None, 1]),
        last_sequence=rng.choice([None, sent]),
        received=0 if producer else received,
        unique=0 if producer else unique,
        duplicated=0 if producer else received - unique,
        late=rng.randint(0, 3),
        bytes=rng.randint(0, 10**6),
        latency_p50_ms=rng.choice([None, 1.5]),
        latency_p99_ms=rng.choice([None, 12.0]),
        latency_max_ms=rng.choice([None, 40.0]),
        producer_config=(
            ProducerConfig(
                acks=rng.choice(["0", "1", "all"]),
                enable_idempotence=rng.random() < 0.5,
                batch_num_messages=rng.choice([1, 4, 10_000]),
                linger_ms=5.0,
                message_timeout_ms=rng.choice([0, 1_000, 300_000]),
                message_send_max_retries=2,
                retry_backoff_ms=100,
                poll_interval_ms=rng.choice([None, 1.0]),
            )
            if producer and rng.random() < 0.8
            else None
        ),
        network=(
            NetworkStats(rtt_avg_ms=2.0, rtt_p99_ms=9.0, tx_retries=3, tcp_retransmit_pct=0.1)
            if producer and rng.random() < 0.8
            else None
        ),
    )


_SEMANTIC: tuple[tuple[str, dict[str, Any]], ...] = (
    ("negative_count", {"sent": -1}),
    ("negative_count", {"received": -7, "unique": -9}),
    ("negative_count", {"late": -(1 << 40)}),
    ("bad_window", {"window_end_ms": 0}),
    ("bad_window", {"window_start_ms": -5_000, "window_end_ms": -1}),
    ("bad_tier", {"tier": "cluster:"}),
    ("bad_tier", {"tier": "broker"}),
    ("bad_tier", {"topic": ""}),
    ("inconsistent_counts", {"sent": 1, "acknowledged": 2}),
    ("inconsistent_counts", {"received": 1, "unique": 2}),
)


def _semantic(rng: random.Random, record: AuditRecord) -> tuple[str, bytes]:
    """Return a record with one forbidden value, written without validation (a buggy or hostile writer)."""
    label, change = rng.choice(_SEMANTIC)
    return f"semantic:{label}", codec.encode_object("audit_record", {**record.to_avro(), **change})


def reference_reason(value: bytes | None) -> str | None:
    """Return the reason :func:`audit_record.decode` rejects ``value`` for, or None if it accepts it."""
    try:
        decode(value)
    except MalformedRecordError as exc:
        return exc.reason
    return None


@dataclass(frozen=True, slots=True)
class Mutant:
    """One mutated message and what the reference says of it.

    Attributes:
        mutation: The mutations applied (``+``-joined names of :data:`MUTATIONS`, ``semantic:<label>``,
            or a stamp mutation).
        reason: The dead-letter reason every reader must report (``bad_magic``, ``undecodable``,
            ``bad_stamp``...).
        key: The Kafka key to send it with.
        value: The message value.
        headers: The message headers (stamp mutants), else None.
        age_ms: How far in the past its CreateTime is, ms (0: now). A broken writer's clock, or a record
            replayed: the job must dead-letter it all the same, however late it is for the watermark.
    """

    mutation: str
    reason: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None = None
    age_ms: int = 0


def audit_mutants(
    rng: random.Random, n: int, topic: str = "fuzz.topic", now: int | None = None
) -> Iterator[Mutant]:
    """Yield ``n`` mutated audit records the reference decoder rejects (accepted mutants are redrawn).

    One in eight is a semantic mutation (:data:`_SEMANTIC`), the rest structural ones
    (:func:`mutate_object`, 1-3 rounds). Half the keys look like a producer snapshot's (``producer|``...),
    so the audit consumer's reader of producer timeouts decodes them too.
    """
    schema_json = codec.schema_json("audit_record")
    made = 0
    while made < n:
        record = sample_record(rng, topic, now)
        if rng.random() < 0.125:
            mutation, value = _semantic(rng, record)
        else:
            mutation, value = mutate_object(rng, encode(record), schema_json, rng.choice((1, 1, 2, 3)))
        reason = reference_reason(value)
        if reason is None:
            continue  # the mutant is a valid record: not for the dead-letter run
        # Keyed: the audit topic is compacted, and a broker rejects a whole batch with a record without key.
        key = record.key().encode() if rng.random() < 0.5 else rng.choice([b"junk", b"producer|x", b""])
        made += 1
        age = rng.choice([3_600_000, 86_400_000, 120_000]) if rng.random() < 0.1 else 0
        yield Mutant(mutation, reason, key, value, age_ms=age)


# ------------------------------------------------------------------------------------ stamps
_BAD_IDS: tuple[bytes, ...] = (
    b"",
    b"bad id",
    b"a/b",
    b"\xff\xfe",
    "\u00e9t\u00e9".encode(),
    b"x" * 201,
    b"tab\there",
    b"nul\x00",
)


def mutate_stamp(rng: random.Random, good: tuple[str, bytes]) -> tuple[str, list[tuple[str, bytes | None]]]:
    """Return ``(mutation, headers)``: a data message's headers with a structurally broken stamp.

    Args:
        rng: The random source.
        good: A valid stamp header ``(key, value)`` of either format (:func:`audit_record.stamp.header`).
    """
    key, value = good
    if key == STAMP_HEADER:
        return _mutate_v2(rng, key, value)
    pid, seq = value[:-SEQUENCE_BYTES], value[-SEQUENCE_BYTES:]
    other = [("x-app", b"1")]
    kind = rng.choice(
        ["short", "empty", "none", "seq_high", "bad_id", "utf8", "bitflip", "truncate", "extra_bad_first"]
    )
    if kind == "short":
        stamp: bytes | None = rng.randbytes(rng.randint(1, SEQUENCE_BYTES))
    elif kind == "empty":
        stamp = b""
    elif kind == "none":
        stamp = None
    elif kind == "seq_high":
        stamp = pid + bytes([seq[0] | 0x80]) + seq[1:]
    elif kind == "bad_id":
        stamp = rng.choice(_BAD_IDS) + seq
    elif kind == "utf8":
        at = rng.randrange(len(pid))
        bad = rng.choice(_INVALID_UTF8)
        stamp = pid[:at] + bad + pid[at + len(bad) :] + seq
    elif kind == "bitflip":
        i = rng.randrange(len(pid))
        stamp = pid[:i] + bytes([pid[i] ^ (1 << rng.randrange(8))]) + pid[i + 1 :] + seq
    elif kind == "truncate":
        stamp = value[: rng.randrange(len(value))]
    else:  # a malformed first stamp header, then a good one: the first one counts (stamp_of)
        first = rng.choice(_BAD_IDS[1:]) + seq
        return kind, [(key, first), *other, (key, value)]
    headers = [*other, (key, stamp)] if rng.random() < 0.5 else [(key, stamp), *other]
    return kind, headers


def _mutate_v2(rng: random.Random, key: str, value: bytes) -> tuple[str, list[tuple[str, bytes | None]]]:
    """:func:`mutate_stamp` for a v2 stamp: 8 id bytes, then the sequence varint."""
    pid, varint = value[:PRODUCER_ID_BYTES], value[PRODUCER_ID_BYTES:]
    other = [("x-app", b"1")]
    kind = rng.choice(
        ["short", "empty", "none", "open_end", "trailing", "not_minimal", "too_long", "truncate", "v1_key"]
    )
    stamp: bytes | None
    if kind == "short":
        stamp = rng.randbytes(rng.randint(1, PRODUCER_ID_BYTES))
    elif kind == "empty":
        stamp = b""
    elif kind == "none":
        stamp = None
    elif kind == "open_end":  # the last byte says more follow
        stamp = value[:-1] + bytes([value[-1] | 0x80])
    elif kind == "trailing":  # a byte after the varint's end
        stamp = value + bytes([rng.randrange(256)])
    elif kind == "not_minimal":  # a zero group after the last
        stamp = pid + varint[:-1] + bytes([varint[-1] | 0x80, 0])
    elif kind == "too_long":
        stamp = pid + bytes([0x80 | rng.randrange(128) for _ in range(VARINT_MAX_BYTES)]) + b"\x01"
    elif kind == "truncate":
        stamp = value[: rng.randrange(PRODUCER_ID_BYTES + 1)]
    else:  # a v2 value under the v1 key: its 8 random id bytes are rarely a valid v1 id
        return kind, [(STAMP_HEADER_V1, value), *other]
    headers = [*other, (key, stamp)] if rng.random() < 0.5 else [(key, stamp), *other]
    return kind, headers


def stamp_reference_ok(headers: list[tuple[str, bytes | None]]) -> bool:
    """Return True if the reference accepts the headers' stamp (none, or one :func:`read_stamp` takes)."""
    try:
        read_stamp(headers)
    except MalformedStampError:
        return False
    return True


def stamp_mutants(
    rng: random.Random, n: int, producer_ids: tuple[str, ...] = ("fuzz@host.1.0badcafe", "~0badcafe0badcafe")
) -> Iterator[Mutant]:
    """Yield ``n`` data messages whose stamp the reference rejects (accepted mutants are redrawn).

    Args:
        rng: The random source.
        n: How many.
        producer_ids: The ids of the good stamps mutated (v1 and v2 by default, picked at random).
    """
    made = 0
    while made < n:
        good = stamp_header(rng.choice(producer_ids), rng.randrange(1, 1 << 40))
        mutation, headers = mutate_stamp(rng, good)
        if stamp_reference_ok(headers):
            continue
        made += 1
        version = "v2" if good[0] == STAMP_HEADER else "v1"
        yield Mutant(
            f"stamp:{version}:{mutation}", "bad_stamp", None, b"payload " + rng.randbytes(8), headers
        )


def raw_single_object(name: str, data: dict[str, Any]) -> bytes:
    """Write ``data`` with schema ``name`` as a single object without any validation (for tests)."""
    buf = io.BytesIO()
    buf.write(SINGLE_OBJECT_MAGIC + codec.fingerprint(name))
    fastavro.schemaless_writer(buf, codec.schema(name), data)
    return buf.getvalue()


# ------------------------------------------------------------------------------------ the live run
@dataclass
class LiveFuzzResult:
    """What a live fuzz run sent, what came out, and how long it took.

    Attributes:
        records: Mutated audit records sent to the audit topic, by mutation family (the first applied).
        records_old: Of those, the ones sent with a CreateTime far behind the watermark.
        stamps: Data messages with a mutated stamp sent to the data topic, by mutation.
        expected: Dead letters expected per ``(component, reason)`` (from the reference decoders).
        dead_letters: Dead letters found in the dead-letter topic per ``(component, reason)``.
        counted: Dead letters counted per ``(component, reason)``: the audit consumer's ``stats`` and the
            Spark job's ``kafka_audit_dead_letters_total``.
        bytes_kept: True if every dead letter holds the original value of a mutant, each once.
        good_messages: Valid audited messages produced beside the mutants.
        windows: Final windows of the valid traffic the Spark job emitted / the verifier found.
        windows_exact: Windows whose Spark result equals the verifier (sent, unique, duplicated) and
            whose audit-consumer counts equal it.
        crashed: What failed (the Spark query, the audit consumer, its producer-timeouts reader); empty
            when nothing did.
        seconds: Wall time of the phases: ``start``, ``send``, ``drain`` (until every dead letter was
            counted and every window final), ``check``.
        topics: The run's topics by role (``data``, ``audit``, ``dlq``, ``results``).
    """

    records: Counter[str] = field(default_factory=Counter)
    records_old: Counter[str] = field(default_factory=Counter)
    stamps: Counter[str] = field(default_factory=Counter)
    expected: Counter[tuple[str, str]] = field(default_factory=Counter)
    dead_letters: Counter[tuple[str, str]] = field(default_factory=Counter)
    counted: Counter[tuple[str, str]] = field(default_factory=Counter)
    bytes_kept: bool = False
    good_messages: int = 0
    windows: tuple[int, int] = (0, 0)
    windows_exact: int = 0
    crashed: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    topics: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True if every mutant was dead-lettered and counted as expected, nothing crashed, counts exact."""
        return (
            not self.crashed
            and self.dead_letters == self.expected == self.counted
            and self.bytes_kept
            and self.windows[0] == self.windows[1] == self.windows_exact > 0
        )


def run_live(
    bootstrap: str,
    workdir: Path,
    records: int,
    stamps: int,
    *,
    seed: int = 18,
    good_messages: int = 20_000,
    good_rate: float = 2_000.0,
    timeout_s: float = 900.0,
    log: Callable[[str], None] = lambda _: None,
) -> LiveFuzzResult:
    """Send mutants through a live audit consumer and Spark job beside valid traffic; check the outcome.

    Starts, on the cluster at ``bootstrap``, an audit consumer (cluster ``fuzz``, adaptive finality, so
    its reader of producer timeouts decodes the audit topic too) and the reconciliation job (Spark
    ``local[2]``, live comparison on, retraining off). While an audited producer sends
    ``good_messages``, ``records`` mutated audit records (:func:`audit_mutants`) go to the audit topic
    and ``stamps`` data messages with mutated stamps (:func:`stamp_mutants`) to the data topic. Then it
    waits until every mutant is counted as a dead letter and every window of the valid traffic is
    final, stops everything and compares: the dead-letter topic (reason, component, original bytes),
    the counters, the verifier against the audit consumer and the Spark results.

    Args:
        bootstrap: Kafka bootstrap servers.
        workdir: Where the job's checkpoint, Parquet, training store and model registry go.
        records: Mutated audit records to send.
        stamps: Data messages with a mutated stamp to send.
        seed: Seed of the mutants and the load.
        good_messages: Valid audited messages to send beside them.
        good_rate: Their rate, messages/s.
        timeout_s: Deadline of the drain phase, s.
        log: Progress lines.
    """
    from confluent_kafka import Producer

    from audit_consumer.consumer import AuditConsumer
    from audit_consumer.ground_truth import verify_topic
    from audit_consumer.settings import AuditConsumerSettings
    from audit_producer import ProducerAuditSettings
    from audit_producer.load import run_load
    from audit_record import cluster_tier
    from audit_record.dead_letter import COMPONENT_HEADER, REASON_HEADER
    from kafka_audit.verification_report import compare_with_cluster
    from kafka_plumbing.topics import ensure_topic, read_to_end
    from spark_streaming.job import ReconciliationJob
    from spark_streaming.results import final_results, read_results
    from spark_streaming.settings import SparkJobSettings

    out = LiveFuzzResult()
    rng = random.Random(seed)
    run = f"{int(time.time())}.{rng.randbytes(3).hex()}"
    kconfig = {"bootstrap.servers": bootstrap}
    data_topic, audit_topic = f"fuzz.data.{run}", f"fuzz.audit.{run}"
    dlq_topic, state_topic = f"fuzz.dlq.{run}", f"fuzz.state.{run}"
    window_ms, cluster = 5_000, "fuzz"
    ensure_topic(kconfig, data_topic, partitions=3)
    out.topics = {
        "data": data_topic,
        "audit": audit_topic,
        "dlq": dlq_topic,
        "results": f"fuzz.results.{run}",
    }
    t0 = time.monotonic()
    consumer = AuditConsumer(
        AuditConsumerSettings(
            cluster=cluster,
            topics=[data_topic],
            bootstrap_servers=bootstrap,
            audit_topic=audit_topic,
            state_topic=state_topic,
            dlq_topic=dlq_topic,
            group_id=f"fuzz.{run}",
            instance_id="fuzz0",
            window_ms=window_ms,
            grace_ms=2_000,
            commit_interval_ms=500,
            transaction_timeout_ms=10_000,
            delivery_margin_ms=1_000,
            max_final_wait_ms=15_000,
        )
    )
    stop = threading.Event()
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            consumer.run(stop)
        except BaseException as exc:  # reported as a crash below
            errors.append(exc)

    consumer_thread = threading.Thread(target=consume, name="fuzz-audit-consumer", daemon=True)
    job = ReconciliationJob(
        SparkJobSettings(
            bootstrap_servers=bootstrap,
            audit_topic=audit_topic,
            dlq_topic=dlq_topic,
            results_topic=out.topics["results"],
            commits_topic=f"fuzz.commits.{run}",
            checkpoint_dir=workdir / "checkpoint",
            parquet_dir=workdir / "results",
            training_dir=workdir / "training",
            model_registry_dir=workdir / "models",
            clusters=[cluster],
            trigger_ms=1_000,
            watermark_delay_ms=2_000,
            grace_ms=4_000,
            delivery_margin_ms=1_000,
            max_final_wait_ms=15_000,
            final_settle_ms=2_000,
            heartbeat_ms=500,
            retrain=False,
            query_name=f"fuzz-{run}",
        )
    )
    try:
        job.start()
        consumer_thread.start()
        # A few micro-batches of heartbeats first: the watermark is then near the wall clock, so the
        # mutants with an old CreateTime are late for it (they must be dead-lettered all the same).
        while job.batches_written < 3 and job.exception() is None and time.monotonic() - t0 < 300:
            time.sleep(0.2)
        out.seconds["start"] = time.monotonic() - t0
        log(f"audit consumer and Spark job started in {out.seconds['start']:.0f} s; sending mutants")
        t1 = time.monotonic()
        sent_values: Counter[bytes] = Counter()
        load_result: list[Any] = []
        audit = ProducerAuditSettings(
            window_ms=window_ms, grace_ms=1_000, snapshot_interval_ms=1_000, audit_topic=audit_topic
        )
        load = threading.Thread(
            target=lambda: load_result.append(
                run_load(
                    {**kconfig, "client.id": "fuzz-good", "message.timeout.ms": 2_000},
                    data_topic,
                    "weblog",
                    rate=good_rate,
                    count=good_messages,
                    duration_s=None,
                    audit=audit,
                    seed=seed,
                )
            ),
            name="fuzz-good-load",
        )
        load.start()
        failed: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failed.append(str(err))

        raw = Producer({**kconfig, "linger.ms": 20, "queue.buffering.max.messages": 200_000})
        mutants = _interleave(rng, audit_mutants(rng, records), stamp_mutants(rng, stamps))
        for i, m in enumerate(mutants):
            if m.headers is not None:
                out.stamps[m.mutation] += 1
                out.expected[("audit-consumer", m.reason)] += 1
                target = data_topic
            else:
                out.records[m.mutation.split("+")[0]] += 1
                if m.age_ms:
                    out.records_old[m.mutation.split("+")[0]] += 1
                out.expected[("spark", m.reason)] += 1
                target = audit_topic
            sent_values[m.value or b""] += 1
            while True:
                try:
                    raw.produce(
                        target,
                        m.value,
                        m.key,
                        headers=m.headers,
                        on_delivery=delivered,
                        timestamp=int(time.time() * 1000) - m.age_ms if m.age_ms else 0,
                    )
                    break
                except BufferError:
                    raw.poll(0.05)
            if i % 1_000 == 0:
                raw.poll(0)
            if i % 10_000 == 0 and i:
                log(f"{i:,} mutants sent")
        if raw.flush(60) != 0 or failed:
            raise RuntimeError(f"mutants not delivered: {failed[:3]}")
        load.join()
        out.good_messages = load_result[0].produced if load_result else 0
        out.seconds["send"] = time.monotonic() - t1
        log(f"{records + stamps:,} mutants and {out.good_messages:,} valid messages sent")
        t2 = time.monotonic()
        deadline = t2 + timeout_s
        next_log = 0.0
        while time.monotonic() < deadline:
            out.counted = _counted(consumer, job)
            if job.exception() is not None or errors or out.counted == out.expected:
                break
            if time.monotonic() >= next_log:
                next_log = time.monotonic() + 15
                log(f"dead letters counted {sum(out.counted.values()):,} of {sum(out.expected.values()):,}")
            time.sleep(1.0)
        # Every window of the valid traffic final in the job's results (the verifier is read once, after).
        while time.monotonic() < deadline and not errors and job.exception() is None:
            rows = [r for r in read_results(kconfig, job.s.results_topic) if r["topic"] == data_topic]
            seen = {r["window_start_ms"] for r in rows}
            final = {r["window_start_ms"] for r in rows if r["state"] == "final"}
            if seen and seen == final and not load.is_alive():
                break
            log(f"final windows {len(final)} of {len(seen)}")
            time.sleep(2.0)
        out.seconds["drain"] = time.monotonic() - t2
        log(f"drained in {out.seconds['drain']:.0f} s")
        t3 = time.monotonic()
        if job.exception() is not None:
            out.crashed.append(f"spark query: {job.exception()}")
        if errors:
            out.crashed.append(f"audit consumer: {errors[0]!r}")
        reader = consumer.timeouts
        if reader is None or reader._thread is None or not reader._thread.is_alive():
            out.crashed.append("the audit consumer's producer-timeouts reader is not running")
        elif reader.records_read == 0:
            out.crashed.append("the audit consumer's producer-timeouts reader read no producer snapshot")
    finally:
        stop.set()
        consumer_thread.join(60)
        if consumer_thread.is_alive():
            out.crashed.append("audit consumer did not stop")
        job.stop()
    out.counted = _counted(consumer, job)
    letters = list(read_to_end(kconfig, dlq_topic, group_id=f"fuzz.check.{run}", timeout_s=120))
    kept: Counter[bytes] = Counter()
    for letter in letters:
        headers = dict(letter.headers() or [])
        out.dead_letters[(headers[COMPONENT_HEADER].decode(), headers[REASON_HEADER].decode())] += 1
        kept[letter.value() or b""] += 1
    out.bytes_kept = kept == sent_values
    v = verify_topic(kconfig, data_topic, window_ms, audit_topic=audit_topic)
    truth = _truth(v)
    mismatches = compare_with_cluster(v, cluster)
    finals = final_results(read_results(kconfig, job.s.results_topic))
    spark = {
        w: rows for (t, w, tier), rows in finals.items() if t == data_topic and tier == cluster_tier(cluster)
    }
    out.windows = (len(spark), len(truth))
    bad_windows = {m.window_start_ms for m in mismatches}
    out.windows_exact = sum(
        1
        for w, (sent, unique, dup) in truth.items()
        if w not in bad_windows
        and len(spark.get(w, [])) == 1
        and (spark[w][0]["sent"], spark[w][0]["unique"], spark[w][0]["duplicated"]) == (sent, unique, dup)
    )
    out.seconds["check"] = time.monotonic() - t3
    return out


def _interleave(rng: random.Random, *streams: Iterator[Mutant]) -> Iterator[Mutant]:
    """Yield the mutants of every stream in a random interleaving."""
    live = list(streams)
    while live:
        stream = rng.choice(live)
        try:
            yield next(stream)
        except StopIteration:
            live.remove(stream)


def _counted(consumer: Any, job: Any) -> Counter[tuple[str, str]]:
    """Dead letters counted so far: the audit consumer's (all ``bad_stamp`` here) and the Spark job's."""
    out: Counter[tuple[str, str]] = Counter()
    if consumer.stats.dead_letters:
        out[("audit-consumer", "bad_stamp")] = consumer.stats.dead_letters
    for metric in job.metrics.dead_letters.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total") and sample.labels.get("component") == "spark" and sample.value:
                out[("spark", sample.labels["reason"])] = int(sample.value)
    return out


def _truth(v: Any) -> dict[int, tuple[int, int, int]]:
    """Return the verifier's (sent, unique, duplicated) per window of the audited producers."""
    out: dict[int, tuple[int, int, int]] = {}
    for (start, pid), row in v.rows.items():
        if pid is None:
            continue
        sent, unique, dup = out.get(start, (0, 0, 0))
        out[start] = (sent + row.sent, unique + row.unique, dup + row.duplicated)
    return out


__all__ = [
    "MUTATIONS",
    "LiveFuzzResult",
    "Mutant",
    "Token",
    "audit_mutants",
    "avro_tokens",
    "mutate_object",
    "mutate_stamp",
    "reference_reason",
    "run_live",
    "sample_record",
    "stamp_mutants",
    "stamp_reference_ok",
    "zigzag",
]
