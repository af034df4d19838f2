import json

import pandas as pd
import pytest

from audit_record import AuditRecord
from kafka_audit.up_settings import load_up_settings
from kafka_plumbing.errors import ConfigError
from spark_streaming.decode import DEAD_LETTER_GROUP, decode_batches
from spark_streaming.reconcile import compact
from spark_streaming.state import make_reconciler


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


def _rows(*records):
    return pd.DataFrame(
        [
            {"snap_key": r.key(), "payload": json.dumps(compact(r, 0, i)), "g_window_end": 10_000}
            for i, r in enumerate(records)
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
