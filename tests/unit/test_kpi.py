import math

import numpy as np
import pytest

from kafka_plumbing.errors import ConfigError
from predictor.kpi import SATURATION_LOSS, Weights, gamma, measured_throughput, mu, phi


def test_default_weights_are_the_papers():
    assert (Weights().w1, Weights().w2, Weights().w3, Weights().w4) == (0.3, 0.3, 0.3, 0.1)
    assert Weights.preset("default") == Weights()


@pytest.mark.parametrize(
    ("stream", "expected"),
    [("social", (0.4, 0.3, 0.2, 0.1)), ("weblog", (0.1, 0.1, 0.7, 0.1)), ("game", (0.2, 0.4, 0.2, 0.2))],
)
def test_table_ii_presets(stream, expected):
    w = Weights.preset(stream)
    assert (w.w1, w.w2, w.w3, w.w4) == expected


def test_unknown_preset_names_the_allowed_values():
    with pytest.raises(ConfigError, match="social, weblog, game"):
        Weights.preset("video")


@pytest.mark.parametrize("ws", [(0.5, 0.5, 0.5, 0.1), (1.2, -0.2, 0.0, 0.0), (0.25, 0.25, 0.25, 0.2)])
def test_weights_must_be_fractions_summing_to_one(ws):
    with pytest.raises(ConfigError, match="w1"):
        Weights(*ws)


def test_gamma_is_equation_2():
    # 0.3*0.8 + 0.3*0.9 + 0.3*(1-0.1) + 0.1*(1-0.01)
    assert gamma(0.8, 0.9, 0.1, 0.01) == pytest.approx(0.24 + 0.27 + 0.27 + 0.099)
    assert gamma(1.0, 1.0, 0.0, 0.0, Weights.preset("game")) == pytest.approx(1.0)
    assert gamma(0.0, 0.0, 1.0, 1.0) == pytest.approx(0.0)
    w = Weights.preset("weblog")
    assert gamma(0.5, 0.5, 0.2, 0.0, w) == pytest.approx(0.05 + 0.05 + 0.56 + 0.1)


def test_gamma_rejects_values_outside_unit_interval():
    with pytest.raises(ConfigError, match="p_loss"):
        gamma(0.5, 0.5, 10.0, 0.0)
    with pytest.raises(ConfigError, match="phi"):
        gamma(-0.1, 0.5, 0.1, 0.0)


def test_mu_is_service_rate_over_arrival_rate_capped_at_one():
    assert mu(500.0, 1000.0) == pytest.approx(0.5)
    assert mu(500.0, 1000.0, producers=3) == pytest.approx(1.0)
    assert mu(2000.0, 1000.0) == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="arrival rate"):
        mu(100.0, 0.0)


def test_phi_counts_only_delivered_messages():
    assert phi(1000.0, 1000.0, 0.25) == pytest.approx(0.75)
    assert phi(500.0, 1000.0, 0.5, producers=2) == pytest.approx(0.5)
    assert phi(100.0, 1000.0, 0.0) == pytest.approx(0.1)


def test_vectorised_kpi():
    tp = np.array([100.0, 1000.0, 5000.0])
    p_l = np.array([0.0, 0.5, 1.0])
    g = gamma(phi(tp, 1000.0, p_l), mu(tp, 1000.0), p_l, np.zeros(3))
    assert g.shape == (3,)
    assert g[0] == pytest.approx(0.3 * 0.1 + 0.3 * 0.1 + 0.3 + 0.1)
    assert g[2] == pytest.approx(0.0 + 0.3 + 0.0 + 0.1)


def test_a_saturated_window_measures_the_throughput_of_one_producer():
    # 40,000 sent in 10 s by 1 producer, 96% lost: it delivered 160 messages/s, its capacity there
    assert measured_throughput(40_000, 10.0, 0.96) == pytest.approx(160.0)
    assert measured_throughput(40_000, 10.0, 0.5, producers=4) == pytest.approx(500.0)
    # below SATURATION_LOSS the producers (nearly) kept up: only a lower bound, so not measured
    assert math.isnan(measured_throughput(40_000, 10.0, SATURATION_LOSS / 2))
    got = measured_throughput(np.array([100.0, 0.0, 100.0]), np.array([10.0, 10.0, 0.0]), np.array([0.5] * 3))
    assert got[0] == pytest.approx(5.0) and np.isnan(got[1:]).all()  # empty window, zero length: NaN
