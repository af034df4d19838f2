import dataclasses
import json

import pandas as pd
import pytest

from audit_record import AuditRecord
from kafka_audit.up_settings import load_up_settings
from kafka_plumbing.errors import ConfigError
from spark_streaming.decode import DEAD_LETTER_GROUP, decode_batches
from spark_streaming.reconcile import compact
from spark_streaming.window_state import make_reconciler


class FakeState:
    """The parts of pyspark's GroupState the reconciler uses."""

    def __init__(self, watermark_ms=0):
        self.value = None
        self.timeout = None
        self.hasTimedOut = False
        self.watermark_ms = watermark_ms

    @property
    def exists(self):
        return self.value is not None

    @property
    def get(self):
        return self.value

    def update(self, value):
        self.value = value

    def remove(self):
        self.value = None

    def setTimeoutTimestamp(self, ts):
        assert ts > self.watermark_ms
        self.timeout = ts

    def getCurrentWatermarkMs(self):
        return self.watermark_ms


def _rows(*records, offset=0):
    return pd.DataFrame(
        [
            {"snap_key": r.key(), "payload": json.dumps(compact(r, 0, i)), "g_window_end": 10_000}
            for i, r in enumerate(records, offset)
        ]
    )


def _out(gen):
    frames = list(gen)
    return pd.concat(frames).to_dict("records") if frames else []


def test_provisional_then_final_once_then_late():
    fn = make_reconciler(["a"], grace_ms=5_000)
    st = FakeState()
    p = AuditRecord(
        tier="producer",
        source="s",
        producer_id="p",
        topic="t",
        window_start_ms=0,
        window_end_ms=10_000,
        sent=10,
    )
    c = AuditRecord(
        tier="cluster:a",
        source="g",
        producer_id="p",
        topic="t",
        window_start_ms=0,
        window_end_ms=10_000,
        received=9,
        unique=8,
        duplicated=1,
    )
    out = _out(fn(("t", 0), iter([_rows(p, c)]), st))
    [row] = [r for r in out if r["kind"] == "result"]
    [prod] = [r for r in out if r["kind"] == "producer"]  # the producer snapshot, for per-producer metrics
    assert (prod["producer_id"], prod["topic"], prod["result_at_ms"]) == ("p", "t", p.emitted_at_ms)
    assert (row["state"], row["sent"], row["unique"], row["loss_rate"], row["duplicate_rate"]) == (
        "provisional",
        10,
        8,
        0.2,
        0.1,
    )
    assert st.timeout == 15_000
    st.hasTimedOut = True
    st.watermark_ms = 15_001
    [final] = _out(fn(("t", 0), iter([]), st))
    assert final["state"] == "final" and final["loss_rate"] == 0.2
    st.hasTimedOut = False
    [late] = _out(fn(("t", 0), iter([_rows(c)]), st))  # after final: reported as late, not applied
    assert late["kind"] == "late" and late["late"] == 1


def _window(sent: int, unique: int, final: bool, tier: str = "cluster:a", emitted_at_ms: int = 1):
    p = AuditRecord(
        tier="producer",
        source="s",
        producer_id="p",
        topic="t",
        window_start_ms=0,
        window_end_ms=10_000,
        sent=sent,
        final=True,
    )
    c = AuditRecord(
        tier=tier,
        source="g",
        producer_id="p",
        topic="t",
        partition=0,
        window_start_ms=0,
        window_end_ms=10_000,
        received=unique,
        unique=unique,
        final=final,
        emitted_at_ms=emitted_at_ms,
    )
    return p, c


def _time_out(fn, st, watermark_ms):
    st.hasTimedOut, st.watermark_ms = True, watermark_ms
    try:
        return _out(fn(("t", 0), iter([]), st))
    finally:
        st.hasTimedOut = False


def test_window_waits_for_a_cluster_tier_that_has_not_closed_it():
    """An audit consumer restarting when the wait is over: its final snapshot still counts (invariant 8)."""
    fn = make_reconciler(["a"], grace_ms=5_000, tier_final_wait_ms=60_000)
    st = FakeState()
    p, c = _window(sent=100, unique=60, final=False)  # the consumer counted 60 before it was killed
    _out(fn(("t", 0), iter([_rows(p, c)]), st))
    assert st.timeout == 15_000
    assert _time_out(fn, st, 15_001) == []  # not final: the cluster tier has not closed the window
    assert st.timeout == 75_000 and st.value[2] is False
    _, c2 = _window(sent=100, unique=100, final=True, emitted_at_ms=2)  # back: its final snapshot
    st.watermark_ms = 30_000
    [provisional] = [r for r in _out(fn(("t", 0), iter([_rows(c2, offset=2)]), st)) if r["kind"] == "result"]
    assert provisional["state"] == "provisional" and st.timeout == 30_001  # final at the next timeout
    [final] = _time_out(fn, st, 30_002)
    assert (final["state"], final["unique"], final["loss_rate"]) == ("final", 100, 0.0)


def test_a_cluster_tier_that_never_closes_the_window_holds_it_until_the_bound():
    fn = make_reconciler(["a"], grace_ms=5_000, tier_final_wait_ms=60_000)
    st = FakeState()
    p, c = _window(sent=100, unique=60, final=False)
    _out(fn(("t", 0), iter([_rows(p, c)]), st))
    assert _time_out(fn, st, 15_001) == [] and st.timeout == 75_000
    [final] = _time_out(fn, st, 75_001)
    assert (final["state"], final["unique"], final["loss_rate"]) == ("final", 60, 0.4)


def test_window_waits_for_a_producer_that_has_not_closed_it():
    """A producer's final snapshot after the wait (retiring, or starved of CPU) still makes the result."""
    fn = make_reconciler(["a"], grace_ms=5_000, tier_final_wait_ms=60_000)
    st = FakeState()
    p, c = _window(sent=100, unique=100, final=True)
    early = dataclasses.replace(p, sent=60, final=False)  # provisional: 40 messages not reported yet
    _out(fn(("t", 0), iter([_rows(early, c)]), st))
    assert _time_out(fn, st, 15_001) == []  # not final: the producer has not closed the window
    assert st.timeout == 75_000 and st.value[2] is False
    st.watermark_ms = 30_000
    _out(fn(("t", 0), iter([_rows(p, offset=2)]), st))  # its final snapshot
    [final] = [r for r in _time_out(fn, st, 30_002) if r["tier"] == "cluster:a"]
    assert (final["state"], final["sent"], final["unique"], final["loss_rate"]) == ("final", 100, 100, 0.0)


def test_a_producer_that_never_closes_the_window_holds_it_until_the_bound():
    fn = make_reconciler(["a"], grace_ms=5_000, tier_final_wait_ms=60_000)
    st = FakeState()
    p, c = _window(sent=100, unique=100, final=True)
    _out(fn(("t", 0), iter([_rows(dataclasses.replace(p, final=False), c)]), st))
    assert _time_out(fn, st, 15_001) == [] and st.timeout == 75_000
    [final] = [r for r in _time_out(fn, st, 75_001) if r["tier"] == "cluster:a"]
    assert (final["state"], final["sent"]) == ("final", 100)


@pytest.mark.parametrize(
    "tier, final, wait",
    [("cluster:a", True, 60_000), ("consumer:app", False, 60_000), ("cluster:a", False, 0)],
)
def test_final_when_the_wait_is_over(tier, final, wait):
    """Closed cluster tiers, application consumer tiers (never waited for), or the tier wait off."""
    fn = make_reconciler(["a"], grace_ms=5_000, tier_final_wait_ms=wait)
    st = FakeState()
    p, c = _window(sent=100, unique=90, final=final, tier=tier)
    _out(fn(("t", 0), iter([_rows(p, c)]), st))
    rows = [r for r in _time_out(fn, st, 15_001) if r["tier"] == "cluster:a"]
    assert [r["state"] for r in rows] == ["final"]


def test_snapshots_kept_before_final_was_kept_count_as_closed():
    """State written by an older job (its snapshots have no ``final``) is finalised as before."""
    fn = make_reconciler(["a"], grace_ms=5_000, tier_final_wait_ms=60_000)
    st = FakeState()
    p, c = _window(sent=100, unique=90, final=False)
    _out(fn(("t", 0), iter([_rows(p, c)]), st))
    snaps = {
        k: {f: v for f, v in snap.items() if f != "final"} for k, snap in json.loads(st.value[0]).items()
    }
    st.value = (json.dumps(snaps), st.value[1], False)
    [final] = [r for r in _time_out(fn, st, 15_001) if r["tier"] == "cluster:a"]
    assert final["state"] == "final"


def test_dead_letters_pass_through_and_decode_routes_garbage():
    good = AuditRecord(tier="producer", source="s", topic="t", window_start_ms=0, window_end_ms=10)
    from audit_record import encode

    src = pd.DataFrame(
        {
            "key": [b"k", b"k"],
            "value": [encode(good), b"garbage"],
            "partition": [0, 1],
            "offset": [5, 6],
            "timestamp": [pd.Timestamp(0), pd.Timestamp(0)],
        }
    )
    [decoded] = list(decode_batches(iter([src])))
    assert list(decoded["kind"]) == ["snapshot", "dead_letter"]
    dead = decoded[decoded["kind"] == "dead_letter"]
    assert dead.iloc[0]["reason"] == "bad_magic" and dead.iloc[0]["raw_value"] == b"garbage"
    fn = make_reconciler(["a"], grace_ms=0)
    [row] = _out(fn((DEAD_LETTER_GROUP, 1), iter([dead]), FakeState()))
    assert row["kind"] == "dead_letter" and row["src_offset"] == 6


def test_up_settings_precedence_and_errors(tmp_path, monkeypatch):
    cfg = tmp_path / "up.toml"
    cfg.write_text('scenario = "game"\nrate = 10.0\nwindow_ms = 5000\n')
    monkeypatch.setenv("KAFKA_AUDIT_UP_RATE", "20")
    s = load_up_settings(cfg, window_ms=7000)
    assert (s.scenario, s.rate, s.window_ms, s.scenario_topic) == ("game", 20.0, 7000, "audit.game")
    (tmp_path / "bad.toml").write_text('scenario = "video"\n')
    with pytest.raises(ConfigError, match="scenario='video': allowed values are social, weblog, game"):
        load_up_settings(tmp_path / "bad.toml")
    with pytest.raises(ConfigError, match="does not exist"):
        load_up_settings(tmp_path / "missing.toml")
