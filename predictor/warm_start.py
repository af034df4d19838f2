"""Warm start of a retrained model: widen the parent's inputs, refit its standardisation, fine-tune.

Steps 2 and 4 of the retraining (:mod:`predictor.retrain`): every ensemble member starts from the
parent's weights; a parent that reads fewer inputs than :data:`~predictor.features.FEATURES` gets the
missing ones with zero weights (:func:`add_inputs`), the input standardisation is refitted to the new
training rows with the function kept (:func:`restandardise`), and all members are fine-tuned together
on weighted minibatches (:func:`fine_tune`).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from predictor.features import ALLOWED, BASE_FEATURES, FEATURES


def add_inputs(ensemble: Any, features: tuple[str, ...] = FEATURES) -> Any:
    """Return a copy of ``ensemble`` that reads ``features``, computing what ``ensemble`` computed.

    Inputs the ensemble already reads keep their weights, standardisation and clamp range; a new input
    gets zero first-layer weights, standardisation (0, 1) and the clamp range of its pre-scaled default
    (:data:`~predictor.features.OPTIONAL`), so the function is unchanged until fine-tuning
    (:func:`restandardise` widens the range to the training rows').

    Args:
        ensemble: A :class:`~predictor.nets.Ensemble`; not modified.
        features: The inputs of the copy, in order; must include every input of ``ensemble``.

    Raises:
        ValueError: if ``features`` lacks an input ``ensemble`` reads.
    """
    import torch

    from predictor.nets import Ensemble
    from predictor.train import features_for

    old = tuple(ensemble.spec.features)
    if old == tuple(features):
        return copy.deepcopy(ensemble)
    if not set(old) <= set(features):
        raise ValueError(f"cannot drop inputs {sorted(set(old) - set(features))} of a warm-started model")
    spec = dataclasses.replace(ensemble.spec, features=tuple(features))
    wide = Ensemble(spec)
    keep = [features.index(f) for f in old]
    lowest = pd.DataFrame([{f: ALLOWED[f][0] for f in BASE_FEATURES}])  # defaults for the optional ones
    default = torch.from_numpy(features_for(spec, lowest)[0])
    state, target = ensemble.state_dict(), wide.state_dict()
    with torch.no_grad():
        for key, value in state.items():
            new = target[key]
            if new.shape == value.shape:
                new.copy_(value)
            elif key in ("x_shift", "x_scale", "x_lo", "x_hi"):
                start = {"x_shift": torch.zeros_like(new), "x_scale": torch.ones_like(new)}
                new.copy_(start.get(key, default))
                new[keep] = value
            elif ".mono." in key:  # the monotone timeout branch's first layer: every input but the timeout
                new.zero_()
                new[:, _without_timeout(features, old)] = value
            else:  # a member's first layer: (hidden, inputs)
                new.zero_()
                new[:, keep] = value
    wide.load_state_dict(target)
    wide.eval()
    return wide


def _without_timeout(features: tuple[str, ...], old: tuple[str, ...]) -> list[int]:
    """Return where ``old``'s inputs but ``message_timeout_ms`` sit among ``features``' but it."""
    rest = [f for f in features if f != "message_timeout_ms"]
    return [rest.index(f) for f in old if f != "message_timeout_ms"]


def restandardise(ensemble: Any, xf: np.ndarray) -> None:
    """Refit the input standardisation to pre-scaled features ``xf`` (n, 7), keeping the function.

    In place: every member's first layer is rescaled so the ensemble computes the same as before.

    With z = (x - s) / c the layer computes W z + b; for the new (s', c') it gets W' = W diag(c' / c)
    and b' = b + W (s' - s) / c. The clamp range (``x_lo``, ``x_hi``) becomes the union of the old one
    and ``xf``'s.
    """
    import torch

    if ensemble.spec.arch == "paper":
        shift, span = xf.min(0), xf.max(0) - xf.min(0)
    else:
        shift, span = xf.mean(0), xf.std(0)
    new_shift = torch.from_numpy(shift.astype(np.float32))
    new_scale = torch.from_numpy(np.where(span > 0, span, 1.0).astype(np.float32))
    old_shift, old_scale = ensemble.x_shift.clone(), ensemble.x_scale.clone()
    with torch.no_grad():
        for member in ensemble.members:
            first = member.net[0]
            w = first.weight.clone()
            first.bias.add_(w @ ((new_shift - old_shift) / old_scale))
            first.weight.mul_((new_scale / old_scale)[None, :])
            i = getattr(member, "timeout_index", None)
            if i is not None:  # the monotone branch: its first layer without the timeout, and its steps
                rest = [j for j in range(len(new_shift)) if j != i]
                first = member.mono[0]
                w = first.weight.clone()
                first.bias.add_(w @ ((new_shift[rest] - old_shift[rest]) / old_scale[rest]))
                first.weight.mul_((new_scale[rest] / old_scale[rest])[None, :])
                # a step at t_j = s + c * centre (pre-scaled units) stays there: centre' = (t_j - s') / c'
                member.step_centres.copy_(
                    (old_shift[i] + old_scale[i] * member.step_centres - new_shift[i]) / new_scale[i]
                )
                member.step_width.mul_(old_scale[i] / new_scale[i])
        ensemble.x_shift.copy_(new_shift)
        ensemble.x_scale.copy_(new_scale)
        lo = torch.from_numpy(xf.min(0).astype(np.float32))
        hi = torch.from_numpy(xf.max(0).astype(np.float32))
        ensemble.x_lo.copy_(torch.minimum(ensemble.x_lo, lo))
        ensemble.x_hi.copy_(torch.maximum(ensemble.x_hi, hi))


def fine_tune(
    ensemble: Any,
    x: Any,
    y: Any,
    weights: np.ndarray,
    *,
    seed: int,
    steps: int,
    batch_size: int,
    lr: float,
) -> None:
    """Fine-tune all members at once (``torch.func.vmap`` over their stacked weights), in place.

    Member k draws its own minibatches (generator seeded ``seed * 1000 + k``); each member's gradient is
    that of its own mean loss (:func:`predictor.train._loss`), as if trained alone, but the K members
    share every tensor operation, which is what makes a step cheap on 2 cores.
    """
    import torch
    from torch.func import functional_call, stack_module_state, vmap

    from predictor.train import _loss

    spec = ensemble.spec
    members = list(ensemble.members)
    k = len(members)
    probabilities = torch.from_numpy(weights.astype(np.float64))
    idx = torch.stack(
        [
            torch.multinomial(
                probabilities,
                steps * batch_size,
                replacement=True,
                generator=torch.Generator().manual_seed(seed * 1000 + i),
            )
            for i in range(k)
        ]
    )
    params, buffers = stack_module_state(members)  # leaves, requires_grad
    template = copy.deepcopy(members[0]).to("meta")

    def one(p: dict[str, Any], b: dict[str, Any], xb: Any) -> dict[str, Any]:
        return functional_call(template, (p, b), (xb,))

    forward = vmap(one)
    opt = torch.optim.AdamW(params.values(), lr=lr, weight_decay=spec.weight_decay, foreach=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    for step in range(steps):
        rows = idx[:, step * batch_size : (step + 1) * batch_size]  # (K, B)
        out = forward(params, buffers, x[rows])
        flat = {name: v.reshape(-1) for name, v in out.items()}
        loss = _loss(spec, flat, y[rows].reshape(-1, y.shape[1])) * k
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        for i, member in enumerate(members):
            state = {name: v[i].detach().clone() for name, v in (*params.items(), *buffers.items())}
            member.load_state_dict(state)  # buffers too: the monotone branch's steps
            member.eval()
    ensemble.eval()
