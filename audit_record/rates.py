"""Loss rate R_l, duplicate rate R_d and completeness over one window (paper Eq. 3, per window).

Pure functions, shared by the Spark job, the verifier's report and the tests. All return fractions
in [0, 1] (R_d may exceed 1 if every message arrived many times), or None when nothing was sent.
"""

from __future__ import annotations


def loss_rate(sent: int, unique: int) -> float | None:
    """R_l = (sent - unique) / sent; None if ``sent`` is 0; unique > sent counts as no loss."""
    if sent <= 0:
        return None
    return max(0, sent - unique) / sent


def duplicate_rate(sent: int, duplicated: int) -> float | None:
    """R_d = duplicated / sent; None if ``sent`` is 0."""
    if sent <= 0:
        return None
    return duplicated / sent


def completeness(sent: int, unique: int) -> float | None:
    """Completeness = unique / sent, capped at 1; None if ``sent`` is 0."""
    if sent <= 0:
        return None
    return min(1.0, unique / sent)
