"""When a window may be declared final: once no message of it can still legitimately arrive.

A librdkafka producer gives a message up ``message.timeout.ms`` after ``produce()`` (which stamps its
CreateTime); until then it retries, so a message of window ``[start, end)`` can be appended to the log
until about ``end + message.timeout.ms``. The wait after a window's end therefore adapts to the largest
``message.timeout.ms`` the window's producers reported in their snapshots
(``AuditRecord.producer_config.message_timeout_ms``), plus a delivery margin (the last send attempt and
the kernel draining an exited producer's socket), bounded by a maximum; never shorter than the
component's fixed grace (docs/DESIGN.md, invariant 8). A window without a producer report (only
unaudited traffic, or producers too old to report a configuration) waits the grace.

Both places that decide finality use this rule: the audit consumer closes a window's counters after
``wait_ms`` (``settle_ms`` = 0), the reconciliation job emits its final result after ``wait_ms`` with
its ``settle_ms`` (the time the audit consumers' final snapshots need to reach it). Messages that come
later still count as late, never as received. The job makes a window final earlier when it can prove
that nothing more of it can arrive (every producer accounted for every message, every tier read past
them: :mod:`spark_streaming.finality_proof`); this rule is the fallback and the audit consumer's own.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_DELIVERY_MARGIN_MS = 5_000
"""Added to ``message.timeout.ms``: the last attempt's round trip and a socket drained by the kernel, ms."""

DEFAULT_MAX_FINAL_WAIT_MS = 310_000
"""Upper bound of the adaptive wait, ms: librdkafka's default ``message.timeout.ms`` (300 s) + 10 s."""


DEFAULT_TCP_DRAIN_WAIT_MS = 60_000
"""How long a producer's final snapshot waits for its TCP connections to deliver what they hold, ms."""

DEFAULT_PRODUCER_FINAL_WAIT_MS = 75_000
"""How long after its wait a window stays open at the audit consumer for a producer that watches its TCP
connections (``in_flight_bytes`` not null) and has not sent its final snapshot, ms: the TCP drain wait
(60 s) + the producer's grace (10 s) + its snapshot interval (5 s). Below the job's
``tier_final_wait_ms`` (120 s), so the job still gets the audit consumer's final snapshot."""


@dataclass(frozen=True)
class Finality:
    """The finality rule of one component.

    Attributes:
        grace_ms: The fixed wait after a window's end, ms: the wait without producer reports, and the
            shortest wait in any case.
        delivery_margin_ms: Added to the largest ``message.timeout.ms`` of a window's producers, ms.
        max_wait_ms: Upper bound of the delivery bound (``message.timeout.ms`` + margin), ms; also the
            bound of producers that never time out (``message.timeout.ms`` = 0). 0 or less turns the
            adaptation off: every window waits ``grace_ms``.
        settle_ms: Added to the delivery bound (not to the grace): the time the tier before this
            component needs to report the window as closed, ms (0 for the audit consumer).
    """

    grace_ms: int
    delivery_margin_ms: int = DEFAULT_DELIVERY_MARGIN_MS
    max_wait_ms: int = DEFAULT_MAX_FINAL_WAIT_MS
    settle_ms: int = 0

    @property
    def adaptive(self) -> bool:
        """True if the wait adapts to the producers' ``message.timeout.ms`` (``max_wait_ms`` > 0)."""
        return self.max_wait_ms > 0

    def delivery_bound_ms(self, message_timeout_ms: int | None) -> int | None:
        """Return how long after its end a window's message may still be appended, ms (None: unknown).

        Args:
            message_timeout_ms: The largest librdkafka ``message.timeout.ms`` of the window's producers,
                ms (0 = infinite); None when no producer reported one.

        Returns:
            ``min(max_wait_ms, message_timeout_ms + delivery_margin_ms)`` (``max_wait_ms`` for an infinite
            timeout); None when unknown or when the adaptation is off.
        """
        if message_timeout_ms is None or not self.adaptive:
            return None
        if message_timeout_ms <= 0:
            return self.max_wait_ms
        return min(self.max_wait_ms, message_timeout_ms + self.delivery_margin_ms)

    def wait_ms(self, message_timeout_ms: int | None) -> int:
        """Return the wait after a window's end before it is final, ms.

        ``max(grace_ms, delivery bound + settle_ms)``; ``grace_ms`` when the bound is unknown
        (:meth:`delivery_bound_ms`).
        """
        bound = self.delivery_bound_ms(message_timeout_ms)
        return self.grace_ms if bound is None else max(self.grace_ms, bound + self.settle_ms)

    @property
    def longest_wait_ms(self) -> int:
        """The longest wait any window can get, ms (``max(grace, max_wait + settle)`` when adaptive)."""
        return max(self.grace_ms, self.max_wait_ms + self.settle_ms) if self.adaptive else self.grace_ms
