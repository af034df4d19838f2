"""``kafka-audit testbed learn-report`` scores every model retraining made, also when none was promoted."""

from __future__ import annotations

import pandas as pd
import pytest
from testbed.learning import evaluate_learning

from predictor.model import Predictor
from predictor.registry import ModelRegistry
from predictor.training_store import COLUMNS, TrainingStore


def _windows(n: int) -> pd.DataFrame:
    rows = []
    for i in range(n):
        row = {c: None for c in COLUMNS}
        row.update(
            acks=1.0,
            packet_loss_pct=2.0 * i,
            delay_ms=20.0,
            message_size_bytes=200.0,
            batch_num_messages=2.0,
            message_timeout_ms=3000.0,
            poll_interval_ms=1.0,
            p_loss=0.1 * i,
            p_dup=0.0,
            n_sent=10_000,
            duration_s=10.0,
            topic="testbed.shift",
            tier="cluster:testbed",
            window_start_ms=1_800_000_000_000 + i * 10_000,
            window_end_ms=1_800_000_010_000 + i * 10_000,
            model_version="shipped",
            pred_p_loss=0.05,
            pred_p_loss_lo=0.0,
            pred_p_loss_hi=0.25,
            pred_p_dup=0.0,
            source="local",
        )
        rows.append(row)
    return pd.DataFrame(rows)


def test_no_promoted_model_scores_the_shipped_one_and_every_rejected_challenger(tmp_path):
    registry = ModelRegistry(tmp_path / "models")
    # retrained, never promoted: a copy of the shipped model (save() sets its card's version, so never
    # the process-wide default_predictor() itself)
    registry.save(Predictor.load(None), "v0001")
    held = _windows(4)
    TrainingStore(tmp_path / "holdout").write(0, held)
    summary = evaluate_learning(
        tmp_path / "models", tmp_path / "holdout", tmp_path / "training", tmp_path / "out"
    )
    scores = {s["model"]: s for s in summary["holdout"]}
    assert list(scores) == [
        "shipped (champion, as the job predicted)",
        "shipped",
        "v0001 (rejected, recomputed)",
    ]
    truth = held["p_loss"]
    served = scores["shipped (champion, as the job predicted)"]
    assert served["n"] == 4 and served["mae_p_loss"] == pytest.approx((truth - 0.05).abs().mean())
    assert served["coverage_90_p_loss"] == pytest.approx(0.75)  # 0.3 is outside [0, 0.25]
    # the challenger is the shipped model's copy: the same numbers as the shipped model recomputed
    shipped = scores["shipped"]["mae_p_loss"]
    assert scores["v0001 (rejected, recomputed)"]["mae_p_loss"] == pytest.approx(shipped)
    assert summary["champion"] == "shipped" and (tmp_path / "out" / "holdout-windows.csv").is_file()
