"""Network impairment models: what NetEm would do to each packet, decided in userspace.

The paper's testbed (Sec. V) used NetEm on the producer's interface: delay D with a Pareto distribution
(``delay 23ms 10ms distribution pareto``) and packet loss L, Bernoulli (``loss 10%``) or Gilbert-Elliott
(``loss gemodel p r 1-h 1-k``). This kernel has no ``netem`` qdisc, so the testbed decides per packet in
an NFQUEUE handler (:mod:`testbed.nfqueue_handler`) with the same models, implemented here as pure,
seedable functions.

Units: delays in ms, loss parameters in percent (0-100) as NetEm's command line takes them.
"""

from __future__ import annotations

import math
import random
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Percent = Annotated[float, Field(ge=0.0, le=100.0)]

# iproute2's pareto.dist holds a Pareto distribution with shape a = 3 (x_m = 1), standardised to mean 0
# and standard deviation 1; NetEm then returns mu + sigma * x. The same standardisation, analytically:
_PARETO_SHAPE = 3.0
_PARETO_MEAN = _PARETO_SHAPE / (_PARETO_SHAPE - 1.0)
_PARETO_SD = math.sqrt(_PARETO_SHAPE / ((_PARETO_SHAPE - 1.0) ** 2 * (_PARETO_SHAPE - 2.0)))


class Delay(BaseModel):
    """Packet delay, as NetEm's ``delay TIME [JITTER] [distribution DIST]``.

    Attributes:
        delay_ms: Mean delay mu, ms (NetEm's TIME; one way, so the RTT grows by about this much).
        jitter_ms: Spread sigma, ms (NetEm's JITTER); 0 = constant delay.
        distribution: ``normal`` or ``pareto`` (NetEm's tables, standardised to mean 0 and sd 1),
            ``uniform`` (mu +- sigma, NetEm's default without a table). Samples below 0 become 0.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    delay_ms: float = Field(0.0, ge=0.0)
    jitter_ms: float = Field(0.0, ge=0.0)
    distribution: Literal["normal", "pareto", "uniform"] = "pareto"

    def sample_ms(self, rng: random.Random) -> float:
        """One packet's delay, ms (>= 0)."""
        if self.jitter_ms == 0.0:
            return self.delay_ms
        if self.distribution == "uniform":
            x = rng.uniform(-1.0, 1.0)
        elif self.distribution == "normal":
            x = rng.gauss(0.0, 1.0)
        else:
            x = (rng.paretovariate(_PARETO_SHAPE) - _PARETO_MEAN) / _PARETO_SD
        return max(0.0, self.delay_ms + self.jitter_ms * x)


class BernoulliLoss(BaseModel):
    """Independent packet loss, NetEm ``loss random PERCENT``.

    Attributes:
        percent: Loss probability L per packet, percent (0-100).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: Literal["bernoulli"] = "bernoulli"
    percent: Percent = 0.0

    @property
    def mean_loss_pct(self) -> float:
        """Long-run loss ratio, percent."""
        return self.percent


class GilbertElliottLoss(BaseModel):
    """Bursty loss: NetEm ``loss gemodel p [r [1-h [1-k]]]`` (all in percent).

    A two-state Markov chain per packet: in the Good state a packet is lost with probability 1-k, in the
    Bad state with probability 1-h; Good -> Bad with probability p, Bad -> Good with probability r. With
    NetEm's defaults (1-h = 100%, 1-k = 0%) every packet in Bad is lost and a loss burst lasts 1/r packets
    on average. Source: NetEm (``man tc-netem``) and Hasslinger & Hohlfeld, "The Gilbert-Elliott model for
    packet loss in real time services on the Internet", MMB 2008.

    Attributes:
        p: P(Good -> Bad) per packet, percent.
        r: P(Bad -> Good) per packet, percent; None = 100 - p (NetEm's default).
        one_minus_h: Loss probability in Bad, percent (NetEm's ``1-h``, default 100).
        one_minus_k: Loss probability in Good, percent (NetEm's ``1-k``, default 0).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: Literal["gilbert-elliott"] = "gilbert-elliott"
    p: Percent
    r: Percent | None = None
    one_minus_h: Percent = 100.0
    one_minus_k: Percent = 0.0

    @model_validator(mode="after")
    def _check(self) -> GilbertElliottLoss:
        if self.r_pct == 0.0 and self.p > 0.0:
            raise ValueError("gilbert-elliott: r = 0 never leaves the Bad state (give r > 0)")
        return self

    @property
    def r_pct(self) -> float:
        """R in percent, with NetEm's default applied."""
        return 100.0 - self.p if self.r is None else self.r

    @property
    def mean_loss_pct(self) -> float:
        """Stationary loss ratio, percent: pi_B (1-h) + pi_G (1-k), pi_B = p / (p + r)."""
        if self.p == 0.0:
            return self.one_minus_k
        pi_bad = self.p / (self.p + self.r_pct)
        return pi_bad * self.one_minus_h + (1.0 - pi_bad) * self.one_minus_k

    @property
    def mean_burst_packets(self) -> float:
        """Mean sojourn in Bad, packets (1/r): the mean loss-burst length when 1-h = 100%, 1-k = 0%."""
        return 100.0 / self.r_pct if self.r_pct > 0 else math.inf


Loss = Annotated[BernoulliLoss | GilbertElliottLoss, Field(discriminator="model")]


class Impairment(BaseModel):
    """What happens to the producer's packets towards the brokers: delay and loss (one direction).

    Attributes:
        delay: Delay model (None = no added delay).
        loss: Loss model (None = no loss).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    delay: Delay | None = None
    loss: Loss | None = None

    @property
    def needs_userspace(self) -> bool:
        """True if a packet handler must run (delay or Gilbert-Elliott); plain Bernoulli loss does not."""
        return (self.delay is not None and (self.delay.delay_ms > 0 or self.delay.jitter_ms > 0)) or (
            isinstance(self.loss, GilbertElliottLoss)
        )

    @property
    def loss_pct(self) -> float:
        """Long-run loss ratio L, percent."""
        return self.loss.mean_loss_pct if self.loss is not None else 0.0

    def describe(self) -> str:
        """NetEm-like one-line description, e.g. ``delay 23ms 10ms pareto loss gemodel 1% 30%``."""
        parts = []
        if self.delay is not None and (self.delay.delay_ms or self.delay.jitter_ms):
            d = self.delay
            parts.append(f"delay {d.delay_ms:g}ms {d.jitter_ms:g}ms {d.distribution}")
        if isinstance(self.loss, BernoulliLoss) and self.loss.percent:
            parts.append(f"loss {self.loss.percent:g}%")
        elif isinstance(self.loss, GilbertElliottLoss):
            g = self.loss
            parts.append(f"loss gemodel {g.p:g}% {g.r_pct:g}% {g.one_minus_h:g}% {g.one_minus_k:g}%")
        return " ".join(parts) or "none"


class LossProcess:
    """Per-packet loss decisions of a :data:`Loss` model, with its Gilbert-Elliott state.

    Args:
        loss: The model (None = never drop).
        rng: Random source (seed it for reproducible decisions).
    """

    def __init__(self, loss: BernoulliLoss | GilbertElliottLoss | None, rng: random.Random) -> None:
        self.loss = loss
        self.rng = rng
        self.bad = False

    def drop(self) -> bool:
        """Decide one packet: True = drop it. Gilbert-Elliott decides by the current state, then moves."""
        loss, rnd = self.loss, self.rng.random
        if loss is None:
            return False
        if isinstance(loss, BernoulliLoss):
            return loss.percent > 0 and rnd() * 100.0 < loss.percent
        if self.bad:
            lost = rnd() * 100.0 < loss.one_minus_h
            if rnd() * 100.0 < loss.r_pct:
                self.bad = False
        else:
            lost = rnd() * 100.0 < loss.one_minus_k
            if rnd() * 100.0 < loss.p:
                self.bad = True
        return lost
