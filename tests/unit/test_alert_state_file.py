"""The alert pipeline's state survives a restart: firing alerts, judged windows, undelivered events."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from alerts import AlertEvent, AlertPipeline, AlertSettings, AlertState
from alerts.exceptions import AlertSinkError
from alerts.state_file import AlertStateFile

T0 = 1_800_000_000_000
W = 10_000
GAMMA = "KafkaAuditGammaBelowTarget"


class Recorder:
    """A sink that keeps what it is sent; fails (keeping nothing) while ``down``."""

    def __init__(self, name: str = "rec", down: bool = False) -> None:
        self.name = name
        self.down = down
        self.events: list[AlertEvent] = []

    def send(self, events: Sequence[AlertEvent], now_ms: int) -> None:
        if self.down and events:
            raise AlertSinkError(self.name, "down", failed=events)
        self.events.extend(events)

    def close(self) -> None:
        pass


def window(i: int, gamma: float) -> dict[str, Any]:
    return {
        "topic": "t",
        "tier": "cluster:a",
        "state": "final",
        "window_start_ms": T0 + i * W,
        "window_end_ms": T0 + (i + 1) * W,
        "gamma_actual": gamma,
        "gamma_target": 0.9,
        "completeness": 1.0,
    }


def pipeline(path, sink: Recorder) -> AlertPipeline:
    settings = AlertSettings(gamma_for_windows=2, gamma_keep_firing_windows=2)
    return AlertPipeline(settings, sinks=[sink], state_path=path)


def test_a_restarted_pipeline_keeps_firing_does_not_judge_twice_and_resolves_once(tmp_path):
    path = tmp_path / "checkpoint" / "alerts-state.json"
    first = Recorder()
    before = pipeline(path, first)
    before.process([window(0, 0.5)], T0 + W)
    before.process([window(1, 0.5)], T0 + 2 * W)
    [fired] = first.events
    assert fired.alertname == GAMMA and fired.firing and path.exists()

    second = Recorder()
    after = pipeline(path, second)  # a new driver process
    assert [e.event_id for e in after.engine.firing()] == [fired.event_id]
    labels = {"alertname": GAMMA, "topic": "t", "severity": "warning"}
    assert after.metrics.registry.get_sample_value("kafka_audit_alerts_firing", labels) == 1
    # Spark replays the last micro-batch: nothing new; the firing alert is re-sent once, unchanged
    assert after.process([window(0, 0.5), window(1, 0.5)], T0 + 3 * W) == []
    assert [e.event_id for e in second.events] == [fired.event_id]
    assert after.process([], T0 + 3 * W) == [] and len(second.events) == 1
    # one good window does not resolve (keep firing 2), the second does, with the episode's start
    assert after.process([window(2, 0.95)], T0 + 4 * W) == []
    [resolved] = after.process([window(3, 0.95)], T0 + 5 * W)
    assert not resolved.firing and resolved.starts_at_ms == fired.starts_at_ms
    assert after.engine.states()[(GAMMA, "t", "cluster:a")] is AlertState.RESOLVED


def test_a_pending_alert_fires_after_a_restart_on_its_next_bad_window(tmp_path):
    path = tmp_path / "alerts-state.json"
    before = pipeline(path, Recorder())
    assert before.process([window(0, 0.5)], T0 + W) == []  # 1 of 2 bad windows
    after = pipeline(path, Recorder())
    [fired] = after.process([window(1, 0.5)], T0 + 2 * W)
    assert fired.firing and fired.window_start_ms == T0 + W


def test_undelivered_events_are_delivered_by_the_next_process(tmp_path):
    path = tmp_path / "alerts-state.json"
    broken = Recorder(down=True)
    before = pipeline(path, broken)
    before.process([window(0, 0.5), window(1, 0.5)], T0 + 2 * W)
    assert broken.events == [] and before.dispatcher.pending() == {"rec": 1}

    working = Recorder()
    after = pipeline(path, working)
    assert after.dispatcher.pending() == {"rec": 1}
    after.process([], T0 + 3 * W)
    assert [e.firing for e in working.events] == [True]  # the queued event and its re-send are one event
    assert after.dispatcher.pending() == {"rec": 0}
    saved = json.loads(path.read_text())
    assert saved["format"] == 1 and saved["pending"] == {"rec": []}


def test_an_unreadable_state_file_is_set_aside_and_alerting_starts_afresh(tmp_path, caplog):
    path = tmp_path / "alerts-state.json"
    path.write_text('{"format": 1, "engine": {"machines": [["oops"]]')  # cut short
    sink = Recorder()
    fresh = pipeline(path, sink)
    assert fresh.engine.firing() == [] and fresh.engine.states() == {}
    [aside] = list(tmp_path.glob("alerts-state.json.corrupt-*"))
    assert aside.read_text().startswith('{"format": 1')  # kept for inspection, not deleted
    assert "unusable" in caplog.text
    fresh.process([window(0, 0.5), window(1, 0.5)], T0 + 2 * W)
    assert [e.alertname for e in sink.events] == [GAMMA] and path.exists()

    # valid JSON, wrong content: a firing event without a firing state machine
    engine = json.loads(path.read_text())["engine"]
    engine["machines"] = []
    path.write_text(json.dumps({"format": 1, "saved_at_ms": 0, "engine": engine, "pending": {}}))
    assert pipeline(path, Recorder()).engine.firing() == []
    assert len(list(tmp_path.glob("alerts-state.json.corrupt-*"))) == 2


def test_the_state_file_round_trips_and_has_no_temporary_file_left(tmp_path):
    path = tmp_path / "s.json"
    event = pipeline(None, Recorder())
    event.process([window(0, 0.5), window(1, 0.5)], T0 + 2 * W)
    f = AlertStateFile(path)
    assert f.load() is None
    f.save(event.engine.to_state(), {"rec": event.engine.firing()})
    saved = f.load()
    assert saved is not None and saved.engine == json.loads(json.dumps(event.engine.to_state()))
    assert saved.pending == {"rec": event.engine.firing()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


def test_a_state_that_cannot_be_saved_is_logged_and_alerting_goes_on(tmp_path, caplog):
    where = tmp_path / "checkpoint"
    sink = Recorder()
    p = pipeline(where / "alerts-state.json", sink)
    where.write_text("")  # a file where the directory should be: it cannot be created
    p.process([window(0, 0.5), window(1, 0.5)], T0 + 2 * W)
    assert [e.alertname for e in sink.events] == [GAMMA]
    assert "alert state not saved" in caplog.text
