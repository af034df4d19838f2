"""Which state record a consumer tier loads: :func:`audit_consumer.state_codec.newest_values`."""

from __future__ import annotations

from audit_consumer.state_codec import newest_values, state_key


class _Rec:
    """A consumed state-topic record: key, value, partition and CreateTime (ms)."""

    def __init__(self, key: bytes, value: bytes | None, partition: int, ts: int) -> None:
        self._key, self._value, self._partition, self._ts = key, value, partition, ts

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def partition(self) -> int:
        return self._partition

    def timestamp(self) -> tuple[int, int]:
        return (1, self._ts)


K0, K1 = state_key("consumer:g", "t", 0), state_key("consumer:g", "t", 1)
WANTED = {K0: ("t", 0), K1: ("t", 1)}


def test_within_a_partition_the_log_order_decides_whatever_the_timestamps() -> None:
    # a member whose clock is behind wrote the later record: the log still says it is the newer one
    recs = [_Rec(K0, b"old", 2, 5_000), _Rec(K0, b"new", 2, 4_000)]
    assert newest_values(recs, WANTED) == {("t", 0): b"new"}


def test_across_partitions_the_later_timestamp_decides_in_either_reading_order() -> None:
    old, new = _Rec(K0, b"old", 1, 1_000), _Rec(K0, b"new", 2, 2_000)
    assert newest_values([old, new], WANTED) == {("t", 0): b"new"}
    assert newest_values([new, old], WANTED) == {("t", 0): b"new"}


def test_a_partitions_last_record_stands_for_it_whatever_the_reading_order() -> None:
    # P0: a@3000 then b@1000 (a clock behind); P1: c@2000. P0's state is b, older than c.
    p0 = [_Rec(K0, b"a", 0, 3_000), _Rec(K0, b"b", 0, 1_000)]
    p1 = [_Rec(K0, b"c", 1, 2_000)]
    assert newest_values(p0 + p1, WANTED) == {("t", 0): b"c"}
    assert newest_values(p1 + p0, WANTED) == {("t", 0): b"c"}


def test_a_tombstone_as_the_newest_record_means_no_state_and_other_keys_are_skipped() -> None:
    recs = [
        _Rec(K1, b"one", 0, 1),
        _Rec(state_key("consumer:other", "t", 0), b"x", 0, 9),
        _Rec(K0, b"zero", 0, 1),
        _Rec(K0, None, 0, 2),
    ]
    assert newest_values(recs, WANTED) == {("t", 1): b"one"}
