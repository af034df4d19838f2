"""How often a recovery may happen: at most N times within a sliding window of W seconds.

The audit consumer recovers from a fenced producer and from a failed input consumer by starting over
from the committed state. Once in a while that is the broker's doing (a coordinator that timed a
transaction out, a group coordinator that moved); again and again, it is a second instance with the
same ids, and recovering only fights it. A :class:`RecoveryBudget` tells the two apart.
"""

from __future__ import annotations

import time


class RecoveryBudget:
    """At most ``times`` recoveries within any ``window_s`` seconds (monotonic clock).

    Args:
        times: Recoveries allowed per window (>= 1).
        window_s: Length of the sliding window, s.

    Raises:
        ValueError: if ``times`` < 1 or ``window_s`` <= 0.
    """

    def __init__(self, times: int, window_s: float) -> None:
        if times < 1 or window_s <= 0:
            raise ValueError(f"a recovery budget needs times >= 1 and window_s > 0, got {times}, {window_s}")
        self.times = times
        self.window_s = window_s
        self._spent_at: list[float] = []  # monotonic times of the recoveries within the window, s

    @property
    def spent(self) -> int:
        """Recoveries counted in the window as of the last :meth:`spend`."""
        return len(self._spent_at)

    def spend(self) -> bool:
        """Count one recovery now if the window still allows it.

        Returns:
            True: allowed and counted. False: ``times`` recoveries already happened within the last
            ``window_s`` seconds (nothing is counted; the caller gives up).
        """
        now = time.monotonic()
        self._spent_at = [t for t in self._spent_at if now - t < self.window_s]
        if len(self._spent_at) >= self.times:
            return False
        self._spent_at.append(now)
        return True
