"""The live comparison without Spark: feature building, gamma and suggestion columns, metrics, live table."""

import math

import pandas as pd
import pytest
from rich.console import Console

import spark_streaming.predict as predict_module
from audit_record.window_result import LIVE_COMPARISON_FIELDS, suggested_changes
from kafka_audit.results_table import results_table, serving_model, short_suggestion
from kafka_audit.up_settings import load_up_settings
from kafka_plumbing.errors import ConfigError
from predictor.features import FEATURES
from predictor.kpi import Weights, gamma
from predictor.model import default_predictor
from predictor.suggest import suggest
from spark_streaming.metrics import ResultMetrics
from spark_streaming.predict import (
    KpiConfig,
    add_predictions,
    feature_frame,
    make_predict_step,
    predict_rows,
)
from spark_streaming.settings import SparkJobSettings
from spark_streaming.window_state import OUTPUT_COLUMNS

TOPIC = "audit.weblog"


def _row(**kw):
    row = {c: None for c in OUTPUT_COLUMNS}
    row.update(
        kind="result",
        topic=TOPIC,
        window_start_ms=0,
        window_end_ms=10_000,
        tier="cluster:local",
        state="final",
        sent=5_000,
        unique=4_250,
        duplicated=0,
        producers=1,
        loss_rate=0.15,
        duplicate_rate=0.0,
        acks="1",
        batch_num_messages=1,
        message_timeout_ms=500,
        poll_interval_ms=None,
        rtt_avg_ms=2.0,
        delay_ms_est=1.0,
        packet_loss_pct_est=15.0,
        message_size_bytes=200.0,
    )
    row.update(kw)
    return row


CONFIG = KpiConfig(topics={TOPIC: ("weblog", None, None)}, gamma_target=0.9)


@pytest.fixture(scope="module")
def model():
    return default_predictor()


def test_feature_frame_maps_window_columns_to_the_predictor_inputs():
    rows = pd.DataFrame(
        [
            _row(acks="all", poll_interval_ms=2.0),
            _row(acks="-1", packet_loss_pct_est=None, delay_ms_est=None, message_size_bytes=None),
            _row(acks="0"),
            _row(acks="2"),
        ]
    )
    f = feature_frame(rows, pd.Series([1.0, 321.0, 1.0, 1.0]))
    assert list(f.columns) == list(FEATURES)
    assert list(f["acks"].iloc[:3]) == [1.0, 1.0, 0.0] and math.isnan(f["acks"].iloc[3])
    assert f.iloc[0][["packet_loss_pct", "delay_ms", "message_size_bytes", "poll_interval_ms"]].tolist() == [
        15.0,
        1.0,
        200.0,
        2.0,
    ]
    # unknown L, D -> 0; no measured M -> the topic's setting; unknown polling interval -> 0 (full load)
    assert f.iloc[1][["packet_loss_pct", "delay_ms", "message_size_bytes", "poll_interval_ms"]].tolist() == [
        0.0,
        0.0,
        321.0,
        0.0,
    ]
    assert f.iloc[0][["batch_num_messages", "message_timeout_ms"]].tolist() == [1.0, 500.0]


def test_final_windows_get_predictions_gammas_and_a_suggestion_below_target(model):
    rows = pd.DataFrame(
        [
            _row(),  # 15% measured loss, batch 1, timeout 500 ms at L=15%: well below target
            _row(state="provisional"),
            _row(loss_rate=0.0, unique=5_000, packet_loss_pct_est=0.0, batch_num_messages=10_000),
            {**{c: None for c in OUTPUT_COLUMNS}, "kind": "producer", "topic": TOPIC, "producer_id": "p"},
        ]
    )
    out = add_predictions(rows, CONFIG, lambda: model)
    bad, prov, good, producer = (out.iloc[i] for i in range(4))
    features = feature_frame(rows.iloc[[0]], 1000.0)
    expected = model.predict(features).iloc[0]
    for col in ("p_loss", "p_loss_lo", "p_loss_hi", "p_dup", "p_dup_lo", "p_dup_hi"):
        assert bad[col] == pytest.approx(expected[col])
    assert bad["p_loss_lo"] <= bad["p_loss"] <= bad["p_loss_hi"]
    # Eq. 2 with weblog weights; lambda = 5000 / 10 s; R_l = 15% >= SATURATION_LOSS, so the window measured
    # the producer's throughput T = 5000 * 0.85 / 10 s = 425 messages/s, and mu = 425 / 500 = 1 - R_l
    # whatever the model thinks of the configuration's throughput
    w = Weights.preset("weblog")
    assert expected["throughput_msgs_per_s"] > 500.0  # the model's T would have said the producer kept up
    mu = 0.85
    assert bad["gamma_actual"] == pytest.approx(gamma(mu * 0.85, mu, 0.15, 0.0, w))
    assert bad["gamma_predicted"] == pytest.approx(
        gamma(mu * (1 - expected["p_loss"]), mu, expected["p_loss"], expected["p_dup"], w)
    )
    assert bad["gamma_target"] == 0.9 and bad["gamma_actual"] < 0.9
    direct = suggest(
        {
            "acks": "1",
            "batch.num.messages": 1,
            "message.timeout.ms": 500,
            "poll_interval_ms": 0.0,
            "producers": 1,
        },
        {
            "packet_loss_pct": 15.0,
            "delay_ms": 1.0,
            "message_size_bytes": 200.0,
            "arrival_rate_msgs_per_s": 500.0,
            "measured_throughput_msgs_per_s": 425.0,
        },
        0.9,
        w,
        model,
    )
    assert bad["suggestion"] == direct.explanation and "->" in bad["suggestion"]
    assert bad["suggested_gamma"] == pytest.approx(direct.predicted_after.gamma)
    assert bad["predict_error"] is None
    assert all(pd.isna(prov[c]) for c in LIVE_COMPARISON_FIELDS)
    assert good["gamma_actual"] >= 0.9 and good["suggestion"] is None and good["p_loss"] < 0.01
    assert producer["producer_id"] == "p" and pd.isna(producer["p_loss"])


def test_a_window_that_lost_nothing_kept_up_whatever_the_predicted_throughput(model):
    # 2,000,000 messages in 10 s is far beyond what the model gives one producer at L = 15%, but every
    # one arrived: the producers served the stream (mu = 1), so gamma_actual is 1 - w4 * R_d = 1.
    rows = pd.DataFrame([_row(sent=2_000_000, unique=2_000_000, loss_rate=0.0)])
    out = add_predictions(rows, CONFIG, lambda: model).iloc[0]
    assert model.predict(feature_frame(rows, 1000.0)).iloc[0]["throughput_msgs_per_s"] < 200_000
    assert out["gamma_actual"] == pytest.approx(1.0)
    # mu is the same in gamma_predicted: only the predicted P_l, P_d can pull it below 1
    w = Weights.preset("weblog")
    assert out["gamma_predicted"] == pytest.approx(
        gamma(1.0 - out["p_loss"], 1.0, out["p_loss"], out["p_dup"], w)
    )


def test_topic_targets_and_stream_types_come_from_the_settings(model):
    s = SparkJobSettings(
        stream_type="game",
        message_size_bytes=512,
        topic_kpi={"orders": {"stream_type": "social", "gamma_target": 0.5}},
    )
    cfg = KpiConfig.from_settings(s, 0.95)
    assert cfg.for_topic("orders") == ("social", 0.5, 512)
    assert cfg.for_topic("other") == ("game", 0.95, 512)
    out = add_predictions(pd.DataFrame([_row(topic="orders"), _row(topic="other")]), cfg, lambda: model)
    assert out["gamma_target"].tolist() == [0.5, 0.95]
    assert out["suggestion"].iloc[0] is None  # gamma above the lenient target: no suggestion
    with pytest.raises(ValueError, match="stream_type"):
        SparkJobSettings(topic_kpi={"orders": {"stream_type": "video"}})


class Broken:
    def predict(self, frame, invalid="raise"):
        raise RuntimeError("weights corrupt")


def test_failures_leave_predictions_null_never_raise_and_are_counted(model):
    rows = pd.DataFrame([_row(), _row(state="provisional")])

    def no_model():
        raise ConfigError("--model /nope: not a model directory")

    for load, stage in ((no_model, "model"), (lambda: Broken(), "predict")):
        out = add_predictions(rows, CONFIG, load)
        assert out["predict_error"].iloc[0].startswith(f"{stage}: ")
        assert pd.isna(out["p_loss"].iloc[0]) and out["suggestion"].iloc[0] is None
        # gamma_actual still judged (mu = 1 without a throughput prediction), so the gamma alert works
        assert out["gamma_actual"].iloc[0] == pytest.approx(
            gamma(0.85, 1.0, 0.15, 0.0, Weights.preset("weblog"))
        )
        assert out["predict_error"].iloc[1] is None
    out = add_predictions(
        pd.DataFrame([_row(batch_num_messages=0), _row(acks="2"), _row()]), CONFIG, lambda: model
    )
    assert out["predict_error"].tolist()[:2] == [
        "input: a feature is out of the model's range",
        "input: acks is not one of 0, 1, all, -1",
    ]
    assert out["predict_error"].iloc[2] is None and not pd.isna(out["p_loss"].iloc[2])
    assert out["predict_stage"].tolist() == ["input", "input", None]


def test_predict_step_passes_other_batches_through_and_keeps_the_column_order(model, monkeypatch):
    loads = []
    monkeypatch.setattr(predict_module, "load_model", lambda d: loads.append(d) or model)
    step = make_predict_step(CONFIG, OUTPUT_COLUMNS)
    provisional = pd.DataFrame([_row(state="provisional")], columns=OUTPUT_COLUMNS)
    [same] = list(step(iter([provisional])))
    assert same is provisional
    [done] = list(step(iter([pd.DataFrame([_row()], columns=OUTPUT_COLUMNS)])))
    assert list(done.columns) == OUTPUT_COLUMNS and done["p_loss"].notna().all()
    assert loads == [None]  # the model is asked for only when a batch holds a final window


def test_the_driver_predicts_the_final_rows_as_the_spark_step_would_with_python_values(model, monkeypatch):
    loads = []
    monkeypatch.setattr(predict_module, "load_model", lambda d: loads.append(d) or model)
    rows = [
        _row(),  # below target: predictions, gammas and a suggestion
        _row(state="provisional"),
        {**{c: None for c in OUTPUT_COLUMNS}, "kind": "producer", "topic": TOPIC, "producer_id": "p"},
        _row(acks="2", window_start_ms=10_000, window_end_ms=20_000),  # bad input: an error, no numbers
    ]
    before = [dict(r) for r in rows]
    assert predict_rows(rows, CONFIG, OUTPUT_COLUMNS) == 2
    assert loads == [None]
    assert rows[1:3] == before[1:3]  # not predictable: untouched
    [expected] = list(make_predict_step(CONFIG, OUTPUT_COLUMNS)(iter([pd.DataFrame([before[0]])])))
    bad = rows[0]
    for col in ("p_loss", "p_loss_hi", "p_dup", "gamma_actual", "gamma_predicted", "gamma_target"):
        assert type(bad[col]) is float and bad[col] == pytest.approx(expected[col].iloc[0]), col
    assert type(bad["suggested_batch_num_messages"]) is int  # a Spark int column, as after Arrow
    assert bad["suggested_batch_num_messages"] == int(expected["suggested_batch_num_messages"].iloc[0])
    assert type(bad["suggestion_meets_target"]) is bool
    assert bad["suggestion"] == expected["suggestion"].iloc[0]
    assert bad["model_version"] == "shipped" and bad["predict_error"] is None
    assert rows[3]["predict_stage"] == "input" and rows[3]["p_loss"] is None  # null, not NaN
    loads.clear()
    assert predict_rows([_row(state="provisional")], CONFIG, OUTPUT_COLUMNS) == 0 and loads == []


def test_a_predicted_value_its_column_cannot_hold_nulls_that_row_only(model, monkeypatch):
    monkeypatch.setattr(predict_module, "load_model", lambda d: model)
    real = predict_module.add_predictions

    def broken(frame, config, load, *states):
        out = real(frame, config, load, *states)
        out["suggested_batch_num_messages"] = out["suggested_batch_num_messages"].astype("object")
        out.loc[0, "suggested_batch_num_messages"] = "many"  # not an int
        return out

    monkeypatch.setattr(predict_module, "add_predictions", broken)
    rows = [_row(), _row(window_start_ms=10_000, window_end_ms=20_000)]
    assert predict_rows(rows, CONFIG, OUTPUT_COLUMNS) == 2
    assert rows[0]["predict_stage"] == "predict" and "ValueError" in rows[0]["predict_error"]
    assert rows[0]["p_loss"] is None and rows[0]["gamma_actual"] is None
    assert rows[1]["predict_error"] is None and type(rows[1]["p_loss"]) is float


def _final(**kw):
    base = _row(
        p_loss=0.2,
        p_loss_lo=0.1,
        p_loss_hi=0.3,
        p_dup=0.01,
        p_dup_lo=0.0,
        p_dup_hi=0.02,
        gamma_actual=0.8,
        gamma_predicted=0.7,
        gamma_target=0.9,
        suggestion="raise batch.num.messages 1 -> 4: predicted P_l 0.63 -> 0.04, gamma 0.71 -> 0.93",
        suggested_batch_num_messages=4,
        suggested_gamma=0.93,
        completeness=0.85,
        unaudited_producers=2,
    )
    base.update(kw)
    return base


def test_metrics_follow_the_newest_final_window():
    m = ResultMetrics()
    reg = m.registry
    lab = {"topic": TOPIC, "tier": "cluster:local"}
    m.observe([_final(window_start_ms=10_000), _final(window_start_ms=0, gamma_actual=0.1)], [], [])
    assert reg.get_sample_value("kafka_audit_gamma", {**lab, "kind": "actual"}) == 0.8
    assert reg.get_sample_value("kafka_audit_gamma", {**lab, "kind": "predicted"}) == 0.7
    assert reg.get_sample_value("kafka_audit_gamma_target", lab) == 0.9
    assert reg.get_sample_value("kafka_audit_unaudited_producers", lab) == 2
    for bound, value in (("p05", 0.1), ("p50", 0.2), ("p95", 0.3)):
        assert reg.get_sample_value("kafka_audit_predicted_loss_ratio", {**lab, "bound": bound}) == value
    assert reg.get_sample_value("kafka_audit_predicted_duplicate_ratio", {**lab, "bound": "p95"}) == 0.02
    text = _final()["suggestion"]
    assert reg.get_sample_value("kafka_audit_suggestion_info", {**lab, "suggestion": text}) == 0.93
    # A newer window without prediction or suggestion removes them (no stale numbers on the dashboard).
    newer = _final(
        window_start_ms=20_000,
        p_loss=None,
        suggestion=None,
        predict_stage="model",
        predict_error="model: gone",
    )
    m.observe([newer], [], [])
    assert reg.get_sample_value("kafka_audit_predicted_loss_ratio", {**lab, "bound": "p50"}) is None
    assert reg.get_sample_value("kafka_audit_suggestion_info", {**lab, "suggestion": text}) is None
    assert (
        reg.get_sample_value("kafka_audit_prediction_failures_total", {"topic": TOPIC, "stage": "model"}) == 1
    )


def test_producer_metrics_follow_the_newest_snapshot_and_expire():
    m = ResultMetrics(producer_ttl_s=60)
    reg = m.registry
    snap = dict(
        kind="producer",
        producer_id="p1",
        topic=TOPIC,
        acks="1",
        batch_num_messages=1,
        message_timeout_ms=500,
        linger_ms=5.0,
        enable_idempotence=False,
        rtt_avg_ms=12.0,
        tx_retries=3,
        result_at_ms=1,
    )
    m.observe_producers([snap], now_s=1_000)
    info = {
        "producer_id": "p1",
        "producer": "p1",  # no producer_identity: the id is its name (a v1 stamp)
        "topic": TOPIC,
        "acks": "1",
        "batch_num_messages": "1",
        "message_timeout_ms": "500",
        "linger_ms": "5",
        "enable_idempotence": "false",
        "poll_interval_ms": "",  # unknown
    }
    assert reg.get_sample_value("kafka_audit_producer_info", info) == 1
    assert (
        reg.get_sample_value(
            "kafka_audit_producer_rtt_seconds", {"producer_id": "p1", "producer": "p1", "topic": TOPIC}
        )
        == 0.012
    )
    m.observe_producers([{**snap, "batch_num_messages": 4, "tx_retries": 7, "result_at_ms": 2}], now_s=1_010)
    assert reg.get_sample_value("kafka_audit_producer_info", info) is None  # the old configuration is gone
    assert reg.get_sample_value("kafka_audit_producer_info", {**info, "batch_num_messages": "4"}) == 1
    assert (
        reg.get_sample_value(
            "kafka_audit_producer_tx_retries", {"producer_id": "p1", "producer": "p1", "topic": TOPIC}
        )
        == 7
    )
    m.observe_producers([], now_s=1_071)
    assert reg.get_sample_value("kafka_audit_producer_info", {**info, "batch_num_messages": "4"}) is None
    assert (
        reg.get_sample_value(
            "kafka_audit_producer_rtt_seconds", {"producer_id": "p1", "producer": "p1", "topic": TOPIC}
        )
        is None
    )


def test_live_table_shows_predicted_next_to_actual_within_140_columns():
    rows = {}
    for i, r in enumerate([_final(loss_rate=0.15, gamma_actual=0.81), _row(state="provisional")]):
        r["window_start_ms"] = i * 10_000
        rows[(r["topic"], r["window_start_ms"], r["tier"])] = r
    console = Console(width=140, record=True, color_system=None)
    console.print(results_table(rows, {"lag_s": 3.0}))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 140
    header = next(line for line in text.splitlines() if "R_l" in line)
    assert header.index("R_l") < header.index("P_l [90%]") < header.index("R_d") < header.index("P_d")
    final = next(line for line in text.splitlines() if "final" in line)
    for cell in ("15.00%", "20.00% [10.00-30.00]", "1.00%", "0.81/0.70", "batch.num.messages 1→4"):
        assert cell in final, (cell, final)
    assert "target 0.90" in text and "cluster:local" in text
    row = _row(message_timeout_ms=5000, suggested_message_timeout_ms=500, suggested_acks="0", suggestion="x")
    assert short_suggestion(row) == "acks 1→0, message.timeout.ms 5000→500"
    assert short_suggestion(_row()) == ""


def test_live_table_names_the_serving_model_and_marks_calibrating_predictions():
    rows = {}
    for i, r in enumerate(
        [
            _final(model_version="v0002", model_calibrated=True),
            _final(model_version="v0003", model_calibrated=False, p_loss=0.6, p_loss_lo=0.5, p_loss_hi=0.7),
            _row(state="provisional"),
        ]
    ):
        r["window_start_ms"] = i * 10_000
        rows[(r["topic"], r["window_start_ms"], r["tier"])] = r
    console = Console(width=140, record=True, color_system=None)
    console.print(results_table(rows, {"lag_s": 3.0}))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 140
    assert "model v0003 calibrating" in text
    finals = [line for line in text.splitlines() if "final" in line]
    assert "60.00% [50.00-70.00] cal." in finals[0]  # newest first: v0003, calibrating
    assert "20.00% [10.00-30.00]" in finals[1] and "cal." not in finals[1]
    # once calibrated the title names the model alone; results without a model version name none
    rows[(TOPIC, 10_000, "cluster:local")]["model_calibrated"] = True
    assert serving_model(rows.values()) == "model v0003"
    assert serving_model([_final(), _row(state="provisional", model_version="v9")]) is None


def test_up_alert_settings_file_env_and_flags(tmp_path, monkeypatch):
    cfg = tmp_path / "up.toml"
    cfg.write_text(
        'scenario = "weblog"\n[alerts]\nwebhook_url = "http://127.0.0.1:9/hook"\ngamma_target = 0.95\n'
        '[topic_kpi."orders"]\ngamma_target = 0.8\n'
    )
    monkeypatch.setenv("KAFKA_AUDIT_ALERTS_DRIFT_WINDOWS", "5")
    s = load_up_settings(cfg, alerts={"alertmanager_url": "http://127.0.0.1:9093", "gamma_target": None})
    assert (str(s.alerts.webhook_url), str(s.alerts.alertmanager_url)) == (
        "http://127.0.0.1:9/hook",
        "http://127.0.0.1:9093/",
    )
    assert (s.alerts.gamma_target, s.alerts.drift_windows) == (0.95, 5)
    assert s.kpi["audit.weblog"].stream_type == "weblog" and s.kpi["orders"].gamma_target == 0.8
    assert load_up_settings(cfg, alerts={"gamma_target": 0.7}).alerts.gamma_target == 0.7
    with pytest.raises(ConfigError, match="gamma_target"):
        load_up_settings(cfg, alerts={"gamma_target": 2.0})
    (tmp_path / "bad.toml").write_text("[alerts]\nalertmanager = 1\n")
    with pytest.raises(ConfigError, match=r"alerts\.alertmanager"):
        load_up_settings(tmp_path / "bad.toml")


def test_job_resolves_the_gamma_target_and_alert_grace(tmp_path):
    from alerts import AlertSettings, attach_to_job
    from spark_streaming.job import ReconciliationJob

    s = SparkJobSettings(grace_ms=7_000, checkpoint_dir=tmp_path / "checkpoint")
    assert ReconciliationJob(s).gamma_target == 0.9
    job = ReconciliationJob(s)
    pipeline = attach_to_job(job, AlertSettings(gamma_target=0.95))
    assert (job.gamma_target, pipeline.settings.grace_ms) == (0.95, 7_000)
    assert job.listeners == [pipeline.on_batch] and job.closers == [pipeline.close]
    assert job.decision_listeners == [pipeline.on_decision]
    job = ReconciliationJob(s.model_copy(update={"gamma_target": 0.8}))
    pipeline = attach_to_job(job, AlertSettings(grace_ms=1))
    assert (job.gamma_target, pipeline.settings.grace_ms) == (0.8, 1)
    pipeline.close()


def test_a_window_gets_the_same_numbers_whatever_else_is_in_the_micro_batch(model):
    # A batch Spark replays after a crash holds other windows than the first run: the finals must match.
    cols = ["p_loss", "p_loss_lo", "p_loss_hi", "p_dup", "gamma_actual", "gamma_predicted", "suggestion"]
    alone = add_predictions(pd.DataFrame([_row()]), CONFIG, lambda: model)
    others = [
        _row(packet_loss_pct_est=float(i), batch_num_messages=1 + i % 10, sent=100 * i) for i in range(1, 30)
    ]
    mixed = add_predictions(pd.DataFrame([*others, _row()]), CONFIG, lambda: model)
    assert alone.iloc[0][cols].tolist() == mixed.iloc[-1][cols].tolist()


def test_the_suggestion_is_carried_as_structure_matching_the_model(model):
    out = add_predictions(pd.DataFrame([_row()]), CONFIG, lambda: model)
    row = out.iloc[0].to_dict()
    config = {"acks": "1", "batch.num.messages": 1, "message.timeout.ms": 500, "producers": 1}
    direct = suggest(
        {**config, "poll_interval_ms": 0.0},
        {
            "packet_loss_pct": 15,
            "delay_ms": 1,
            "message_size_bytes": 200,
            "arrival_rate_msgs_per_s": 500,
            "measured_throughput_msgs_per_s": 425,  # R_l 15%: the window measured T
        },
        0.9,
        Weights.preset("weblog"),
        model,
    )
    changes = suggested_changes(row)
    assert changes and changes == {k: (str(v) if k == "acks" else v) for k, v in direct.changes.items()}
    assert row["suggested_gamma"] == pytest.approx(direct.predicted_after.gamma)
    assert row["suggested_p_loss"] == pytest.approx(direct.predicted_after.p_loss)
    assert row["suggestion_meets_target"] == direct.meets_target
    assert suggested_changes(_row()) == {}  # no suggestion: no change


def test_a_window_that_delivered_nothing_still_gets_a_suggestion(model):
    """R_l = 1 measures a throughput of 0 messages/s, which scales no configuration's: the suggestion takes
    the model's own instead of failing (the alert end-to-end test's windows of total loss logged
    "suggest: ConfigError: measured_throughput_msgs_per_s=0.0" and carried no suggestion)."""
    out = add_predictions(pd.DataFrame([_row(unique=0, loss_rate=1.0)]), CONFIG, lambda: model)
    row = out.iloc[0].to_dict()
    assert not row.get("predict_error"), row.get("predict_error")
    assert row["suggestion"] and suggested_changes(row)
