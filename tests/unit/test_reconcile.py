from audit_record import AuditRecord, ProducerConfig
from audit_record.window_result import FINAL
from spark_streaming.reconcile import compact, merge, reconcile


def _snap(order, **kw):
    base = dict(tier="producer", source="s", topic="t", window_start_ms=0, window_end_ms=10)
    base.update(kw)
    return compact(AuditRecord(**base), *order)


def test_newest_snapshot_per_key_wins_by_offset():
    state = {}
    assert merge(state, "k", _snap((0, 5), producer_id="p", sent=10))
    assert not merge(state, "k", _snap((0, 3), producer_id="p", sent=99))
    assert merge(state, "k", _snap((0, 9), producer_id="p", sent=12))
    assert state["k"]["sent"] == 12


def test_reconcile_sums_tiers_and_computes_eq3_rates():
    cfg = ProducerConfig(
        acks="0",
        enable_idempotence=False,
        batch_num_messages=4,
        linger_ms=5,
        message_timeout_ms=300,
        message_send_max_retries=0,
        retry_backoff_ms=100,
    )
    snaps = [
        _snap((0, 1), producer_id="p1", sent=100, acknowledged=90, failed=10, producer_config=cfg),
        _snap((0, 2), producer_id="p2", sent=50, acknowledged=50),
        _snap((1, 1), tier="cluster:a", producer_id="p1", partition=0, received=60, unique=55, duplicated=5),
        _snap((1, 2), tier="cluster:a", producer_id="p1", partition=1, received=35, unique=35),
        _snap((1, 3), tier="cluster:a", producer_id="p2", partition=0, received=50, unique=50),
        _snap((1, 4), tier="cluster:a", producer_id="ghost", partition=0, received=7, unique=7),
    ]
    rows = reconcile("t", 0, 10, snaps, ["a", "b"], FINAL)
    a, b = rows
    assert (a["tier"], a["sent"], a["unique"], a["duplicated"], a["received"]) == (
        "cluster:a",
        150,
        140,
        5,
        152,
    )
    assert a["loss_rate"] == 10 / 150 and a["duplicate_rate"] == 5 / 150 and a["completeness"] == 140 / 150
    assert (a["producers"], a["unaudited_producers"], a["acks"], a["batch_num_messages"]) == (2, 1, "0", 4)
    assert (a["unaccounted"], a["unaccounted_unique"]) == (7, 7)  # the ghost's messages, not in sent
    # A cluster that saw nothing has lost everything.
    assert (b["tier"], b["unique"], b["loss_rate"]) == ("cluster:b", 0, 1.0)


def test_stamps_naming_no_reporting_producer_are_unaccounted_never_loss_or_duplicates():
    # Issue 36's kcat case: an audited producer's 1,592 messages and 500 copies of the forged stamp
    # b"not-a-valid-stamp" (v1 reads it as producer "not-a-val", one sequence), plus 30 without stamps.
    snaps = [
        _snap((0, 1), producer_id="app@h.1.ab", sent=1_592, acknowledged=1_592),
        _snap((1, 1), tier="cluster:a", producer_id="app@h.1.ab", received=1_592, unique=1_592),
        _snap((1, 2), tier="cluster:a", producer_id="not-a-val", received=500, unique=1, duplicated=499),
        _snap((1, 3), tier="cluster:a", producer_id=None, received=30, unaudited=30),
    ]
    (row,) = reconcile("t", 0, 10, snaps, ["a"], FINAL)
    assert (row["sent"], row["unique"], row["duplicated"]) == (1_592, 1_592, 0)
    assert (row["unaccounted"], row["unaccounted_unique"], row["unaudited_producers"]) == (500, 1, 1)
    assert (row["loss_rate"], row["duplicate_rate"], row["completeness"]) == (0.0, 0.0, 1.0)
    assert row["received"] == row["unique"] + row["duplicated"] + row["unaudited"] + row["unaccounted"]
    # The producer's snapshot arrives (it was only late): its messages are accounted for after all.
    late = _snap((0, 2), producer_id="not-a-val", sent=1, acknowledged=1)
    (row,) = reconcile("t", 0, 10, [*snaps, late], ["a"], FINAL)
    assert (row["unaccounted"], row["unaudited_producers"], row["duplicated"]) == (0, 0, 499)
