"""Issue 39 item 2: P_l non-increasing in message.timeout.ms by construction (``ModelSpec.timeout_monotone``).

The property holds for any weights (here: random ones), and the warm start's two function-keeping steps
(new inputs with zero weight, the refitted standardisation) keep the monotone branch's function too.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from predictor.features import BASE_FEATURES, FEATURES
from predictor.nets import IMPROVED_SPEC, Ensemble, ModelSpec
from predictor.warm_start import add_inputs, restandardise

SPEC = dataclasses.replace(IMPROVED_SPEC, features=BASE_FEATURES, timeout_monotone=True, members=3)
T = BASE_FEATURES.index("message_timeout_ms")


def _random_ensemble(seed: int) -> Ensemble:
    torch.manual_seed(seed)
    ensemble = Ensemble(SPEC)
    with torch.no_grad():
        for p in ensemble.parameters():
            p.normal_(0.0, 0.8)
        ensemble.x_shift.copy_(torch.randn(len(BASE_FEATURES)))
        ensemble.x_scale.copy_(torch.rand(len(BASE_FEATURES)) + 0.5)
    return ensemble.eval()


def _ladder(rows: int, seed: int, features: int = len(BASE_FEATURES), t: int = T) -> torch.Tensor:
    """(rows, 40, features): random points, each along 40 increasing pre-scaled timeouts."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 1, features, generator=g).repeat(1, 40, 1)
    x[:, :, t] = torch.linspace(-4.0, 4.0, 40)
    x[:, :, 0] = (x[:, :, 0] > 0).float()  # acks 0/1
    return x


def test_p_loss_never_rises_with_the_timeout_whatever_the_weights():
    for seed in range(5):
        ensemble = _random_ensemble(seed)
        x = _ladder(200, seed)
        with torch.inference_mode():
            p = ensemble(x.reshape(-1, len(BASE_FEATURES)))["p_loss"].reshape(200, 40)
        assert (p[:, 1:] - p[:, :-1]).max().item() <= 1e-6
        assert (p[:, 0] - p[:, -1]).max().item() > 0.01  # and the timeout still matters


def test_the_spec_round_trips_and_old_cards_read_as_unconstrained():
    assert ModelSpec.from_json(SPEC.to_json()) == SPEC
    old = {k: v for k, v in SPEC.to_json().items() if k != "timeout_monotone"}
    assert ModelSpec.from_json(old).timeout_monotone is False


def test_warm_start_keeps_the_monotone_function():
    ensemble = _random_ensemble(7)
    x = _ladder(100, 7).reshape(-1, len(BASE_FEATURES))
    with torch.inference_mode():
        before = ensemble(x)
    rescaled = _random_ensemble(7)
    xf = np.random.default_rng(7).normal(1.0, 3.0, (500, len(BASE_FEATURES))).astype(np.float32)
    restandardise(rescaled, xf)
    with torch.inference_mode():
        after = rescaled(x)
    for key in ("p_loss", "p_loss_lo", "p_loss_hi", "p_dup"):
        np.testing.assert_allclose(after[key].numpy(), before[key].numpy(), atol=1e-4)  # float32, big weights
    wide = add_inputs(ensemble, FEATURES)
    xw = torch.cat([x, torch.zeros(len(x), len(FEATURES) - len(BASE_FEATURES))], dim=1)
    with torch.inference_mode():
        widened = wide(xw)
    for key in ("p_loss", "p_loss_lo", "p_loss_hi", "p_dup"):
        np.testing.assert_allclose(widened[key].numpy(), before[key].numpy(), rtol=1e-5, atol=1e-6)
