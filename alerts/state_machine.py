"""The per-alert state machine: inactive -> pending -> firing -> resolved, without flapping.

One :class:`AlertStateMachine` exists per (alertname, topic, tier). It is fed one observation at a
time -- ``True`` (bad), ``False`` (good) or ``None`` (cannot judge: missing numbers; changes nothing) --
and returns a :class:`Transition` only when the alert starts firing or resolves::

                     bad, bad streak < for
                     +---+
                     |   v
    +----------+ bad +---------+ bad, bad streak = for +--------+ bad: no event (dedup),
    | inactive |---->| pending |---------------------->| firing |      good streak := 0
    +----------+     +---------+       => FIRE          +--------+ good, good streak < keep:
         ^   ^  good     |                               |  ^  |      keeps firing (hysteresis)
         |   +-----------+                               |  +--+
         |                       good, good streak = keep |
         | behaves as inactive   => RESOLVE (once)        v
         +--------------------------------------------+----------+
                                                      | resolved |
                                                      +----------+

    (with for = 1 a bad observation goes from inactive/resolved straight to firing, => FIRE)

    state      observation  condition                 next      emits
    ---------  -----------  ------------------------  --------  -------
    inactive   bad          bad streak + 1 < for      pending   -
    inactive   bad          bad streak + 1 >= for     firing    FIRE
    pending    bad          bad streak + 1 >= for     firing    FIRE
    pending    good         -                         inactive  -
    firing     bad          -                         firing    -       (good streak := 0)
    firing     good         good streak + 1 < keep    firing    -
    firing     good         good streak + 1 >= keep   resolved  RESOLVE
    resolved   bad / good   as inactive               ...       ...
    any        unknown      -                         same      -

* ``for`` (``for_count``, >= 1): consecutive bad observations needed to fire; with 1 an alert fires on
  its first bad observation (inactive/resolved -> firing directly, no pending step).
* ``keep`` (``keep_firing_count``, >= 1): consecutive good observations needed to resolve; a bad one
  while firing resets the good streak. Combined with the rules' value hysteresis (e.g. gamma must
  reach target + margin to count as good while firing) an alert does not flap on a noisy boundary.
* Deduplication: a firing alert observed bad again yields no transition; re-sending its firing event
  is idempotent downstream (same fingerprint and ``starts_at_ms``).
* Resolution is emitted exactly once per episode; ``resolved`` behaves like ``inactive`` afterwards
  (a new bad streak starts a new episode with a new ``starts_at_ms``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class AlertState(StrEnum):
    """Where one alert stands."""

    INACTIVE = "inactive"
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


class Transition(StrEnum):
    """What the caller must emit."""

    FIRE = "fire"
    RESOLVE = "resolve"


@dataclass
class AlertStateMachine:
    """Counts bad and good streaks and moves between :class:`AlertState` values (see the module doc).

    Args:
        for_count: Consecutive bad observations before firing (>= 1).
        keep_firing_count: Consecutive good observations before a firing alert resolves (>= 1).

    Raises:
        ValueError: if a count is below 1.
    """

    for_count: int = 1
    keep_firing_count: int = 1
    state: AlertState = AlertState.INACTIVE
    bad_streak: int = 0
    good_streak: int = 0

    def __post_init__(self) -> None:
        if self.for_count < 1 or self.keep_firing_count < 1:
            raise ValueError(
                f"for_count ({self.for_count}) and keep_firing_count ({self.keep_firing_count}) must be >= 1"
            )

    @property
    def firing(self) -> bool:
        """True while the alert is firing."""
        return self.state is AlertState.FIRING

    def step(self, bad: bool | None) -> Transition | None:
        """Feed one observation; return FIRE or RESOLVE on those transitions, else None.

        Args:
            bad: True (condition holds), False (it does not), None (unknown: nothing changes).
        """
        if bad is None:
            return None
        if self.state is AlertState.FIRING:
            if bad:
                self.good_streak = 0
                return None
            self.good_streak += 1
            if self.good_streak >= self.keep_firing_count:
                self.state = AlertState.RESOLVED
                self.good_streak = self.bad_streak = 0
                return Transition.RESOLVE
            return None
        # inactive, pending or resolved
        if not bad:
            self.bad_streak = 0
            if self.state is AlertState.PENDING:
                self.state = AlertState.INACTIVE
            return None
        self.bad_streak += 1
        if self.bad_streak >= self.for_count:
            self.state = AlertState.FIRING
            self.bad_streak = self.good_streak = 0
            return Transition.FIRE
        self.state = AlertState.PENDING
        return None
