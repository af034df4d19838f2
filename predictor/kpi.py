"""The weighted KPI gamma of Wu, Shang, Wolter 2020 (Sec. IV, Eq. 2) and its normalised terms phi, mu.

    gamma = w1 * phi + w2 * mu + w3 * (1 - P_l) + w4 * (1 - P_d),   w1 + w2 + w3 + w4 = 1

The paper names phi "the utilization of network bandwidth" and mu "the mean service rate of a Kafka
producer" and leaves their scale to its reference [6]. Here both are normalised to [0, 1] from the
predictor's per-producer throughput T (messages/s, ``throughput_msgs_per_s``), the number of producers
N_p and the stream's arrival rate lambda (messages/s offered by the upstream application; paper Sec.
IV-C: lambda = 1/delta per producer, N_p / delta in total):

* ``mu = min(1, N_p * T / lambda)``: the producers' service rate relative to the arrival rate (the
  inverse of the queueing load rho = lambda / (N_p * T)); 1 means the producers keep up, below 1 the
  backlog grows and messages wait until ``message.timeout.ms`` expires them (Sec. IV-B, IV-C).
* ``phi = min(1, N_p * T * (1 - P_l) / lambda)``: the bandwidth the stream needs (lambda * M bytes/s)
  against the bandwidth that carries delivered messages (N_p * T * (1 - P_l) * M bytes/s); M cancels.

When lambda is unknown, callers use the current configuration's N_p * T (the load the producers take
today), so mu = 1 and phi = 1 - P_l for the current configuration.

**Measured throughput.** T is the model's, learned where the model was trained; on another network it
can be far off (the shipped model expects about 1,600 messages/s from one producer at L = 15%, D = 30
ms, M = 220 bytes; our testbed's producer delivered about 170). A window whose producers lost at least
:data:`SATURATION_LOSS` of what they were given ran at capacity, so it measures T of its configuration
on its network: :func:`measured_throughput`. Callers then use it in place of the model's T for that
configuration, and scale the model's T of other configurations by the same factor (the model's relative
effects of B, acks, T_o are kept; only its level is taken from the deployment).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from kafka_plumbing.errors import ConfigError

ArrayLike = float | npt.NDArray[np.float64]

SATURATION_LOSS = 0.05
"""R_l (fraction) from which a window's producers count as saturated: what they delivered is their
throughput T (:func:`measured_throughput`). Below it they kept up (or nearly), which bounds T from below
only."""


@dataclass(frozen=True)
class Weights:
    """The weights w1..w4 of Eq. 2 (each in [0, 1], sum 1).

    Attributes:
        w1: Weight of phi (bandwidth utilisation).
        w2: Weight of mu (normalised service rate).
        w3: Weight of 1 - P_l (no loss).
        w4: Weight of 1 - P_d (no duplicates).

    Raises:
        ConfigError: if a weight is outside [0, 1] or the sum differs from 1 by more than 1e-6.
    """

    w1: float = 0.3
    w2: float = 0.3
    w3: float = 0.3
    w4: float = 0.1

    PRESETS: ClassVar[dict[str, tuple[float, float, float, float]]] = {
        "default": (0.3, 0.3, 0.3, 0.1),  # Sec. IV: duplicates are tolerable for most applications
        "social": (0.4, 0.3, 0.2, 0.1),  # Table II: messages from social media
        "weblog": (0.1, 0.1, 0.7, 0.1),  # Table II: web server access records
        "game": (0.2, 0.4, 0.2, 0.2),  # Table II: game traffic messages
    }

    def __post_init__(self) -> None:
        ws = astuple(self)
        if any(not 0.0 <= w <= 1.0 for w in ws):
            raise ConfigError(f"weights {ws}: every weight w1..w4 must be in [0, 1]")
        if abs(sum(ws) - 1.0) > 1e-6:
            raise ConfigError(f"weights {ws}: w1 + w2 + w3 + w4 must be 1 (Eq. 2), got {sum(ws):g}")

    @classmethod
    def preset(cls, stream: str) -> Weights:
        """Table II weights for a stream type: ``social``, ``weblog``, ``game`` or ``default``.

        Raises:
            ConfigError: for any other name.
        """
        if stream not in cls.PRESETS:
            raise ConfigError(f"stream type {stream!r}: allowed values are {', '.join(cls.PRESETS)}")
        return cls(*cls.PRESETS[stream])


def mu(
    throughput_msgs_per_s: ArrayLike, arrival_rate_msgs_per_s: ArrayLike, producers: ArrayLike = 1
) -> ArrayLike:
    """Normalised service rate ``min(1, N_p * T / lambda)`` in [0, 1] (see the module docstring).

    Args:
        throughput_msgs_per_s: Predicted throughput T of one producer, messages/s.
        arrival_rate_msgs_per_s: Arrival rate lambda of the whole stream, messages/s (> 0).
        producers: Number of producers N_p sharing the stream.

    Raises:
        ConfigError: if the arrival rate is not positive.
    """
    lam = np.asarray(arrival_rate_msgs_per_s, dtype=np.float64)
    if np.any(~(lam > 0)):
        raise ConfigError("arrival rate lambda must be > 0 messages/s")
    out = np.clip(np.asarray(producers) * np.asarray(throughput_msgs_per_s) / lam, 0.0, 1.0)
    return float(out) if out.ndim == 0 else out


def phi(
    throughput_msgs_per_s: ArrayLike,
    arrival_rate_msgs_per_s: ArrayLike,
    p_loss: ArrayLike,
    producers: ArrayLike = 1,
) -> ArrayLike:
    """Bandwidth utilisation ``min(1, N_p * T * (1 - P_l) / lambda)`` in [0, 1] (see the module docstring).

    Args:
        throughput_msgs_per_s: Predicted throughput T of one producer, messages/s.
        arrival_rate_msgs_per_s: Arrival rate lambda of the whole stream, messages/s (> 0).
        p_loss: P_l, fraction 0-1.
        producers: Number of producers N_p.

    Raises:
        ConfigError: if the arrival rate is not positive.
    """
    served = mu(throughput_msgs_per_s, arrival_rate_msgs_per_s, producers)
    out = np.clip(np.asarray(served) * (1.0 - np.asarray(p_loss)), 0.0, 1.0)
    return float(out) if out.ndim == 0 else out


def gamma(
    phi: ArrayLike, mu: ArrayLike, p_loss: ArrayLike, p_dup: ArrayLike, weights: Weights | None = None
) -> ArrayLike:
    """Eq. 2: ``gamma = w1 * phi + w2 * mu + w3 * (1 - P_l) + w4 * (1 - P_d)``, in [0, 1].

    Args:
        phi: Bandwidth utilisation, 0-1.
        mu: Normalised service rate, 0-1.
        p_loss: P_l, fraction 0-1.
        p_dup: P_d, fraction 0-1.
        weights: w1..w4 (default 0.3, 0.3, 0.3, 0.1).

    Returns:
        gamma as a float (or an array for array inputs).

    Raises:
        ConfigError: if an input is outside [0, 1].
    """
    w = weights or Weights()
    for name, v in (("phi", phi), ("mu", mu), ("p_loss", p_loss), ("p_dup", p_dup)):
        a = np.asarray(v, dtype=np.float64)
        if np.any(~((a >= 0.0) & (a <= 1.0))):
            raise ConfigError(f"gamma: {name} must be in [0, 1], got {v!r}")
    out = (
        w.w1 * np.asarray(phi)
        + w.w2 * np.asarray(mu)
        + w.w3 * (1.0 - np.asarray(p_loss))
        + w.w4 * (1.0 - np.asarray(p_dup))
    )
    return float(out) if np.ndim(out) == 0 else out


def measured_throughput(
    sent: ArrayLike, window_s: ArrayLike, loss_rate: ArrayLike, producers: ArrayLike = 1
) -> ArrayLike:
    """Throughput T of one producer as a window measured it, messages/s; NaN where it does not measure it.

    ``T = sent * (1 - R_l) / (window_s * N_p)``: what each producer delivered, when the window's R_l is at
    least :data:`SATURATION_LOSS` (the producers were given more than they could deliver, so this is
    their capacity with the window's configuration on its network). Elsewhere NaN: a window that kept
    up only shows T >= that rate.

    Args:
        sent: Messages the producers sent in the window (the audit's ``sent``).
        window_s: Window length, s (> 0).
        loss_rate: R_l, fraction 0-1.
        producers: N_p, the window's audited producers (>= 1).

    Returns:
        T in messages/s (a float or an array like the inputs; NaN where not measured or inputs invalid).
    """
    sent_a, win, r_l, n_p = (np.asarray(x, dtype=np.float64) for x in (sent, window_s, loss_rate, producers))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = sent_a * (1.0 - r_l) / (win * np.maximum(n_p, 1.0))
    ok = (r_l >= SATURATION_LOSS) & (r_l <= 1.0) & (win > 0) & (sent_a > 0) & np.isfinite(t)
    out = np.where(ok, t, np.nan)
    return float(out) if out.ndim == 0 else out
