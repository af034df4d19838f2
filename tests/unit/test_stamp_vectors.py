"""The audit stamp against its shared test vectors (``audit_record/stamp_vectors.json``).

The same file is read by the JVM and native implementations: every valid vector encodes to exactly its
bytes and decodes back, through the reference functions and through the hot paths (the producer's
packer, the consumer's loop, the verifier's tally); every malformed one is rejected with its reason and
dead-lettered as ``bad_stamp``.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from audit_consumer.counts import SEQS, PartitionCounts, count_batch
from audit_consumer.ground_truth import tally
from audit_producer.stamp_packer import stamp_packer
from audit_record import stamp

VECTORS: dict[str, Any] = json.loads(
    resources.files("audit_record").joinpath("stamp_vectors.json").read_text(encoding="utf-8")
)


class _Msg:
    """A consumed message with one stamp header."""

    def __init__(self, offset: int, key: str, value: bytes) -> None:
        self._offset, self._headers = offset, [(key, value)]

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_000)

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def value(self) -> bytes:
        return b"v"


def test_the_vectors_name_the_keys_and_cover_both_formats_and_every_reason() -> None:
    assert VECTORS["keys"] == {"2": stamp.STAMP_HEADER, "1": stamp.STAMP_HEADER_V1}
    assert {v["version"] for v in VECTORS["valid"]} == {1, 2}
    reasons = {v["reason"] for v in VECTORS["malformed"]}
    assert reasons == {
        "too_short",
        "sequence_range",
        "bad_producer_id",
        "varint_length",
        "varint_continuation",
        "varint_not_minimal",
    }


@pytest.mark.parametrize("vec", VECTORS["valid"], ids=lambda v: f"v{v['version']}-{v['sequence']}")
def test_valid_vectors_encode_and_decode_exactly(vec: dict[str, Any]) -> None:
    pid, seq, value = vec["producer_id"], vec["sequence"], bytes.fromhex(vec["value_hex"])
    assert stamp.header(pid, seq) == (vec["key"], value)
    assert stamp.version_of(pid) == vec["version"]
    assert stamp.decode(vec["key"], value) == (pid.encode(), seq)
    assert len(vec["key"].encode()) + len(value) == vec["key_plus_value_bytes"]
    prefix = stamp.encode_prefix(pid)
    assert stamp_packer(prefix, vec["version"])(prefix, seq) == value  # the producer's hot path
    if vec["version"] == 2 and seq < 1 << 42:
        assert vec["key_plus_value_bytes"] <= 16


@pytest.mark.parametrize("vec", VECTORS["malformed"], ids=lambda v: f"v{v['version']}-{v['reason']}")
def test_malformed_vectors_are_rejected_with_their_reason(vec: dict[str, Any]) -> None:
    with pytest.raises(stamp.MalformedStampError) as err:
        stamp.decode(vec["key"], bytes.fromhex(vec["value_hex"]))
    assert err.value.reason == vec["reason"]


def test_the_hot_paths_read_every_vector_as_the_reference_does() -> None:
    msgs = [_Msg(i, v["key"], bytes.fromhex(v["value_hex"])) for i, v in enumerate(VECTORS["valid"])]
    n_valid = len(msgs)
    msgs += [
        _Msg(n_valid + i, v["key"], bytes.fromhex(v["value_hex"])) for i, v in enumerate(VECTORS["malformed"])
    ]
    parts = {("t", 0): PartitionCounts("t", 0, 10_000, 0)}
    dead: list[tuple[int, str]] = []
    n = count_batch(
        msgs, parts, 2_000, {}, lambda tp: None, lambda m: None, lambda m, r, d: dead.append((m.offset(), r))
    )
    assert n == n_valid
    assert dead == [(n_valid + i, "bad_stamp") for i in range(len(VECTORS["malformed"]))]
    counted = {(pid.decode(), seq) for (_, pid), b in parts[("t", 0)].open.items() for seq in b[SEQS]}
    assert counted == {(v["producer_id"], v["sequence"]) for v in VECTORS["valid"]}
    truth = tally(msgs, "t", 10_000)
    assert truth.malformed_stamps == len(VECTORS["malformed"])
    assert {(pid, seq) for (_, pid), row in truth.rows.items() for seq in row.sequences} == counted


def test_v2_ids_never_look_like_v1_ids_and_are_random() -> None:
    ids = {stamp.new_producer_id("app") for _ in range(1000)}
    assert len(ids) == 1000
    for pid in ids:
        assert stamp.version_of(pid) == 2 and len(pid) == 17 and pid.startswith("~")
        assert not stamp.is_v1_id(pid.encode())  # "~" is outside the v1 alphabet
    v1 = stamp.new_producer_id("my app/1", 1)
    assert stamp.version_of(v1) == 1 and "@" in v1
    with pytest.raises(stamp.MalformedStampError):
        stamp.encode_prefix("~0123")  # neither a v2 id (16 hex digits) nor a v1 id ("~")
