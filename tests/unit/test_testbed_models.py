"""Pure testbed logic: loss and delay models, grids, scenarios, the CSV format, the root check."""

from __future__ import annotations

import csv
import random
import statistics
from pathlib import Path

import pytest
from testbed import netns
from testbed.grid import CSV_COLUMNS, GridSpec, append_row, csv_row, done_keys, load_grid, point_key
from testbed.impairment import BernoulliLoss, Delay, GilbertElliottLoss, Impairment, LossProcess
from testbed.scenario import load_scenario, shipped_scenarios

from kafka_plumbing.errors import ConfigError
from predictor.features import current_name

SHARED_CSV = Path(__file__).resolve().parents[2] / "predictor" / "base_data" / "wu2020" / "experiments.csv"


def _bursts(drops: list[bool]) -> list[int]:
    runs, run = [], 0
    for d in drops:
        if d:
            run += 1
        elif run:
            runs.append(run)
            run = 0
    return runs + ([run] if run else [])


def test_bernoulli_loss_ratio():
    proc = LossProcess(BernoulliLoss(percent=20), random.Random(1))
    drops = [proc.drop() for _ in range(100_000)]
    assert abs(sum(drops) / len(drops) - 0.20) < 0.005


@pytest.mark.parametrize(("p", "r"), [(2.0, 25.0), (5.0, 50.0), (1.0, 10.0)])
def test_gilbert_elliott_stationary_loss_and_burst_length(p, r):
    model = GilbertElliottLoss(p=p, r=r)
    proc = LossProcess(model, random.Random(7))
    drops = [proc.drop() for _ in range(300_000)]
    assert abs(100 * sum(drops) / len(drops) - model.mean_loss_pct) < 0.1 * model.mean_loss_pct
    assert abs(statistics.mean(_bursts(drops)) - 100 / r) < 0.1 * (100 / r)
    assert model.mean_burst_packets == pytest.approx(100 / r)


def test_gilbert_elliott_netem_defaults_and_validation():
    g = GilbertElliottLoss(p=10)
    assert g.r_pct == 90 and g.one_minus_h == 100 and g.one_minus_k == 0
    with pytest.raises(ValueError, match="r = 0"):
        GilbertElliottLoss(p=5, r=0)
    with pytest.raises(ValueError):
        BernoulliLoss(percent=120)


def test_pareto_delay_is_netem_like():
    rng = random.Random(3)
    d = Delay(delay_ms=23, jitter_ms=10, distribution="pareto")
    xs = [d.sample_ms(rng) for _ in range(200_000)]
    assert min(xs) >= 23 - 0.6 * 10 - 1e-9  # standardised Pareto(3) is >= -0.577
    assert statistics.mean(xs) == pytest.approx(23, abs=0.3)
    assert statistics.pstdev(xs) == pytest.approx(10, rel=0.1)
    assert statistics.median(xs) < 23  # right-skewed: a long tail of late packets
    assert Delay(delay_ms=50).sample_ms(rng) == 50


def test_impairment_routing_and_description():
    assert not Impairment(loss=BernoulliLoss(percent=5)).needs_userspace  # kernel statistic match
    assert Impairment(loss=GilbertElliottLoss(p=1, r=30)).needs_userspace
    assert Impairment(delay=Delay(delay_ms=10)).needs_userspace
    imp = Impairment.model_validate(
        {"delay": {"delay_ms": 23, "jitter_ms": 10}, "loss": {"model": "gilbert-elliott", "p": 1, "r": 30}}
    )
    assert imp.describe() == "delay 23ms 10ms pareto loss gemodel 1% 30% 100% 0%"


def test_refuses_without_root(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    with pytest.raises(netns.NetworkError, match="needs root"):
        netns.ProducerNamespace()


def test_grid_points_and_resume_keys(tmp_path):
    sweep = {"packet_loss_pct": [0, 10], "batch_num_messages": [1, 2, 4], "acks": [0, 1]}
    spec = GridSpec(name="g", sweep=sweep)
    points = list(spec.points())
    assert spec.size == len(points) == 12
    settings, _ = points[0]
    out = tmp_path / "g.csv"
    append_row(out, csv_row("g", settings, sent=100, received=97, unique=95, seconds=1.5))
    key = point_key("g", settings, 0)[:-1]
    assert done_keys(out) == {key: 1}
    with out.open() as f:
        row = next(csv.DictReader(f))
    assert (row["n_lost"], row["p_loss"], row["n_duplicated"], row["p_dup"]) == ("5", "0.05", "2", "0.02")


def test_grids_and_csvs_with_the_former_batch_size_name_still_read(tmp_path):
    old_spec = GridSpec(name="g", sweep={"packet_loss_pct": [0, 10], "batch_size": [1, 2, 4], "acks": [0, 1]})
    new_sweep = {"packet_loss_pct": [0, 10], "batch_num_messages": [1, 2, 4], "acks": [0, 1]}
    assert list(old_spec.points()) == list(GridSpec(name="g", sweep=new_sweep).points())
    settings, _ = next(old_spec.points())
    row = csv_row("g", settings, sent=100, received=97, unique=95, seconds=1.5)
    old = tmp_path / "old.csv"
    with old.open("w", newline="") as f:  # a CSV written before the rename
        w = csv.writer(f)
        w.writerow(["batch_size" if c == "batch_num_messages" else c for c in CSV_COLUMNS])
        w.writerow([row[c] for c in CSV_COLUMNS])
    assert done_keys(old) == {point_key("g", settings, 0)[:-1]: 1}


def test_csv_columns_match_the_shared_data():
    with SHARED_CSV.open() as f:
        header = next(csv.reader(f))
    assert "batch_size" in header  # the shared file keeps its columns; the former name maps to the new one
    assert tuple(current_name(c) for c in header) == CSV_COLUMNS


def test_grid_file_errors_name_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsweep: {packet_los_pct: [1, 2]}\n")
    with pytest.raises(ConfigError, match="packet_los_pct"):
        load_grid(bad)
    shipped = load_grid(Path("lab/testbed/grids/batch-pktloss.yaml"))
    assert shipped.size >= 60
    assert shipped.congestion_control == "cubic" and shipped.warmup_messages > 0
    settings, _ = next(shipped.points())
    assert settings["poll_interval_ms"] == 0 and settings["retries"] == 0  # the paper's full load, as its CSV


def test_shipped_scenarios_and_variants():
    assert {"weblog", "social", "game"} <= set(shipped_scenarios())
    for name in ("weblog", "social", "game"):
        sc = load_scenario(name)
        assert "tuned" in sc.variants
        assert any(isinstance(s.network.loss, GilbertElliottLoss) for s in sc.stages)
        assert any(s.network.delay and s.network.delay.distribution == "pareto" for s in sc.stages)
        default, tuned = (sc.stage_config(sc.stages[0], v) for v in ("default", "tuned"))
        assert default != tuned
        with pytest.raises(ConfigError, match="allowed values are default, tuned"):
            sc.stage_config(sc.stages[0], "fast")
    with pytest.raises(ConfigError, match="shipped: bursts, game, shift, social, weblog"):
        load_scenario("nope")


def test_plots_from_the_shared_data(tmp_path):
    from testbed.plots import draw, read_csv

    written = draw({"paper": read_csv(SHARED_CSV)}, tmp_path)
    assert [p.name for p in written] == [f"fig{i}.png" for i in range(4, 9)]
    assert all(p.stat().st_size > 10_000 for p in written)


@pytest.mark.parametrize(
    ("side", "state", "recv_q", "send_q", "pending"),
    [
        ("producer", "ESTAB", 0, 0, True),  # a live producer may send more
        ("producer", "FIN-WAIT-1", 0, 81515, True),  # an exited producer's orphan, still sending
        ("producer", "FIN-WAIT-1", 0, 1, False),  # only its FIN is unacknowledged: the data is there
        ("producer", "LAST-ACK", 0, 1, False),
        ("producer", "FIN-WAIT-2", 0, 0, False),
        ("producer", "TIME-WAIT", 0, 0, False),
        ("broker", "ESTAB", 2447, 0, True),  # received, not read by Kafka yet
        ("broker", "ESTAB", 0, 0, False),  # half-open: the producer's RST was lost; nothing can come
        ("broker", "CLOSE-WAIT", 0, 0, False),
    ],
)
def test_which_sockets_may_still_deliver_messages(side, state, recv_q, send_q, pending):
    assert netns.carries_data(side, state, recv_q, send_q) is pending


def test_scenario_overrides_stage_length_and_rate_everywhere():
    from testbed.scenario import load_scenario

    sc = load_scenario("shift")
    longer = sc.with_overrides(stage_seconds=30, poll_interval_ms=1.0)
    assert [s.duration_s for s in longer.stages] == [30] * len(sc.stages)
    assert {longer.stage_workload(s).poll_interval_ms for s in longer.stages} == {1.0}
    assert [s.network for s in longer.stages] == [s.network for s in sc.stages]
    assert sc.with_overrides() == sc  # nothing given: the scenario as shipped
    assert {sc.stage_workload(s).poll_interval_ms for s in sc.stages} == {0.25}


def test_scenario_overrides_name_the_bad_value():
    from testbed.scenario import load_scenario

    from kafka_plumbing.errors import ConfigError

    with pytest.raises(ConfigError, match="stage_seconds=0"):
        load_scenario("shift").with_overrides(stage_seconds=0)


def test_a_warm_up_needs_a_positive_length():
    from testbed.warmup import warm_up

    with pytest.raises(ValueError, match="seconds=0"):
        warm_up({"bootstrap.servers": "127.0.0.1:1"}, "t", {}, rate=100, seconds=0)
