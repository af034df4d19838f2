"""The live job's model lifecycle without Spark: calibration, retraining scheduler, serving model, state."""

import json
import sys
import time

import pytest

import spark_streaming.live_model as live_module
from predictor.registry import ModelRegistry
from predictor.settings import RetrainSettings
from spark_streaming.calibration import MIN_WINDOWS, CalibrationMonitor
from spark_streaming.live_model import LIVE_MODEL_STATE_FILE, LiveModel
from spark_streaming.metrics import ResultMetrics
from spark_streaming.predict import KpiConfig
from spark_streaming.retraining import LOCK_FILE, RetrainPolicy, RetrainProcess, retrain_command
from spark_streaming.settings import SparkJobSettings
from spark_streaming.window_state import OUTPUT_COLUMNS


def _final(i, version="shipped", p=0.10, actual=0.11, lo=0.05, hi=0.2, **kw):
    row = {c: None for c in OUTPUT_COLUMNS}
    row.update(
        kind="result",
        topic="t",
        tier="cluster:local",
        state="final",
        window_start_ms=i * 1_000,
        window_end_ms=(i + 1) * 1_000,
        model_version=version,
        p_loss=p,
        p_loss_lo=lo,
        p_loss_hi=hi,
        loss_rate=actual,
    )
    row.update(kw)
    return row


# ------------------------------------------------------------------------------------------ calibration
def test_calibrated_after_enough_accurate_windows_judged_before_each_row():
    mon = CalibrationMonitor(windows=30, max_mae=0.05)
    rows = [_final(i) for i in range(MIN_WINDOWS + 2)]
    assert mon.annotate(rows) == len(rows)
    flags = [r["model_calibrated"] for r in rows]
    # row i is judged on the i rows before it: calibrated from the 11th on
    assert flags == [False] * MIN_WINDOWS + [True, True]
    st = mon.stats("shipped")
    assert (st.windows, st.calibrated) == (MIN_WINDOWS + 2, True)
    assert st.mae == pytest.approx(0.01) and st.coverage == 1.0


def test_inaccurate_model_stays_calibrating_and_the_window_rolls():
    mon = CalibrationMonitor(windows=12, max_mae=0.05)
    bad = [_final(i, p=0.6, actual=0.0, lo=0.5, hi=0.7) for i in range(20)]
    mon.annotate(bad)
    assert not any(r["model_calibrated"] for r in bad)
    st = mon.stats("shipped")
    assert (st.windows, st.coverage) == (12, 0.0) and st.mae == pytest.approx(0.6)
    # 12 accurate windows push every bad one out of the rolling window
    good = [_final(100 + i) for i in range(13)]
    mon.annotate(good)
    assert good[-1]["model_calibrated"] and not good[0]["model_calibrated"]


def test_versions_are_judged_separately_and_a_new_one_starts_calibrating():
    mon = CalibrationMonitor(windows=30, max_mae=0.05)
    mon.annotate([_final(i) for i in range(15)])
    new = [_final(20, version="v0001"), _final(21)]
    mon.annotate(new)
    assert [r["model_calibrated"] for r in new] == [False, True]
    assert mon.versions() == ["v0001", "shipped"]


def test_only_final_predicted_rows_count_and_order_does_not_matter():
    rows = [_final(i) for i in range(15)]
    provisional = _final(99, state="provisional")
    unpredicted = _final(98, model_version=None, p_loss=None)
    no_p = _final(97, p_loss=None)  # predicted (out-of-range input): flagged, not added
    a, b = CalibrationMonitor(), CalibrationMonitor()
    a.annotate([*rows, provisional, unpredicted, no_p])
    b.annotate([dict(r) for r in reversed(rows)])
    assert provisional["model_calibrated"] is None and unpredicted["model_calibrated"] is None
    assert no_p["model_calibrated"] is True
    assert a.to_state() == b.to_state()


def test_state_round_trips_through_json():
    mon = CalibrationMonitor(windows=20, max_mae=0.05)
    mon.annotate([_final(i, lo=None, hi=None) for i in range(11)])
    again = CalibrationMonitor(20, 0.05, json.loads(json.dumps(mon.to_state())))
    assert again.stats("shipped") == mon.stats("shipped")
    assert again.stats("shipped").coverage is None  # no interval, no coverage


# ------------------------------------------------------------------------------------------ scheduler
def test_policy_every_n_windows_or_every_t_minutes_with_a_minimum():
    p = RetrainPolicy(every_windows=200, every_minutes=60, min_windows=50)
    hour = 3_600_000
    assert p.due(200, 0, 1)
    assert not p.due(199, 0, hour - 1)
    assert p.due(50, 0, hour) and not p.due(49, 0, 10 * hour)


def test_retrain_command_runs_the_cli_as_a_module(tmp_path):
    settings = RetrainSettings(min_windows=50)
    cmd = retrain_command(tmp_path / "r", tmp_path / "t", [tmp_path / "a.csv"], settings, tmp_path / "m")
    assert cmd[:5] == [sys.executable, "-m", "kafka_audit", "predictor", "retrain"]
    joined = " ".join(cmd)
    assert f"--registry {tmp_path / 'r'}" in joined and f"--from-results {tmp_path / 't'}" in joined
    assert f"--data {tmp_path / 'a.csv'}" in joined and "--min-windows 50" in joined
    assert f"--model {tmp_path / 'm'}" in joined and "--calibrated-mae" not in joined
    assert "--steps" not in joined  # not set: the child reads KAFKA_AUDIT_RETRAIN_STEPS or its default
    tight = retrain_command(
        tmp_path / "r", tmp_path / "t", [], RetrainSettings(min_windows=50, calibrated_mae=0.02)
    )
    assert tight[-4:] == ["--calibrated-mae", "0.02", "--min-windows", "50"]


def _wait_result(proc, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = proc.poll()
        if result is not None:
            return result
        time.sleep(0.05)
    raise AssertionError("the child did not end")


def test_one_process_at_a_time_and_how_it_ended(tmp_path):
    proc = RetrainProcess(tmp_path)
    assert proc.start([sys.executable, "-c", "import time; time.sleep(30)"])
    assert proc.running and proc.pid
    assert not proc.start([sys.executable, "-c", "pass"])  # one at a time
    # another driver (a restarted job) sees the lock the child holds
    assert not RetrainProcess(tmp_path).start([sys.executable, "-c", "pass"])
    assert proc.stop(5) == "killed" and not proc.running
    assert proc.start([sys.executable, "-c", "pass"])
    assert _wait_result(proc) == "completed"
    assert proc.start([sys.executable, "-c", "raise SystemExit(3)"])
    assert _wait_result(proc) == "failed"
    assert proc.start([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert _wait_result(proc) == "killed"
    assert (tmp_path / LOCK_FILE).exists() and "raise SystemExit(3)" in (tmp_path / "retrain.log").read_text()
    assert proc.poll() is None and proc.stop() is None  # nothing running


# ------------------------------------------------------------------------------------------ live model
def _fake_version(registry: ModelRegistry, version: str) -> None:
    d = registry.root / version
    d.mkdir(parents=True)
    (d / "card.json").write_text(json.dumps({"version": version}))
    (d / "model.pt").write_bytes(b"")


def _settings(tmp_path, **kw):
    return SparkJobSettings(checkpoint_dir=tmp_path / "checkpoint", **kw)


def _live(s, listeners=None, bad=()):
    def check(model_dir):
        if any(model_dir.endswith(b) for b in bad):
            raise RuntimeError("weights corrupt")

    live = LiveModel(s, ResultMetrics(), listeners, check_model=check)
    live.open()
    return live


def _sample(live, name, **labels):
    return live.metrics.registry.get_sample_value(name, labels)


def test_the_champion_serves_from_the_next_batch_and_a_rerun_keeps_its_model(tmp_path):
    s = _settings(tmp_path, retrain=False)
    live = _live(s)
    base = KpiConfig()
    c0 = live.begin_batch(0, base)
    assert (c0.model_dir, c0.model_version) == (None, "shipped")
    live.end_batch(0)
    _fake_version(live.registry, "v0001")
    live.registry.promote("v0001")
    c1 = live.begin_batch(1, base)
    assert (c1.model_version, c1.model_dir) == ("v0001", str(s.model_registry_dir / "v0001"))
    assert _sample(live, "kafka_audit_model_champion_info", model_version="v0001") == 1
    assert _sample(live, "kafka_audit_model_champion_info", model_version="shipped") is None
    # the driver dies before batch 1 ends; meanwhile v0002 is promoted: the re-run still uses v0001
    _fake_version(live.registry, "v0002")
    live.registry.promote("v0002")
    again = _live(s)
    assert again.begin_batch(1, base).model_version == "v0001"
    again.end_batch(1)
    assert again.begin_batch(2, base).model_version == "v0002"


def test_a_champion_that_does_not_load_is_not_served(tmp_path):
    live = _live(_settings(tmp_path, retrain=False), bad=("v0001",))
    _fake_version(live.registry, "v0001")
    live.registry.promote("v0001")
    assert live.begin_batch(0, KpiConfig()).model_version == "shipped"


def test_calibration_state_survives_a_restart_and_a_rerun_gives_the_same_flags(tmp_path):
    s = _settings(tmp_path, retrain=False, calibration_windows=30)
    live = _live(s)
    for b in range(3):
        live.begin_batch(b, KpiConfig())
        rows = [_final(b * 10 + i) for i in range(5)]
        live.annotate(rows)
        live.end_batch(b)
    assert _sample(live, "kafka_audit_model_calibrated", model_version="shipped") == 1
    assert _sample(live, "kafka_audit_model_live_mae", model_version="shipped") == pytest.approx(0.01)
    assert _sample(live, "kafka_audit_model_live_coverage", model_version="shipped") == 1
    # batch 3 runs, the driver dies after writing; the re-run must flag the rows the same way
    live.begin_batch(3, KpiConfig())
    first = [_final(30 + i, p=0.9) for i in range(12)]
    live.annotate(first)
    again = _live(s)
    again.begin_batch(3, KpiConfig())
    rerun = [_final(30 + i, p=0.9) for i in range(12)]
    again.annotate(rerun)
    assert [r["model_calibrated"] for r in rerun] == [r["model_calibrated"] for r in first]
    assert rerun[0]["model_calibrated"] and not rerun[-1]["model_calibrated"]
    saved = json.loads((s.checkpoint_dir / LIVE_MODEL_STATE_FILE).read_text())
    assert saved["batch"]["id"] == 3 and saved["format"] == 1


def test_final_windows_go_to_the_training_store_and_skips_are_counted(tmp_path):
    from predictor.training_store import TrainingStore

    s = _settings(tmp_path, retrain=False, training_min_messages=100)
    live = _live(s)
    good = dict(
        acks="1",
        batch_num_messages=10,
        message_timeout_ms=1000,
        packet_loss_pct_est=1.0,
        delay_ms_est=2.0,
        message_size_bytes=100.0,
        sent=1000,
        unaudited_producers=0,
        producer_configs=1,
        duplicate_rate=0.0,
    )
    rows = [
        _final(1, **good),
        _final(2, **{**good, "sent": 10}),
        _final(3, **{**good, "packet_loss_pct_est": None}),
        _final(4, **{**good, "producer_configs": 2}),
        _final(5, **{**good, "state": "provisional"}),
    ]
    live.begin_batch(7, KpiConfig())
    assert live.store(7, rows, KpiConfig()) == 1
    live.end_batch(7)
    stored = TrainingStore(s.training_dir).load()
    assert len(stored) == 1 and stored["window_start_ms"].iloc[0] == 1_000
    assert stored["model_version"].iloc[0] == "shipped" and stored["pred_p_loss"].iloc[0] == 0.10
    counts = {
        o: _sample(live, "kafka_audit_training_windows_total", outcome=o)
        for o in ("stored", "too_few_messages", "unknown_loss", "mixed_config")
    }
    assert counts == {"stored": 1, "too_few_messages": 1, "unknown_loss": 1, "mixed_config": 1}
    # a re-run of the batch rewrites its own file and counts nothing again
    again = _live(s)
    again.begin_batch(7, KpiConfig())
    again.store(7, rows, KpiConfig())
    assert len(TrainingStore(s.training_dir).load()) == 1
    assert _sample(again, "kafka_audit_training_windows_total", outcome="stored") == 0


def test_decisions_reach_the_listeners_once_even_across_a_restart(tmp_path):
    s = _settings(tmp_path, retrain=False)
    registry = ModelRegistry(s.model_registry_dir)
    registry.record({"challenger_version": "v0000", "promoted": False, "reasons": ["old"]})
    got = []
    live = _live(s, [got.append])
    live.begin_batch(0, KpiConfig())
    live.end_batch(0)
    assert got == []  # history from before this job's first start is not re-announced
    registry.record({"challenger_version": "v0001", "promoted": True, "reasons": ["all criteria met"]})
    registry.record({"challenger_version": "v0002", "promoted": False, "reasons": ["(a)"]})
    live.begin_batch(1, KpiConfig())
    live.end_batch(1)
    assert [d["challenger_version"] for d in got] == ["v0001", "v0002"]
    assert _sample(live, "kafka_audit_model_decisions_total", outcome="promoted") == 1
    assert _sample(live, "kafka_audit_model_decisions_total", outcome="rejected") == 1
    assert _sample(live, "kafka_audit_retrain_runs_total", result="failed") == 0  # exported from the start
    live.close()
    again = _live(s, [got.append])
    again.begin_batch(2, KpiConfig())
    again.end_batch(2)
    assert len(got) == 2


def test_retraining_starts_when_due_and_is_killed_on_close(tmp_path, monkeypatch):
    s = _settings(tmp_path, retrain_every_windows=2, training_min_messages=1)
    monkeypatch.setattr(
        live_module, "retrain_command", lambda *a, **kw: [sys.executable, "-c", "import time; time.sleep(60)"]
    )
    live = _live(s)
    live._state["retrain"]["new_windows"] = 1
    live.begin_batch(0, KpiConfig())
    live.end_batch(0)
    assert not live.process.running  # 1 < 2 new windows
    live._state["retrain"]["new_windows"] = 2
    live.begin_batch(1, KpiConfig())
    live.end_batch(1)
    assert live.process.running and live._state["retrain"]["new_windows"] == 0
    live.close()
    assert not live.process.running
    assert _sample(live, "kafka_audit_retrain_runs_total", result="killed") == 1


def test_no_retraining_without_predictions(tmp_path):
    live = _live(_settings(tmp_path, predict=False, retrain_every_windows=1))
    live._state["retrain"]["new_windows"] = 5
    live.begin_batch(0, KpiConfig())
    live.end_batch(0)
    assert not live.retraining and not live.process.running


def test_settings_put_the_store_and_the_registry_beside_the_checkpoint(tmp_path):
    s = _settings(tmp_path)
    assert (s.training_dir, s.model_registry_dir) == (tmp_path / "training", tmp_path / "models")
    assert (s.retrain, s.retrain_every_windows, s.retrain_every_minutes, s.retrain_min_windows) == (
        True,
        200,
        60.0,
        50,
    )
    assert (s.training_min_messages, s.calibration_windows, s.calibration_max_mae) == (500, 30, 0.05)
    assert _settings(tmp_path, training_dir=tmp_path / "x").training_dir == tmp_path / "x"


def test_up_and_the_testbed_pass_the_lifecycle_settings_to_the_job(tmp_path):
    from testbed.run import ModelLifecycle

    from kafka_audit.up_settings import load_up_settings

    up = load_up_settings(None, retrain=False, retrain_every_windows=5, data_dir=tmp_path)
    assert up.model_lifecycle == {"retrain": False, "retrain_every_windows": 5}
    assert load_up_settings(None).model_lifecycle == {}  # the job's own settings (env, defaults)
    s = _settings(
        tmp_path, **ModelLifecycle(tmp_path / "m", tmp_path / "t", retrain_min_windows=3).job_settings()
    )
    assert (s.model_registry_dir, s.training_dir, s.retrain, s.retrain_min_windows) == (
        tmp_path / "m",
        tmp_path / "t",
        True,
        3,
    )


def test_workers_cache_models_by_directory_and_weights(tmp_path, monkeypatch):
    import os

    import spark_streaming.predict as predict_module
    from predictor.model import Predictor

    loads = []
    monkeypatch.setattr(Predictor, "load", classmethod(lambda cls, path: loads.append(path) or object()))
    monkeypatch.setattr(predict_module, "_MODELS", {})
    dirs = []
    for i in range(4):
        d = tmp_path / f"v000{i + 1}"
        d.mkdir()
        (d / "model.pt").write_bytes(b"")
        dirs.append(str(d))
    first = predict_module.load_model(dirs[0])
    assert predict_module.load_model(dirs[0]) is first and len(loads) == 1
    os.utime(tmp_path / "v0001" / "model.pt", ns=(1, 1))  # the weights were replaced: load again
    assert predict_module.load_model(dirs[0]) is not first and len(loads) == 2
    for d in dirs[1:]:
        predict_module.load_model(d)
    assert len(predict_module._MODELS) == predict_module.MODELS_CACHED  # the oldest one went


def test_a_fresh_checkpoint_counts_the_stored_windows_no_challenger_saw(tmp_path):
    s = _settings(tmp_path, retrain=False, training_min_messages=100)
    first = _live(s)
    good = dict(acks="1", batch_num_messages=10, message_timeout_ms=1000, packet_loss_pct_est=1.0)
    good |= dict(delay_ms_est=2.0, message_size_bytes=100.0, sent=1000, unaudited_producers=0)
    rows = [_final(i, **good, producer_configs=1, duplicate_rate=0.0) for i in range(7)]
    first.begin_batch(0, KpiConfig())
    first.store(0, rows, KpiConfig())
    first.end_batch(0)
    # another run: a new checkpoint, the same store and registry
    s2 = s.model_copy(update={"checkpoint_dir": tmp_path / "checkpoint2", "training_dir": s.training_dir})
    assert _live(s2)._state["retrain"]["new_windows"] == 7
    _fake_version(ModelRegistry(s.model_registry_dir), "v0001")
    card = ModelRegistry(s.model_registry_dir).version_dir("v0001") / "card.json"
    split = {"n_train": 3, "n_calibration": 1, "n_test": 1}
    card.write_text(json.dumps({"version": "v0001", "local_split": split}))
    s3 = s2.model_copy(update={"checkpoint_dir": tmp_path / "checkpoint3"})
    assert _live(s3)._state["retrain"]["new_windows"] == 2


def test_jobs_with_different_checkpoints_share_the_training_store(tmp_path):
    from predictor.training_store import TrainingStore

    good = dict(acks="1", batch_num_messages=10, message_timeout_ms=1000, packet_loss_pct_est=1.0)
    good |= dict(delay_ms_est=2.0, message_size_bytes=100.0, sent=1000, unaudited_producers=0)
    s = _settings(tmp_path, retrain=False, training_min_messages=100)
    for run, checkpoint in enumerate(("a", "b")):  # each job's batch ids start at 0
        live = _live(s.model_copy(update={"checkpoint_dir": tmp_path / checkpoint}))
        live.begin_batch(0, KpiConfig())
        rows = [_final(10 * run + i, **good, producer_configs=1, duplicate_rate=0.0) for i in range(3)]
        live.store(0, rows, KpiConfig())
        live.end_batch(0)
    assert len(TrainingStore(s.training_dir).load()) == 6


def test_versions_the_monitor_forgets_leave_no_stale_series(tmp_path):
    from spark_streaming.calibration import MAX_VERSIONS

    live = _live(_settings(tmp_path, retrain=False, calibration_windows=30))
    versions = [f"v{i:04d}" for i in range(MAX_VERSIONS + 2)]
    for b, version in enumerate(versions):
        live.begin_batch(b, KpiConfig())
        live.annotate([_final(b * 10 + i, version=version) for i in range(3)])
        live.end_batch(b)
    kept = set(live.monitor.versions())
    assert len(kept) == MAX_VERSIONS and versions[0] not in kept
    names = ("kafka_audit_model_calibrated", "kafka_audit_model_live_mae", "kafka_audit_model_live_coverage")
    for name in names:
        assert _sample(live, name, model_version=versions[0]) is None
        assert _sample(live, name, model_version=versions[-1]) is not None
