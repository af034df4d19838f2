from audit_consumer import counts, latency, state_codec
from audit_consumer.counts import PartitionCounts, fold_latencies, unique_of
from audit_consumer.state_codec import decode_state, encode_state, encode_state_within_limit


def _pc():
    return PartitionCounts("t", 0, window_ms=1_000, grace_ms=500)


def test_duplicates_are_counted_once_per_sequence():
    pc = _pc()
    for seq in (1, 2, 3, 2, 2, 3):
        pc.observe(1_500, b"p", seq, 10, 5)
    b = pc.open[(1_000, b"p")]
    assert (b[counts.RECEIVED], unique_of(b"p", b), b[counts.DUPLICATED], b[counts.BYTES]) == (6, 3, 3, 60)


def test_unaudited_messages_have_their_own_bucket_and_no_uniques():
    pc = _pc()
    pc.observe(1_500, None, 0, 1, 1)
    pc.observe(1_600, None, 0, 1, 1)
    assert pc.open[(1_000, None)][counts.RECEIVED] == 2
    assert unique_of(None, pc.open[(1_000, None)]) == 0


def test_windows_close_after_end_plus_grace_and_later_messages_are_late():
    pc = _pc()
    pc.observe(1_100, b"p", 1, 1, 0)
    pc.observe(2_400, b"p", 2, 1, 0)  # watermark 2400 < 2000 + 500: window 1000 still open
    assert pc.advance(None, 60_000) == []
    pc.observe(2_600, b"p", 3, 1, 0)  # watermark 2600 >= 2500: window [1000, 2000) closes
    closed = pc.advance(None, 60_000)
    assert [(s, p) for s, p, _ in closed] == [(1_000, b"p")]
    assert (1_000, b"p") not in pc.open and pc.closed[(1_000, b"p")][counts.SEQS] is None
    assert unique_of(b"p", pc.closed[(1_000, b"p")]) == 1
    pc.observe(1_999, b"p", 1, 1, 0)  # late: counted on the closed window, not as received
    b = pc.closed[(1_000, b"p")]
    assert (b[counts.LATE], b[counts.RECEIVED]) == (1, 1)


def test_wall_clock_closes_windows_of_an_idle_caught_up_partition():
    pc = _pc()
    pc.observe(1_100, b"p", 1, 1, 0)
    assert pc.advance(None, 60_000) == []
    assert len(pc.advance(now_ms=10_000, late_retention_ms=60_000)) == 1


def test_closed_counters_expire_after_retention():
    pc = _pc()
    pc.observe(1_100, b"p", 1, 1, 0)
    pc.advance(now_ms=3_000, late_retention_ms=1_000)
    assert (1_000, b"p") in pc.closed
    pc.advance(now_ms=10_000, late_retention_ms=1_000)
    assert pc.closed == {}


def test_state_roundtrip_keeps_sequences_counters_and_histograms():
    pc = _pc()
    for seq in range(1, 1000, 3):
        pc.observe(1_100, b"p", seq, 7, seq)
    pc.observe(1_100, b"p", 4, 7, 3)
    pc.observe(3_100, None, 0, 2, 9)
    pc.advance(None, 60_000)
    pc.next_offset = 777
    for b in [*pc.open.values(), *pc.closed.values()]:
        fold_latencies(b, stale_after_ms=500)
    back = decode_state(encode_state("g", pc), 1_000, 500)
    assert (back.next_offset, back.watermark_ms, back.closed_horizon_ms) == (
        777,
        pc.watermark_ms,
        pc.closed_horizon_ms,
    )
    assert back.open.keys() == pc.open.keys() and back.closed.keys() == pc.closed.keys()
    for key, b in pc.closed.items():
        c = back.closed[key]
        assert [c[i] for i in (counts.RECEIVED, counts.DUPLICATED, counts.STALE, counts.BYTES)] == [
            b[i] for i in (counts.RECEIVED, counts.DUPLICATED, counts.STALE, counts.BYTES)
        ]
        assert unique_of(key[1], c) == unique_of(key[1], b)
    assert back.closed[(1_000, b"p")][counts.STALE] == sum(1 for s in range(1, 1000, 3) if s > 500)
    # Open windows keep their sequence sets: a re-sent sequence is still a duplicate after a restore.
    back.observe(3_200, b"q", 5, 1, 0)
    back.observe(3_200, b"q", 5, 1, 0)
    assert back.open[(3_000, b"q")][counts.DUPLICATED] == 1


def test_latency_buckets_bound_the_value_within_25_percent():
    for x in [1, 2, 3, 5, 7, 8, 100, 1234, 99_999, 2**40 + 7]:
        i = latency.bucket_of(x)
        assert latency.lower_bound(i) <= x < 1.25 * latency.lower_bound(i) + 1
    hist = [0] * latency.N_BUCKETS
    values = [0, -3, 1, 2, 3, 5, 8, 13, 1000, 1001, 2**33]
    latency.add_all(hist, values)
    expected = [0] * latency.N_BUCKETS
    for v in values:
        expected[latency.bucket_of(v)] += 1
    assert hist == expected
    assert latency.percentile(hist, 0.5) == latency.lower_bound(latency.bucket_of(5))  # 6th of 11
    assert latency.percentile([0] * latency.N_BUCKETS, 0.5) is None


def test_sequences_the_jvm_interceptor_writes_with_run_containers_decode_here() -> None:
    """The JVM consumer interceptor adds a partition's runs of sequences as ranges (RunContainers), so its
    state's portable Roaring bytes differ from pyroaring's for the same set: pyroaring must read them.
    The bytes are the interceptor's for {1, 2, 3, 1000, 2**40 + 5} (ConsumerAuditorTest pins them)."""
    from pyroaring import BitMap64

    java = bytes.fromhex(
        "0200000000000000000000003b3000000100000300020001000200e8030000000100003a3000000100000000000000100000000500"
    )
    assert java != BitMap64([1, 2, 3, 1000, 2**40 + 5]).serialize()
    assert list(BitMap64.deserialize(java)) == [1, 2, 3, 1000, 2**40 + 5]


def test_crosses_window_says_whether_advance_would_move_the_first_open_window_and_changes_nothing():
    """The audit consumer asks for a partition's end only when the wall clock would close a window."""
    pc = _pc()
    pc.observe(1_100, b"p", 1, 1, 0)
    assert pc.crosses_window(2_400)  # the first horizon: window 1000 becomes the first open one
    assert pc.advance(2_400, 60_000) == [] and pc.closed_horizon_ms == 1_900
    assert not pc.crosses_window(2_499)  # window 1000 still open: the same first open window
    assert pc.crosses_window(2_500)  # end 2000 + grace 500: window 1000 closes
    assert not pc.crosses_window(2_500, wait_ms=lambda start: 3_000, max_wait_ms=3_000)  # held
    assert pc.crosses_window(5_000, wait_ms=lambda start: 3_000, max_wait_ms=3_000)
    assert pc.closed_horizon_ms == 1_900 and (1_000, b"p") in pc.open  # nothing changed
    assert len(pc.advance(2_500, 60_000)) == 1


def test_a_state_over_the_limit_is_not_encoded_and_is_logged(monkeypatch, caplog):
    pc = PartitionCounts("t", 2, 1_000, 500)
    for seq in range(0, 200_000, 15):  # every 15th: bitmap containers, about 8 KiB each
        pc.observe(10, b"\x01" * 8, seq, 1, 1)
    value = encode_state("g", pc)
    assert encode_state_within_limit("g", pc, "what follows") == value
    monkeypatch.setattr(state_codec, "STATE_MAX_MESSAGE_BYTES", len(value) - 1)
    assert encode_state_within_limit("g", pc, "what follows") is None
    assert (
        f"state of t[2] is {len(value)} bytes, over the {len(value) - 1}-byte limit: what follows"
        in caplog.text
    )
