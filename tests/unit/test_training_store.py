"""The training store: which final windows are training examples, their rows, Parquet exactly once."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from testbed.synthetic import deployment_windows

from audit_record import window_result
from kafka_plumbing.errors import ConfigError
from predictor.features import FEATURES
from predictor.training_store import (
    COLUMNS,
    LOCAL_SOURCE,
    SKIP_REASONS,
    TrainingStore,
    open_store,
    skip_reason,
    training_frame,
)

DAY_MS = 86_400_000
START = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _result(**values) -> dict:
    base = dict(
        topic="orders",
        window_start_ms=START,
        window_end_ms=START + 10_000,
        tier="cluster:local",
        state="final",
        sent=1_000,
        unique=950,
        duplicated=2,
        loss_rate=0.05,
        duplicate_rate=0.002,
        unaudited_producers=0,
        producer_configs=1,
        acks="all",
        batch_num_messages=10_000,
        message_timeout_ms=300_000,
        poll_interval_ms=0.0,
        message_size_bytes=512.0,
        packet_loss_pct_est=5.0,
        delay_ms_est=2.0,
        model_version="shipped",
        p_loss=0.01,
        p_loss_lo=0.0,
        p_loss_hi=0.03,
        p_dup=0.0,
    )
    base.update(values)
    return window_result.blank(**base)


def _features(results: pd.DataFrame) -> pd.DataFrame:
    """What spark_streaming.predict.feature_frame gives for these rows (acks 'all' -> 1)."""
    out = pd.DataFrame(index=results.index)
    out["acks"] = results["acks"].map({"all": 1.0, "1": 1.0, "0": 0.0})
    out["packet_loss_pct"] = pd.to_numeric(results["packet_loss_pct_est"]).fillna(0.0)
    out["delay_ms"] = pd.to_numeric(results["delay_ms_est"]).fillna(0.0)
    out["message_size_bytes"] = pd.to_numeric(results["message_size_bytes"])
    out["batch_num_messages"] = pd.to_numeric(results["batch_num_messages"])
    out["message_timeout_ms"] = pd.to_numeric(results["message_timeout_ms"])
    out["poll_interval_ms"] = pd.to_numeric(results["poll_interval_ms"]).fillna(0.0)
    return out


def test_eligible_window_has_no_skip_reason():
    assert skip_reason(_result()) is None


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ({"acks": None}, "no_producer_config"),
        ({"batch_num_messages": None}, "unmapped_config"),  # a Java producer: batches by bytes
        ({"message_timeout_ms": None}, "unmapped_config"),
        ({"packet_loss_pct_est": None}, "unknown_loss"),
        ({"packet_loss_pct_est": float("nan")}, "unknown_loss"),
        ({"delay_ms_est": None}, "unknown_delay"),
        ({"sent": 499}, "too_few_messages"),
        ({"unaudited_producers": 1}, "unaudited_producers"),
        ({"producer_configs": 2}, "mixed_config"),
        # checked in SKIP_REASONS order: the first that applies counts
        ({"acks": None, "sent": 10, "producer_configs": 3}, "no_producer_config"),
        ({"sent": 10, "unaudited_producers": 2}, "too_few_messages"),
    ],
)
def test_skip_reasons(values, reason):
    assert skip_reason(_result(**values)) == reason
    assert reason in SKIP_REASONS


def test_min_messages_is_a_setting_and_null_counts_are_eligible():
    assert skip_reason(_result(sent=200), min_messages=100) is None
    assert skip_reason(_result(sent=500)) is None
    assert skip_reason(_result(unaudited_producers=None, producer_configs=None)) is None


def test_training_frame_rows_labels_and_dtypes():
    results = pd.DataFrame(
        [
            _result(),
            _result(window_start_ms=START + 10_000, window_end_ms=START + 20_000, sent=100),  # too few
            _result(window_start_ms=START + 20_000, window_end_ms=START + 30_000, duplicate_rate=None),
            _result(window_start_ms=START + 30_000, window_end_ms=START + 40_000, producer_configs=2),
        ]
    )
    rows = training_frame(results, _features(results))
    assert list(rows.columns) == list(COLUMNS)
    assert len(rows) == 2
    first = rows.iloc[0]
    assert first["acks"] == 1.0 and first["batch_num_messages"] == 10_000
    assert first["p_loss"] == pytest.approx(0.05) and first["p_dup"] == pytest.approx(0.002)
    assert first["n_sent"] == 1_000 and first["duration_s"] == 10.0
    assert first["pred_p_loss"] == pytest.approx(0.01) and first["model_version"] == "shipped"
    assert first["source"] == LOCAL_SOURCE
    assert rows.iloc[1]["p_dup"] == 0.0  # unknown R_d -> 0
    for name, dtype in COLUMNS.items():
        assert str(rows[name].dtype) == dtype, name


def test_training_frame_drops_out_of_range_features_and_handles_empty():
    results = pd.DataFrame([_result(), _result(window_start_ms=START + 10_000)])
    features = _features(results)
    features.loc[1, "batch_num_messages"] = 0  # below librdkafka's range
    assert len(training_frame(results, features)) == 1
    empty = training_frame(results.iloc[:0], features.iloc[:0])
    assert empty.empty and list(empty.columns) == list(COLUMNS)


def test_store_writes_by_date_and_loads_each_window_once(tmp_path):
    store = TrainingStore(tmp_path / "training")
    rows = deployment_windows(30, seed=1, window_ms=DAY_MS // 10)  # spans three UTC days
    written = store.write(7, rows)
    assert sorted(p.parent.name for p in written) == ["date=2026-01-01", "date=2026-01-02", "date=2026-01-03"]
    assert all(p.name == "batch-000000000007.parquet" for p in written)
    # the same micro-batch again (a restarted job re-runs it): replaces its own files
    store.write(7, rows)
    assert store.count() == 30
    loaded = store.load()
    assert len(loaded) == 30
    assert loaded["window_end_ms"].is_monotonic_increasing
    columns = [*FEATURES, "p_loss"]
    pd.testing.assert_frame_equal(loaded[columns], rows[columns].reset_index(drop=True))
    assert not list((tmp_path / "training").rglob("*.tmp"))


def test_a_window_stored_by_two_batches_loads_once_newest_wins(tmp_path):
    store = TrainingStore(tmp_path)
    rows = deployment_windows(5, seed=2)
    store.write(1, rows)
    changed = rows.iloc[[0]].assign(p_loss=0.5)
    store.write(2, changed)
    loaded = store.load()
    assert len(loaded) == 5
    assert loaded.iloc[0]["p_loss"] == 0.5
    assert store.write(3, rows.iloc[:0]) == []


def test_empty_store_and_missing_directory(tmp_path):
    assert TrainingStore(tmp_path / "none").load().empty
    assert TrainingStore(tmp_path / "none").count() == 0
    with pytest.raises(ConfigError, match=r"--from-results .*none: not a directory"):
        open_store(tmp_path / "none")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="--from-results"):
        open_store(tmp_path / "file")
    assert open_store(tmp_path).root == tmp_path


def test_synthetic_windows_are_store_rows_in_time_order():
    rows = deployment_windows(100, seed=3)
    assert list(rows.columns) == list(COLUMNS)
    assert rows["window_end_ms"].is_monotonic_increasing
    assert rows["p_loss"].between(0, 1).all()
    assert (rows.loc[rows["acks"] == 0, "p_dup"] == 0).all()
    again = deployment_windows(100, seed=3)
    pd.testing.assert_frame_equal(rows, again)
    assert not np.allclose(rows["p_loss"], deployment_windows(100, seed=4)["p_loss"])
