"""Event-time window arithmetic shared by every tier.

A message belongs to the window of its CreateTime, aligned to the epoch
(``window_start_ms = ts - ts % window_ms``), so producers and audit consumers agree on windows without
talking to each other (docs/DESIGN.md, invariant 1).
"""

from __future__ import annotations

DEFAULT_WINDOW_MS = 60_000
"""Default window length: 60 s."""


def window_start(timestamp_ms: int, window_ms: int = DEFAULT_WINDOW_MS) -> int:
    """Return the start (ms since epoch UTC, inclusive) of the window holding ``timestamp_ms``.

    The definition of a window. The per-message hot paths (``AuditedProducer.produce`` and its delivery
    reports, :func:`audit_consumer.counts.count_batch`, :func:`audit_consumer.ground_truth.tally`) inline
    ``ts - ts % window_ms`` instead of calling it; a property test checks that each agrees with it on
    random timestamps (negative ones included) and window lengths.

    Args:
        timestamp_ms: Message timestamp (CreateTime), ms since the Unix epoch UTC.
        window_ms: Window length in ms, > 0.

    Raises:
        ValueError: if ``window_ms`` is not positive.
    """
    if window_ms <= 0:
        raise ValueError(f"window_ms must be > 0, got {window_ms}")
    return timestamp_ms - timestamp_ms % window_ms


def window_bounds(timestamp_ms: int, window_ms: int = DEFAULT_WINDOW_MS) -> tuple[int, int]:
    """Return ``(start_ms, end_ms)`` of the window holding ``timestamp_ms``; ``end_ms`` is exclusive."""
    start = window_start(timestamp_ms, window_ms)
    return start, start + window_ms
