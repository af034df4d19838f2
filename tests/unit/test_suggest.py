import json
import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from kafka_audit.cli import app
from kafka_plumbing.errors import ConfigError
from predictor.kpi import Weights
from predictor.model import default_predictor
from predictor.suggest import KNOB_NAMES, suggest

HIGH_LOSS_CONFIG = {"acks": "1", "batch.num.messages": 1, "message.timeout.ms": 2000}
HIGH_LOSS_NET = {"packet_loss_pct": 10.0, "delay_ms": 30.0, "message_size_bytes": 100}
EXPLANATION = re.compile(
    r"^(\w+ [\w.]+ [\d.]+ -> [\d.]+, )*\w+ [\w.]+ [\d.]+ -> [\d.]+: predicted P_l [\d.]+ -> [\d.]+, "
    r"gamma [\d.]+ -> [\d.]+"
)


def test_high_loss_case_gets_a_change_that_raises_gamma():
    config = dict(HIGH_LOSS_CONFIG)
    s = suggest(config, HIGH_LOSS_NET, 0.9, Weights.preset("weblog"), default_predictor())
    assert config == HIGH_LOSS_CONFIG  # caller's dict untouched
    assert s is not None and s.meets_target
    before_pl, _, before_gamma = s.predicted_before
    assert before_pl > 0.5 and before_gamma < 0.9
    assert s.predicted_after.gamma >= 0.9 > s.predicted_before.gamma
    assert s.predicted_after.p_loss < before_pl - 0.4
    assert set(s.changes) <= set(KNOB_NAMES.values())
    assert EXPLANATION.match(s.explanation), s.explanation
    # the predicted P_l after is what the model says for the changed configuration
    row = {"acks": 1, "batch_num_messages": 1, "message_timeout_ms": 2000, "poll_interval_ms": 0}
    row.update(HIGH_LOSS_NET)
    row.update(
        {
            "batch_num_messages": s.changes.get("batch.num.messages", 1),
            "acks": s.changes.get("acks", 1),
            "message_timeout_ms": s.changes.get("message.timeout.ms", 2000),
            "poll_interval_ms": s.changes.get("poll_interval_ms", 0),
        }
    )
    again = default_predictor().predict(pd.DataFrame([row]))
    assert again["p_loss"].iloc[0] == pytest.approx(s.predicted_after.p_loss)


def test_smallest_change_is_one_parameter_when_one_suffices():
    s = suggest(HIGH_LOSS_CONFIG, HIGH_LOSS_NET, 0.8)
    assert s is not None and s.meets_target
    assert len(s.changes) == 1


def test_no_suggestion_when_the_network_is_good():
    net = {**HIGH_LOSS_NET, "packet_loss_pct": 0.0}
    assert suggest(HIGH_LOSS_CONFIG, net, 0.9) is None


def test_unreachable_target_returns_the_best_improvement():
    net = {**HIGH_LOSS_NET, "packet_loss_pct": 25.0}
    s = suggest(HIGH_LOSS_CONFIG, net, 0.99)
    assert s is not None and not s.meets_target
    assert s.predicted_after.gamma > s.predicted_before.gamma
    assert "not reachable" in s.explanation


def test_arrival_rate_above_capacity_suggests_scaling():
    # producers cannot keep up with the stream: more producers raise mu and phi
    net = {
        "packet_loss_pct": 0.0,
        "delay_ms": 30.0,
        "message_size_bytes": 100,
        "arrival_rate_msgs_per_s": 20_000.0,
    }
    s = suggest({"acks": 1, "batch.num.messages": 1, "message.timeout.ms": 5000}, net, 0.9)
    assert s is not None
    assert s.changes.get("producers", 1) > 1
    assert s.details["after"]["mu"] > s.details["before"]["mu"]


def test_a_measured_throughput_sizes_the_producer_count_on_the_deployment():
    # The testbed's weblog "heavy loss" stage: 4,000 messages/s, L 15%, D 30 ms. The shipped model expects
    # one producer to deliver about 1,600 messages/s there; the window measured 170 (96% lost), and eight
    # producers then lost 0.5% (lab/experiments/control-loop/heavy-loss-sweep).
    config = {"acks": "1", "batch.num.messages": 1, "message.timeout.ms": 2000, "producers": 1}
    net = {
        "packet_loss_pct": 15.0,
        "delay_ms": 30.0,
        "message_size_bytes": 220,
        "arrival_rate_msgs_per_s": 4000.0,
    }
    model_only = suggest(config, net, 0.9, Weights.preset("weblog"))
    measured = suggest(
        config, {**net, "measured_throughput_msgs_per_s": 170.0}, 0.9, Weights.preset("weblog")
    )
    assert model_only is not None and measured is not None
    assert measured.changes["producers"] > model_only.changes["producers"]
    before = measured.details["before"]
    assert before["throughput_msgs_per_s"] == pytest.approx(170.0) and before["mu"] == pytest.approx(
        170 / 4000
    )
    # the model's relative effect of the configuration is kept: T after = model's T after * 170 / T before
    row = {
        "acks": 1,
        "poll_interval_ms": 0.0,
        **{k: v for k, v in net.items() if k != "arrival_rate_msgs_per_s"},
    }
    after = {
        **row,
        "batch_num_messages": measured.changes.get("batch.num.messages", 1),
        "message_timeout_ms": measured.changes.get("message.timeout.ms", 2000),
        "acks": int(measured.changes.get("acks", 1)),
    }
    t_after = default_predictor().predict(pd.DataFrame([after]))["throughput_msgs_per_s"].iloc[0]
    t_before = model_only.details["before"]["throughput_msgs_per_s"]
    assert measured.details["after"]["throughput_msgs_per_s"] == pytest.approx(
        t_after * 170.0 / t_before, rel=1e-5
    )
    with pytest.raises(ConfigError, match="measured_throughput_msgs_per_s"):
        suggest(config, {**net, "measured_throughput_msgs_per_s": 0.0}, 0.9)


def test_without_scaling_the_producer_count_stays():
    # the same stream for an application that cannot add producers: only librdkafka properties change
    net = {
        "packet_loss_pct": 0.0,
        "delay_ms": 30.0,
        "message_size_bytes": 100,
        "arrival_rate_msgs_per_s": 20_000.0,
    }
    config = {"acks": 1, "batch.num.messages": 1, "message.timeout.ms": 5000, "producers": 2}
    s = suggest(config, net, 0.9, scale_producers=False)
    assert s is None or "producers" not in s.changes
    if s is not None:
        assert s.details["after"]["producers"] == s.details["before"]["producers"] == 2


@pytest.mark.parametrize(
    ("config", "network", "target", "needle"),
    [
        ({"acks": 1, "batch.num.messages": 1}, HIGH_LOSS_NET, 0.9, "message.timeout.ms"),
        ({**HIGH_LOSS_CONFIG, "acks": "2"}, HIGH_LOSS_NET, 0.9, "acks"),
        (HIGH_LOSS_CONFIG, {**HIGH_LOSS_NET, "packet_loss_pct": 101}, 0.9, "packet_loss_pct"),
        (HIGH_LOSS_CONFIG, HIGH_LOSS_NET, 0.0, "target"),
        ({**HIGH_LOSS_CONFIG, "producers": 0}, HIGH_LOSS_NET, 0.9, "producers"),
    ],
)
def test_bad_input_is_a_clear_error(config, network, target, needle):
    with pytest.raises(ConfigError, match=needle):
        suggest(config, network, target)


def test_suggest_cli_text_and_json():
    args = [
        "suggest",
        "--acks",
        "1",
        "--batch-num-messages",
        "1",
        "--packet-loss-pct",
        "10",
        "--message-timeout-ms",
        "2000",
        "--target",
        "0.9",
        "--stream",
        "weblog",
    ]
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "batch.num.messages" in text.output and "gamma" in text.output
    out = json.loads(CliRunner().invoke(app, [*args, "--json"]).output)
    assert out["meets_target"] is True
    assert out["predicted_after"]["gamma"] >= 0.9
    assert out["explanation"].startswith(("raise", "lower", "set", "scale"))


def test_polling_interval_is_not_searched_under_packet_loss():
    # pollTime (Fig. 6) was measured without packet loss only: no extrapolated polling suggestions
    s = suggest(HIGH_LOSS_CONFIG, {**HIGH_LOSS_NET, "packet_loss_pct": 20.0}, 0.99)
    assert s is not None
    assert "poll_interval_ms" not in s.changes


def _card_with_folds(configurations: list[str], score: float = 0.031) -> dict:
    folds = [{"configuration": c, "mae_p_loss_challenger": score} for c in configurations]
    return {"metrics": {"loco": {"folds": folds, "loco_mae_p_loss_challenger": score}}}


def test_confidence_is_the_models_counterfactual_score_and_calibrated_only_within_the_scored_configurations():
    from predictor.confidence import confidence

    card = _card_with_folds(
        [
            "acks=1,batch_num_messages=2,message_timeout_ms=700,poll_interval_ms=2",
            "acks=1,batch_num_messages=10,message_timeout_ms=70000,poll_interval_ms=2",
        ]
    )
    inside = {"acks": 1, "batch_num_messages": 4, "message_timeout_ms": 5000, "poll_interval_ms": 2}
    c = confidence(card, inside)
    assert (c.loco_mae_p_loss, c.calibrated, c.folds) == (0.031, True, 2)
    assert c.words() == "counterfactual MAE(P_l) 0.031"
    for outside in (
        {"acks": 0},
        {"batch_num_messages": 11},
        {"message_timeout_ms": 500},
        {"poll_interval_ms": 0},
    ):
        c = confidence(card, {**inside, **outside})
        assert (
            not c.calibrated
            and c.words() == "uncalibrated: counterfactual MAE(P_l) 0.031 on other configurations"
        )
    for no_score in (None, {}, {"metrics": {}}, _card_with_folds([])):
        c = confidence(no_score, inside)
        assert (c.loco_mae_p_loss, c.calibrated) in ((None, False), (0.031, False))
    assert confidence(None, inside).words() == "uncalibrated: no counterfactual score"


def test_a_suggestion_carries_how_sure_it_is():
    import copy

    model = default_predictor()
    s = suggest(HIGH_LOSS_CONFIG, HIGH_LOSS_NET, 0.9, Weights.preset("weblog"), model)
    assert s is not None and EXPLANATION.match(s.explanation)
    assert s.explanation.endswith("(uncalibrated: no counterfactual score)")  # the shipped model: no folds
    assert s.to_json()["confidence"] == {"loco_mae_p_loss": None, "calibrated": False, "folds": 0}
    scored = copy.copy(model)
    scored.card = {
        **model.card,
        **_card_with_folds(
            [
                "acks=0,batch_num_messages=1,message_timeout_ms=500,poll_interval_ms=0",
                "acks=1,batch_num_messages=10,message_timeout_ms=7000,poll_interval_ms=0",
            ],
            0.042,
        ),
    }
    t = suggest(HIGH_LOSS_CONFIG, HIGH_LOSS_NET, 0.9, Weights.preset("weblog"), scored)
    assert t is not None and t.changes == s.changes  # the same model: the same suggestion
    assert (t.confidence.loco_mae_p_loss, t.confidence.calibrated) == (0.042, True)
    assert t.explanation.endswith("(counterfactual MAE(P_l) 0.042)")
