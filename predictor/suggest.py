"""Configuration suggestions: the smallest change whose predicted gamma meets the target (paper Sec. V).

The paper moves each parameter stepwise forward or backward through the prediction model until the
predicted gamma (Eq. 2) meets the user's requirement. We evaluate the whole grid of candidate
configurations in one vectorised :meth:`~predictor.model.Predictor.predict` call and pick, among those
meeting the target, the smallest change: fewest parameters changed, then fewest grid steps, then the
highest gamma. Parameters: ``acks`` (0/1), ``batch.num.messages``, ``message.timeout.ms``, the polling
interval ``poll_interval_ms`` (only when L <= :data:`POLL_SEARCH_MAX_LOSS_PCT`, the measured regime)
and the number of producers ``producers`` (scaling, Sec. IV-C: when each producer takes less load, more
producers keep the stream's arrival rate).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from kafka_plumbing.errors import ConfigError
from predictor.confidence import NO_SCORE, Confidence, confidence
from predictor.counterfactual import CONFIGURATION_FEATURES
from predictor.features import FEATURES, OPTIONAL, acks_number, check_value
from predictor.kpi import Weights, gamma, mu, phi
from predictor.model import Predictor, default_predictor

BATCH_STEPS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
TIMEOUT_STEPS_MS = (500, 1000, 1500, 2000, 3000, 4000, 5000, 7000)
POLL_STEPS_MS = (0, 10, 20, 30, 40, 50, 60, 70, 80, 90)
MAX_PRODUCERS = 8
POLL_SEARCH_MAX_LOSS_PCT = 1.0
"""The polling interval was measured only without injected packet loss (pollTime, Fig. 6, Sec. IV-C: an
overloaded producer in a good network); above this L it is not searched (the model would extrapolate)."""
GAMMA_SLACK = 0.02
"""When no configuration meets the target, take the smallest change whose gamma is this close to the best."""
"""Search grid: the measured ranges of the training data (the model does not extrapolate beyond them)."""

_CONFIG_KEYS = {
    "acks": "acks",
    "request.required.acks": "acks",
    "batch.num.messages": "batch_num_messages",
    "batch_size": "batch_num_messages",
    "batch_num_messages": "batch_num_messages",
    "message.timeout.ms": "message_timeout_ms",
    "delivery.timeout.ms": "message_timeout_ms",
    "message_timeout_ms": "message_timeout_ms",
    "poll_interval_ms": "poll_interval_ms",
    "producers": "producers",
    "message_size_bytes": "message_size_bytes",
}
_NETWORK_KEYS = (
    "packet_loss_pct",
    "delay_ms",
    "message_size_bytes",
    "tcp_timeout_pct",
    "arrival_rate_msgs_per_s",
)
KNOB_NAMES = {
    "acks": "acks",
    "batch_num_messages": "batch.num.messages",
    "message_timeout_ms": "message.timeout.ms",
    "poll_interval_ms": "poll_interval_ms",
    "producers": "producers",
}
"""Searched knob -> the key used in :attr:`Suggestion.changes` (librdkafka names where one exists)."""


class Predicted(NamedTuple):
    """Predicted P_l, P_d (fractions 0-1) and gamma (0-1) of one configuration."""

    p_loss: float
    p_dup: float
    gamma: float


@dataclass(frozen=True)
class Suggestion:
    """A configuration change and what the model predicts it does.

    Attributes:
        changes: Changed keys -> new values, e.g. ``{"batch.num.messages": 4}`` (librdkafka names;
            ``poll_interval_ms`` and ``producers`` for the polling interval and scaling).
        predicted_before: (P_l, P_d, gamma) of the current configuration.
        predicted_after: (P_l, P_d, gamma) after the change.
        explanation: e.g. ``"raise batch.num.messages 1 -> 4: predicted P_l 0.63 -> 0.04, gamma 0.71 ->
            0.93"``.
        meets_target: False when no searched configuration reaches the target; then this is the one with
            the highest predicted gamma.
        details: phi, mu, throughput and interval before/after, and the target.
        confidence: How sure it is (:mod:`predictor.confidence`): the model's counterfactual MAE(P_l)
            and whether the model was scored on such a configuration (else "uncalibrated"); the
            explanation ends with it in words.
    """

    changes: dict[str, object]
    predicted_before: Predicted
    predicted_after: Predicted
    explanation: str
    meets_target: bool = True
    details: dict[str, Any] = field(default_factory=dict)
    confidence: Confidence = NO_SCORE

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict of every attribute."""
        return {
            "changes": dict(self.changes),
            "predicted_before": self.predicted_before._asdict(),
            "predicted_after": self.predicted_after._asdict(),
            "explanation": self.explanation,
            "meets_target": self.meets_target,
            "details": self.details,
            "confidence": {
                "loco_mae_p_loss": self.confidence.loco_mae_p_loss,
                "calibrated": self.confidence.calibrated,
                "folds": self.confidence.folds,
            },
        }


def _current(config: Mapping[str, Any], network: Mapping[str, Any]) -> tuple[dict[str, float], float | None]:
    """Merge config and network into feature values + producers; return them and the arrival rate."""
    cur: dict[str, Any] = {"poll_interval_ms": 0.0, "producers": 1}
    for key, value in config.items():
        if key not in _CONFIG_KEYS or value is None:
            continue
        cur[_CONFIG_KEYS[key]] = value
    for key in _NETWORK_KEYS:
        if key in network and network[key] is not None:
            cur[key] = network[key]
    cur = {**OPTIONAL, **cur}  # a network without the retransmission-timeout rate: its default
    missing = [KNOB_NAMES.get(f, f) for f in FEATURES if f not in cur]
    if missing:
        raise ConfigError(
            f"suggest: missing {', '.join(missing)} (config keys: acks, batch.num.messages, "
            "message.timeout.ms, poll_interval_ms, producers; network keys: packet_loss_pct, delay_ms, "
            "message_size_bytes)"
        )
    out = {f: check_value(f, acks_number(cur[f]) if f == "acks" else cur[f]) for f in FEATURES}
    producers = cur["producers"]
    if isinstance(producers, bool) or not isinstance(producers, int | float) or producers < 1:
        raise ConfigError(f"producers={producers!r}: must be a whole number >= 1")
    out["producers"] = float(int(producers))
    rate = cur.get("arrival_rate_msgs_per_s")
    if rate is not None and not (isinstance(rate, int | float) and rate > 0 and math.isfinite(rate)):
        raise ConfigError(f"arrival_rate_msgs_per_s={rate!r}: must be > 0 messages/s")
    return out, (float(rate) if rate is not None else None)


def _steps(grid: tuple[float, ...], a: float, b: float) -> int:
    """Grid steps between values a and b (the current value is inserted into the grid)."""
    values = sorted({*grid, a, b})
    return abs(values.index(a) - values.index(b))


def _detail(
    pred: pd.DataFrame, tp: np.ndarray, i: int, phi_v: float, mu_v: float, producers: float
) -> dict[str, float]:
    return {
        "phi": float(phi_v),
        "mu": float(mu_v),
        "producers": float(producers),
        "throughput_msgs_per_s": float(tp[i]),  # the model's, or scaled to the measured one
        "p_loss_lo": float(pred.at[i, "p_loss_lo"]),
        "p_loss_hi": float(pred.at[i, "p_loss_hi"]),
    }


def _verb(knob: str, a: float, b: float) -> str:
    name = KNOB_NAMES[knob]
    if knob == "acks":
        return f"set acks {a:g} -> {b:g}"
    if knob == "producers":
        return f"scale producers {a:g} -> {b:g}"
    return f"{'raise' if b > a else 'lower'} {name} {a:g} -> {b:g}"


def suggest(
    config: Mapping[str, Any],
    network: Mapping[str, Any],
    target_gamma: float,
    weights: Weights | None = None,
    predictor: Predictor | None = None,
    scale_producers: bool = True,
) -> Suggestion | None:
    """Find the smallest configuration change whose predicted gamma meets ``target_gamma``.

    Args:
        config: Producer configuration: ``acks`` (0, 1, all, -1), ``batch.num.messages``,
            ``message.timeout.ms`` (librdkafka names; ``batch_num_messages`` / ``message_timeout_ms`` also
            accepted), ``poll_interval_ms`` (default 0 = full load), ``producers`` (N_p, default 1).
            Not modified.
        network: ``packet_loss_pct`` (L, percent), ``delay_ms`` (D, ms), ``message_size_bytes`` (M; may
            also be in ``config``), optional ``tcp_timeout_pct`` (TCP retransmission timeouts per 100
            segments, percent; default 0), optional ``arrival_rate_msgs_per_s`` (lambda of the whole stream;
            default: what the current configuration serves, N_p * T), optional
            ``measured_throughput_msgs_per_s`` (T of one producer with the current configuration as a
            saturated window measured it, :func:`predictor.kpi.measured_throughput`; the model's T of
            every candidate is scaled by measured / predicted of the current one, so the producer count
            is sized on the deployment's throughput, not the training network's).
        target_gamma: Required gamma in (0, 1].
        weights: Eq. 2 weights (default 0.3, 0.3, 0.3, 0.1; see :meth:`Weights.preset`).
        predictor: Model (default: :func:`~predictor.model.default_predictor`).
        scale_producers: Also search the number of producers (1 to :data:`MAX_PRODUCERS`); False keeps
            the current count (an application that cannot scale, e.g. one producer per process).

    Returns:
        ``None`` if the current configuration already meets the target or no change raises gamma;
        otherwise the smallest change meeting the target, or (``meets_target=False``) the smallest
        change whose predicted gamma is within :data:`GAMMA_SLACK` of the highest found.

    Raises:
        ConfigError: if a value is missing or out of range, or the target is not in (0, 1].
    """
    if not (isinstance(target_gamma, int | float) and 0.0 < target_gamma <= 1.0):
        raise ConfigError(f"target gamma {target_gamma!r}: allowed range is (0, 1]")
    w = weights or Weights()
    model = predictor or default_predictor()
    cur, rate = _current(config, network)
    axes = {
        "acks": sorted({0.0, 1.0}),
        "batch_num_messages": sorted({*map(float, BATCH_STEPS), cur["batch_num_messages"]}),
        "message_timeout_ms": sorted({*map(float, TIMEOUT_STEPS_MS), cur["message_timeout_ms"]}),
        "poll_interval_ms": sorted({*map(float, POLL_STEPS_MS), cur["poll_interval_ms"]})
        if cur["packet_loss_pct"] <= POLL_SEARCH_MAX_LOSS_PCT
        else [cur["poll_interval_ms"]],
    }
    grid = pd.DataFrame(list(itertools.product(*axes.values())), columns=list(axes))
    for f in FEATURES:
        if f not in axes:
            grid[f] = cur[f]
    pred = model.predict(grid[list(FEATURES)])
    is_cur = np.logical_and.reduce([grid[k].to_numpy() == cur[k] for k in axes])
    i_cur = int(np.flatnonzero(is_cur)[0])
    tp = pred["throughput_msgs_per_s"].to_numpy()
    measured = network.get("measured_throughput_msgs_per_s")
    if measured is not None:
        if isinstance(measured, bool) or not isinstance(measured, int | float) or not measured > 0:
            raise ConfigError(f"measured_throughput_msgs_per_s={measured!r}: must be > 0 messages/s")
        if math.isfinite(measured) and tp[i_cur] > 0:
            tp = tp * (float(measured) / tp[i_cur])  # the deployment's level, the model's relative effects
    lam = rate if rate is not None else cur["producers"] * tp[i_cur]
    n_prod = (
        np.arange(1, max(MAX_PRODUCERS, int(cur["producers"])) + 1, dtype=np.float64)
        if scale_producers
        else np.array([float(int(cur["producers"]))])
    )
    p_l, p_d = pred["p_loss"].to_numpy(), pred["p_dup"].to_numpy()
    # candidates = grid rows x producer counts, shape (rows, producers)
    phis = phi(tp[:, None], lam, p_l[:, None], n_prod[None, :])
    mus = mu(tp[:, None], lam, n_prod[None, :])
    gam = gamma(
        phis, mus, np.broadcast_to(p_l[:, None], phis.shape), np.broadcast_to(p_d[:, None], phis.shape), w
    )
    j_cur = int(cur["producers"]) - 1 if scale_producers else 0
    g_cur = float(gam[i_cur, j_cur])
    before = Predicted(float(p_l[i_cur]), float(p_d[i_cur]), g_cur)
    if g_cur >= target_gamma:
        return None
    # cost of each candidate: (parameters changed, grid steps)
    n_changed = np.zeros(gam.shape)
    steps = np.zeros(gam.shape)
    for k, values in axes.items():
        col = grid[k].to_numpy()
        changed = (col != cur[k]).astype(float)
        n_changed += changed[:, None]
        steps += np.array([_steps(tuple(values), cur[k], v) for v in col], dtype=float)[:, None]
    prod_steps = np.abs(n_prod - cur["producers"])
    n_changed += (prod_steps > 0)[None, :]
    steps += prod_steps[None, :]
    meets = gam >= target_gamma
    if meets.any():
        order = np.lexsort((-gam[meets], steps[meets], n_changed[meets]))
        idx = np.argwhere(meets)[order[0]]
    else:
        best = float(gam.max())
        if best <= g_cur + 1e-9:
            return None
        # target out of reach: the smallest change within GAMMA_SLACK of the best predicted gamma
        near = gam >= best - GAMMA_SLACK
        order = np.lexsort((-gam[near], steps[near], n_changed[near]))
        idx = np.argwhere(near)[order[0]]
    i, j = int(idx[0]), int(idx[1])
    after = Predicted(float(p_l[i]), float(p_d[i]), float(gam[i, j]))
    new = {k: float(grid.at[i, k]) for k in axes} | {"producers": float(n_prod[j])}
    changes: dict[str, object] = {}
    verbs = []
    for k in (*axes, "producers"):
        if new[k] != cur[k]:
            changes[KNOB_NAMES[k]] = int(new[k]) if float(new[k]).is_integer() else new[k]
            verbs.append(_verb(k, cur[k], new[k]))
    if not changes:  # the current configuration is already within GAMMA_SLACK of the best reachable
        return None
    text = (
        f"{', '.join(verbs)}: predicted P_l {before.p_loss:.2f} -> {after.p_loss:.2f}, "
        f"gamma {before.gamma:.2f} -> {after.gamma:.2f}"
    )
    if not meets.any():
        text += f" (best found; target {target_gamma:.2f} not reachable)"
    sure = confidence(getattr(model, "card", None), {k: new[k] for k in CONFIGURATION_FEATURES})
    text += f" ({sure.words()})"
    details = {
        "target_gamma": target_gamma,
        "weights": [w.w1, w.w2, w.w3, w.w4],
        "arrival_rate_msgs_per_s": float(lam),
        "before": _detail(pred, tp, i_cur, phis[i_cur, j_cur], mus[i_cur, j_cur], cur["producers"]),
        "after": _detail(pred, tp, i, phis[i, j], mus[i, j], n_prod[j]),
    }
    return Suggestion(changes, before, after, text, bool(meets.any()), details, sure)
