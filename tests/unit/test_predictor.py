import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from kafka_audit.cli import app
from kafka_plumbing.errors import ConfigError
from predictor.features import BASE_FEATURES, FEATURES
from predictor.model import OUTPUT_COLUMNS, Predictor, default_predictor


def cases(**overrides):
    base = dict(
        acks=1,
        packet_loss_pct=10.0,
        delay_ms=30.0,
        message_size_bytes=100.0,
        batch_num_messages=1.0,
        message_timeout_ms=2000.0,
        poll_interval_ms=0.0,
        tcp_timeout_pct=0.0,
    )
    n = max((len(v) for v in overrides.values() if isinstance(v, list)), default=1)
    return pd.DataFrame({k: overrides.get(k, base[k]) for k in FEATURES}, index=range(100, 100 + n))


def test_default_model_is_cached_per_process():
    assert default_predictor() is default_predictor()


def test_predict_shapes_intervals_and_index():
    frame = cases(acks=[0, 1] * 10, packet_loss_pct=[float(x) for x in range(0, 40, 2)])
    frame["extra"] = "ignored"
    out = default_predictor().predict(frame)
    assert list(out.columns) == list(OUTPUT_COLUMNS)
    assert out.index.equals(frame.index)
    assert out.dtypes.eq("float64").all()
    assert np.isfinite(out.to_numpy()).all()
    for t in ("p_loss", "p_dup"):
        assert (out[f"{t}_lo"] <= out[t]).all() and (out[t] <= out[f"{t}_hi"]).all()
        assert out[[t, f"{t}_lo", f"{t}_hi"]].stack().between(0.0, 1.0).all()
    assert (out.loc[frame.acks == 0, ["p_dup", "p_dup_lo", "p_dup_hi"]] == 0.0).all().all()
    assert (out["throughput_msgs_per_s"] > 0).all()


def test_predictions_follow_the_measured_trends():
    p = default_predictor()
    by_loss = p.predict(cases(packet_loss_pct=[0.0, 5.0, 12.0, 20.0]))["p_loss"].to_numpy()
    assert by_loss[0] < 0.02 and by_loss[-1] > 0.7
    assert (np.diff(by_loss) > 0).all()
    # Sec. IV-D: batching lowers P_l under packet loss (acks=1, L=12%)
    by_batch = p.predict(cases(packet_loss_pct=12.0, batch_num_messages=[1.0, 4.0, 8.0]))["p_loss"].to_numpy()
    assert by_batch[0] - by_batch[2] > 0.3


def test_predict_rejects_bad_values_naming_the_column():
    p = default_predictor()
    with pytest.raises(ConfigError, match=r"packet_loss_pct.*\[0, 100\]"):
        p.predict(cases(packet_loss_pct=[5.0, 150.0]))
    with pytest.raises(ConfigError, match="acks"):
        p.predict(cases(acks=[2]))
    with pytest.raises(ConfigError, match="missing feature column"):
        p.predict(cases().drop(columns=["delay_ms"]))


def test_predict_invalid_nan_keeps_good_rows():
    frame = cases(delay_ms=[30.0, float("nan"), 60.0])
    frame.index = [7, 7, 8]  # duplicate labels are fine
    out = default_predictor().predict(frame, invalid="nan")
    assert out.iloc[1].isna().all()
    assert out.iloc[[0, 2]].notna().all().all()
    assert out.iloc[0]["p_loss"] == pytest.approx(
        default_predictor().predict(frame.iloc[[0]])["p_loss"].iloc[0]
    )


def test_empty_frame():
    out = default_predictor().predict(cases().iloc[:0])
    assert out.empty and list(out.columns) == list(OUTPUT_COLUMNS)


def test_shipped_card_documents_the_model():
    card = default_predictor().card
    assert card["features"] == list(BASE_FEATURES)  # paper Eq. 1: the shipped model predates tcp_timeout_pct
    assert len(card["data"][0]["sha256"]) == 64
    assert "sha256" in card["split"]["rule"]
    held = card["metrics"]["heldout"]
    assert held["mae_p_loss"] < 0.02 and held["coverage_90_p_loss"] >= 0.85
    assert {"torch", "python"} <= set(card["versions"])
    assert isinstance(card["seed"], int)


def test_a_card_and_a_csv_with_the_former_batch_size_name_still_work(tmp_path):
    import shutil

    from predictor import data
    from predictor.model import DEFAULT_MODEL_DIR

    shutil.copytree(DEFAULT_MODEL_DIR, tmp_path / "old")
    card_path = tmp_path / "old" / "card.json"
    card = json.loads(card_path.read_text())
    card["features"] = ["batch_size" if f == "batch_num_messages" else f for f in card["features"]]
    card["trained_ranges"]["batch_size"] = card["trained_ranges"].pop("batch_num_messages")
    card_path.write_text(json.dumps(card))
    old = Predictor.load(tmp_path / "old")
    assert old.card["features"] == list(BASE_FEATURES) and "batch_num_messages" in old.card["trained_ranges"]
    assert old.card["spec"]["batch_size"] == 64  # the training minibatch is no feature
    frame = cases(packet_loss_pct=[0.0, 12.0, 20.0], batch_num_messages=[1.0, 4.0, 8.0])
    pd.testing.assert_frame_equal(old.predict(frame), default_predictor().predict(frame))

    new_csv, old_csv = tmp_path / "new.csv", tmp_path / "old.csv"
    _tiny_csv(new_csv).rename(columns={"batch_num_messages": "batch_size"}).to_csv(old_csv, index=False)
    loaded = data.load([old_csv])
    pd.testing.assert_frame_equal(loaded.drop(columns="source"), data.load([new_csv]).drop(columns="source"))
    assert "batch_size" not in loaded.columns


def test_load_rejects_a_directory_without_model(tmp_path):
    with pytest.raises(ConfigError, match="not a model directory"):
        Predictor.load(tmp_path)


def _tiny_csv(path, n=40):
    rng = np.random.default_rng(0)
    df = pd.DataFrame(
        {
            "experiment": ["fam-a", "fam-b"] * (n // 2),
            "acks": [0, 1] * (n // 2),
            "packet_loss_pct": rng.uniform(0, 20, n).round(1),
            "delay_ms": 30,
            "message_size_bytes": 100,
            "batch_num_messages": rng.integers(1, 11, n),
            "message_timeout_ms": 5000,
            "poll_interval_ms": 0,
        }
    )
    pred = default_predictor().predict(df)
    df["p_loss"] = pred["p_loss"].clip(0, 1)
    df["p_dup"] = pred["p_dup"]
    df["n_sent"] = 1_000_000
    df["duration_s"] = 1_000_000 / pred["throughput_msgs_per_s"]
    df.to_csv(path, index=False)
    return df


def test_evaluate_json_keys_and_family_breakdown(tmp_path):
    csv = tmp_path / "testbed.csv"
    _tiny_csv(csv)
    result = CliRunner().invoke(app, ["predictor", "evaluate", "--data", str(csv), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert {"mae_p_loss", "mae_p_dup", "coverage_90_p_loss", "n", "families", "split"} <= set(out)
    assert out["n"] == 40 and out["split"] == "auto: all rows"  # a file the model never saw: every row
    assert set(out["families"]) == {"fam-a", "fam-b"}
    assert out["families"]["fam-a"]["n"] == 20
    assert out["mae_p_loss"] < 1e-6  # the truth here is the model's own prediction
    assert out["median_rel_error_throughput"] < 1e-4
    held = json.loads(
        CliRunner()
        .invoke(app, ["predictor", "evaluate", "--data", str(csv), "--split", "heldout", "--json"])
        .output
    )
    assert 0 < held["n"] < 40


def test_predict_cli_json():
    args = ["predictor", "predict", "--acks", "1", "--packet-loss-pct", "10", "--json"]
    result = CliRunner().invoke(app, [*args, "--batch-num-messages", "4"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["p_loss_lo"] <= out["p_loss"] <= out["p_loss_hi"]
    assert out["input"]["batch_num_messages"] == 4.0 and out["throughput_msgs_per_s"] > 0
    # the former flag still works, hidden from --help, with a warning on stderr
    old = CliRunner().invoke(app, [*args, "--batch-size", "4"])
    assert old.exit_code == 0, old.output
    assert json.loads(old.stdout) == out and "--batch-size is deprecated" in old.stderr
    assert "--batch-size" not in CliRunner().invoke(app, ["predictor", "predict", "--help"]).output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["predictor", "predict", "--packet-loss-pct", "150"], "--packet-loss-pct"),
        (["predictor", "predict", "--acks", "2"], "--acks"),
        (["predictor", "predict", "--batch-num-messages", "0"], "--batch-num-messages"),
        (["predictor", "predict", "--batch-size", "0"], "--batch-size"),
        (["suggest", "--batch-size", "0"], "--batch-size"),
        (["predictor", "predict", "--delay-ms", "-5"], "--delay-ms"),
        (["predictor", "evaluate", "--split", "test"], "--split"),
        (["predictor", "evaluate", "--data", "/nonexistent.csv"], "no such file"),
        (["predictor", "evaluate", "--model", "/nonexistent-dir"], "not a model directory"),
        (["predictor", "train", "--out", "/tmp/x", "--arch", "cnn"], "--arch"),
        (["suggest", "--target", "1.5"], "--target"),
        (["suggest", "--stream", "video"], "social, weblog, game"),
        (["suggest", "--weights", "0.5,0.5,0.5,0.5"], "sum"),
    ],
)
def test_cli_errors_name_the_flag(args, needle):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert needle in result.output.replace("\n", "")
    assert "Traceback" not in result.output


def test_predictor_help_names_the_acceptance_run():
    result = CliRunner().invoke(app, ["predictor", "evaluate", "--help"])
    assert result.exit_code == 0
    assert "held-back" in result.output


def test_the_timeout_rate_is_optional_and_a_model_from_before_it_ignores_it():
    frame = cases(packet_loss_pct=[0.0, 12.0, 20.0])
    without = frame.drop(columns=["tcp_timeout_pct"])
    shipped = default_predictor()
    pd.testing.assert_frame_equal(shipped.predict(without), shipped.predict(frame))
    pd.testing.assert_frame_equal(shipped.predict(frame.assign(tcp_timeout_pct=4.0)), shipped.predict(frame))
    unknown = frame.assign(tcp_timeout_pct=[None, 1.0, None])  # unknown -> 0, like a missing column
    known = frame.assign(tcp_timeout_pct=[0.0, 1.0, 0.0])
    pd.testing.assert_frame_equal(shipped.predict(unknown), shipped.predict(known))
    with pytest.raises(ConfigError, match=r"tcp_timeout_pct.*\[0, 100\]"):
        shipped.predict(frame.assign(tcp_timeout_pct=150.0))
    result = CliRunner().invoke(app, ["predictor", "predict", "--tcp-timeout-pct", "2.5", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["input"]["tcp_timeout_pct"] == 2.5
    result = CliRunner().invoke(app, ["predictor", "predict", "--tcp-timeout-pct", "-1"])
    assert result.exit_code == 2 and "--tcp-timeout-pct" in result.output
