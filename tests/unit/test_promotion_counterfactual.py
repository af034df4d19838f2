"""Criteria (d) and (e) of the promotion: the counterfactual (leave-one-configuration-out) score and the
model properties, on a crafted training store on disk (no Kafka: the promotion reads the store only)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from predictor import SHARED_DATA
from predictor.counterfactual import configuration_key, held_out_configurations
from predictor.model import default_predictor
from predictor.promotion import decide, run_retraining
from predictor.registry import ModelRegistry
from predictor.settings import RetrainSettings
from predictor.training_store import COLUMNS, LOCAL_SOURCE, TrainingStore

T0 = 1_767_225_600_000
W = 10_000
BATCHES = {"small": 2.0, "large": 8.0}
"""The crafted store's two configurations differ only in batch.num.messages (issue 39's loop change:
2 -> 9). Not in message.timeout.ms, as at first: the model's P_l is non-increasing in the timeout by
construction since issue 39 item 2, and a fold that learnt "+0.3 at 500 ms" then put it on the short
timeout, not on the network (0.154 against the champion's 0.150 where the unconstrained model scored
0.185)."""


def crafted_windows(per_stage: int = 6, stages: int = 12, seed: int = 39) -> pd.DataFrame:
    """Training-store rows of two configurations on the same network stages.

    The ``small`` configuration loses 0.3 more than the champion (the shipped model) predicts, and the
    newest windows (the test split) are all ``small``: a challenger learns it and is better there. The
    ``large`` configuration, on the same stages, loses exactly what the champion predicts, and ran only
    in the older stages. A model that learns from ``small``'s windows alone that "this network loses
    0.3 more", whatever the batch size, mispredicts ``large``: the fold that holds ``large`` out does.
    """
    rng = np.random.default_rng(seed)
    rows, t = [], T0
    for stage in range(stages):
        loss_pct, delay = float(rng.uniform(3, 12)), float(rng.uniform(40, 200))
        names = ["small"] if stage >= stages - 4 else list(BATCHES)
        for name in names:
            for _ in range(per_stage):
                rows.append(
                    {
                        "acks": 1.0,
                        "packet_loss_pct": loss_pct + float(rng.normal(0, 0.3)),
                        "delay_ms": delay,
                        "message_size_bytes": 500.0,
                        "batch_num_messages": BATCHES[name],
                        "message_timeout_ms": 3_000.0,
                        "poll_interval_ms": 10.0,
                        "tcp_timeout_pct": 0.0,
                        "n_sent": 5_000,
                        "duration_s": W / 1000,
                        "topic": name,
                        "tier": "cluster:local",
                        "window_start_ms": t,
                        "window_end_ms": t + W,
                        "source": LOCAL_SOURCE,
                    }
                )
                t += W
    frame = pd.DataFrame(rows)
    frame["packet_loss_pct"] = frame["packet_loss_pct"].clip(0, 25)
    truth = default_predictor().predict(frame)
    small = (frame["topic"] == "small").to_numpy()
    frame["p_loss"] = np.clip(truth["p_loss"].to_numpy() + np.where(small, 0.3, 0.0), 0, 1)
    frame["p_dup"] = truth["p_dup"].to_numpy()
    for name in ("model_version", "pred_p_loss", "pred_p_loss_lo", "pred_p_loss_hi", "pred_p_dup"):
        frame[name] = None
    return frame[list(COLUMNS)]


def test_configurations_are_the_producer_settings_and_the_most_frequent_are_held_out():
    frame = crafted_windows(per_stage=2, stages=6)
    keys = configuration_key(frame)
    assert keys.nunique() == 2
    assert "batch_num_messages=2" in keys.iloc[0] and "packet_loss" not in keys.iloc[0]
    # M is the stream's measured mean message size, not a setting: it does not split a configuration
    wobbly = frame.assign(message_size_bytes=frame["message_size_bytes"] + np.linspace(0, 0.3, len(frame)))
    assert configuration_key(wobbly).nunique() == 2 and "message_size" not in keys.iloc[0]
    assert held_out_configurations(frame, 1) == [keys[frame["topic"] == "small"].iloc[0]]
    assert len(held_out_configurations(frame, 5)) == 2
    assert held_out_configurations(frame[frame["topic"] == "small"], 3) == []  # one configuration: none
    assert held_out_configurations(frame, 0) == []


def test_decide_rejects_a_challenger_worse_counterfactually_by_more_than_the_tolerance():
    metrics = {
        "local_test": {"mae_p_loss": 0.02, "coverage_90_p_loss": 0.9, "n": 40},
        "paper_heldout": {"mae_p_loss": 0.011, "coverage_90_p_loss": 0.95, "n": 281},
    }
    champion = {**metrics, "local_test": {**metrics["local_test"], "mae_p_loss": 0.1}}
    loco = {
        "loco_mae_p_loss_champion": 0.05,
        "loco_mae_p_loss_challenger": 0.07,
        "loco_mae_p_dup_champion": 0.0,
        "loco_mae_p_dup_challenger": 0.0,
        "loco_folds": 3,
        "loco_configurations": 4,
    }
    d = decide(champion, metrics, loco=loco, loco_tolerance=0.01)
    assert (
        not d.promoted
        and len(d.reasons) == 1
        and d.reasons[0].startswith("(d) counterfactual MAE(P_l) 0.0700")
    )
    assert d.numbers["loco_tolerance"] == 0.01 and d.numbers["loco_folds"] == 3
    assert decide(champion, metrics, loco=loco, loco_tolerance=0.03).promoted
    assert decide(champion, metrics, loco=None).promoted  # fewer than two configurations: not applied


@pytest.mark.slow
def test_a_challenger_better_on_the_newest_windows_but_worse_counterfactually_is_rejected(tmp_path):
    frame = crafted_windows()
    store = TrainingStore(tmp_path / "training")
    for batch, start in enumerate(range(0, len(frame), 12)):
        store.write(batch, frame.iloc[start : start + 12])
    registry = ModelRegistry(tmp_path / "models")
    settings = RetrainSettings(threads=2, steps=200)
    decision = run_retraining(registry, store.root, [SHARED_DATA], settings)
    n = decision.numbers
    # better on the newest windows (criterion (a) met: they are all of the configuration it learnt) ...
    assert n["mae_local_challenger"] < n["mae_local_champion"] - settings.margin
    assert not any(r.startswith("(a)") for r in decision.reasons)
    # ... worse where a configuration was held out: rejected by (d), and only by it
    assert n["loco_folds"] == 2 and n["loco_configurations"] == 2
    assert n["loco_mae_p_loss_challenger"] > n["loco_mae_p_loss_champion"] + settings.loco_tolerance
    assert not decision.promoted
    assert [r[:3] for r in decision.reasons] == ["(d)"], decision.reasons
    assert registry.champion_dir() is None  # the shipped model keeps serving
    card = json.loads((registry.root / decision.challenger_version / "card.json").read_text())
    folds = {
        f["configuration"].split("batch_num_messages=")[1].split(",")[0]: f
        for f in card["metrics"]["loco"]["folds"]
    }
    assert set(folds) == {"2", "8"}
    # the champion predicts the large batch exactly; the fold that never saw it learnt +0.3 from B 2
    assert folds["8"]["mae_p_loss_challenger"] > folds["8"]["mae_p_loss_champion"] + 0.02
    assert card["metrics"]["properties"]["rejecting"] == []
    assert n["timeout_rise_challenger"] == n["timeout_rise_champion"] == 0.0  # monotone by construction
    assert n["timeout_rise_tolerance"] == 0.0


def test_cli_evaluate_prints_the_counterfactual_score_and_the_registrys_decisions(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from kafka_audit.cli import app

    monkeypatch.setenv("KAFKA_AUDIT_RETRAIN_STEPS", "20")
    monkeypatch.setenv("KAFKA_AUDIT_RETRAIN_THREADS", "1")
    frame = crafted_windows(per_stage=4, stages=9)  # 2 x 4 x 5 + 4 x 4 = 56 windows
    store = TrainingStore(tmp_path / "training")
    store.write(0, frame)
    registry = ModelRegistry(tmp_path / "models")
    decision = run_retraining(registry, store.root, [SHARED_DATA], RetrainSettings(steps=20, threads=1))
    runner = CliRunner()
    args = ["predictor", "evaluate", "--registry", str(registry.root), "--from-results", str(store.root)]
    result = runner.invoke(app, [*args, "--loco-folds", "1", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["mae_p_loss"] < 0.02  # the champion (the shipped model here) on the paper's held-back rows
    (version,) = out["registry"]
    assert version["version"] == decision.challenger_version and version["promoted"] == decision.promoted
    assert version["loco_mae_p_loss"] == pytest.approx(decision.numbers["loco_mae_p_loss_challenger"])
    assert len(out["loco"]["folds"]) == 1 and out["loco"]["n_configurations"] == 2
    assert "batch_num_messages=2" in out["loco"]["folds"][0]["configuration"]  # the most frequent
    table = runner.invoke(app, [*args, "--loco-folds", "1"])
    assert table.exit_code == 0, table.output
    for shown in ("model registry", decision.challenger_version, "leave-one-configuration-out", "0.3000"):
        assert shown in table.output
    bad = runner.invoke(app, ["predictor", "evaluate", "--registry", str(tmp_path / "none")])
    assert bad.exit_code != 0 and "--registry" in bad.output


def test_a_challenger_breaking_a_property_is_rejected_naming_it_and_a_counterexample(monkeypatch):
    import torch
    from testbed.synthetic import deployment_windows

    from predictor import promotion
    from predictor.promotion import challenge
    from predictor.retrain import retrain

    def rising(*args, **kw):  # no model of the shipped lineage breaks it (issue 39 item 2): flip its steps
        result = retrain(*args, **kw)
        with torch.no_grad():
            for member in result.model.ensemble.members:
                member.step_centres.mul_(-1.0)
                member.step_width.mul_(-1.0)
        return result

    monkeypatch.setattr(promotion, "retrain", rising)

    strict = RetrainSettings(steps=20, threads=1, loco_folds=0, timeout_rise_tolerance=0.0)
    local = deployment_windows(60, seed=3)
    result, decision = challenge(
        default_predictor(), local, [SHARED_DATA], strict, champion_version="shipped", challenger_version="v1"
    )
    (reason,) = [r for r in decision.reasons if r.startswith("(e)")]
    assert reason.startswith("(e) property p_loss_non_increasing_in_message_timeout_ms broken at acks=")
    assert "message_timeout_ms_longer=" in reason and "the champion's largest rise" in reason
    assert not decision.promoted and decision.numbers["property_violations"] == 1
    assert decision.numbers["timeout_rise_challenger"] > decision.numbers["timeout_rise_champion"]
    (violation,) = result.model.card["metrics"]["properties"]["rejecting"]
    assert (
        violation["counterexample"]["message_timeout_ms"]
        < violation["counterexample"]["message_timeout_ms_longer"]
    )
    assert "loco_folds" not in decision.numbers  # 0 folds: no counterfactual score
