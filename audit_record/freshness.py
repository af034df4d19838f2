"""Freshness histogram: how long after its CreateTime a tier held each message, in fixed buckets (ms).

Defined once here for every writer and reader (the audit consumer, the AuditedConsumer, the job, the
metrics, the SLO rules and status; the JVM interceptors copy :data:`BOUNDS_MS` from the ``freshness_counts``
doc of ``audit_record.avsc``). A histogram is a list of :data:`N_COUNTS` message counts, **per bucket, not
cumulative**: entry ``i`` counts the messages whose freshness ``x = held time - CreateTime`` (ms, integer)
satisfies ``BOUNDS_MS[i-1] < x <= BOUNDS_MS[i]`` (entry 0: ``x <= 100``, a negative ``x`` from a producer
clock ahead of the tier's included; the last entry: ``x > 3_600_000``). The bounds are fixed, so
histograms of any producers, partitions, windows and tiers add up entry by entry, and "held within S" is
an exact count when S is a bound (:func:`fresh_and_total`): freshness SLOs are computed from counts, never
interpolated. An empty list means "not measured" (a writer that does not measure freshness, a record
written before the field existed).

Bounds (ms): 100, 250, 500, 1000, 2500, 5000, 10000, 15000, 30000, 60000, 120000, 300000, 600000,
1800000, 3600000. Why these: the 1-2.5-5 steps per decade of Prometheus' own default buckets, moved up
from its 5 ms start (an audited message spends at least the producer's ``linger.ms`` and a broker round
trip before anyone can hold it, so sub-100 ms bounds would split nothing an SLO is stated on) and
extended from its 10 s end to one hour, where the thresholds people state for pipelines are (15 s, 30 s,
1, 2, 5, 10, 30 minutes, an hour). 15 buckets plus +Inf cost at most 16 varints per snapshot. Prometheus
``le`` labels are in seconds (:func:`le_label`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

BOUNDS_MS: tuple[int, ...] = (
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    15_000,
    30_000,
    60_000,
    120_000,
    300_000,
    600_000,
    1_800_000,
    3_600_000,
)
"""Upper bounds of the buckets, ms, inclusive (Prometheus ``le``); a last bucket above them is +Inf."""

N_COUNTS = len(BOUNDS_MS) + 1
"""Entries of a measured histogram: one per bound, then the +Inf bucket."""

_BOUNDS = np.asarray(BOUNDS_MS, dtype=np.int64)
INF_LABEL = "+Inf"


def empty() -> list[int]:
    """Return a measured histogram with no message: :data:`N_COUNTS` zeros."""
    return [0] * N_COUNTS


def bucket_of(freshness_ms: int) -> int:
    """Return the entry of one freshness ``x`` (ms): the first ``i`` with ``x <= BOUNDS_MS[i]``, else last."""
    return int(np.searchsorted(_BOUNDS, freshness_ms, side="left"))


def add_all(counts: list[int], freshness_ms: np.ndarray) -> None:
    """Add many freshness values (ms, an int64 array) to the measured histogram ``counts`` in place."""
    if freshness_ms.size == 0:
        return
    idx = np.searchsorted(_BOUNDS, freshness_ms, side="left")
    for i, n in enumerate(np.bincount(idx, minlength=N_COUNTS).tolist()):
        if n:
            counts[i] += n


def add_counts(histograms: Iterable[Sequence[int] | None]) -> list[int]:
    """Return the entry-by-entry sum of the measured histograms (empty or None ones skipped; [] if none).

    Raises:
        ValueError: a non-empty histogram without :data:`N_COUNTS` entries.
    """
    total: list[int] | None = None
    for h in histograms:
        if not h:
            continue
        if len(h) != N_COUNTS:
            raise ValueError(f"a freshness histogram has {N_COUNTS} entries, not {len(h)}")
        if total is None:
            total = [int(n) for n in h]
        else:
            for i, n in enumerate(h):
                total[i] += int(n)
    return total or []


def problem(counts: Sequence[int]) -> str | None:
    """Return why ``counts`` is not a histogram of this module (None: it is, measured or empty)."""
    if counts and len(counts) != N_COUNTS:
        return f"freshness_counts has {len(counts)} entries: allowed 0 (not measured) or {N_COUNTS}"
    if any(n < 0 for n in counts):
        return "freshness_counts has a negative count"
    return None


def cumulative(counts: Sequence[int]) -> list[int]:
    """Return the cumulative counts of a histogram: entry ``i`` = messages with ``x <= BOUNDS_MS[i]``.

    The last entry (+Inf) is the total. Prometheus histogram ``_bucket`` semantics.
    """
    out, seen = [], 0
    for n in counts:
        seen += int(n)
        out.append(seen)
    return out


def fresh_and_total(counts: Sequence[int], threshold_ms: int) -> tuple[int, int]:
    """Return (messages held within ``threshold_ms``, messages) of a histogram ((0, 0) if not measured).

    Raises:
        ValueError: ``threshold_ms`` is not one of :data:`BOUNDS_MS` (the count would be interpolated).
    """
    if threshold_ms not in BOUNDS_MS:
        raise ValueError(f"freshness threshold {threshold_ms} ms: allowed {', '.join(map(str, BOUNDS_MS))}")
    if not counts:
        return 0, 0
    within = BOUNDS_MS.index(threshold_ms) + 1
    return sum(int(n) for n in counts[:within]), sum(int(n) for n in counts)


def threshold_bound_ms(threshold_s: float) -> int:
    """Return the bound (ms) of a freshness threshold given in seconds.

    Raises:
        ValueError: naming the allowed values (:data:`BOUNDS_MS` in seconds) if it is not one.
    """
    ms = round(threshold_s * 1000)
    if ms not in BOUNDS_MS or abs(threshold_s * 1000 - ms) > 1e-6:
        raise ValueError(
            f"{threshold_s:g} s is not a freshness bucket bound: allowed "
            f"{', '.join(le_label(b) for b in BOUNDS_MS)} (seconds)"
        )
    return ms


def le_label(bound_ms: int | None) -> str:
    """Return the Prometheus ``le`` of a bound: seconds as ``%g`` ("0.1", "30", "3600"); None: ``+Inf``."""
    return INF_LABEL if bound_ms is None else f"{bound_ms / 1000:g}"


LE_LABELS: tuple[str, ...] = (*(le_label(b) for b in BOUNDS_MS), INF_LABEL)
"""The ``le`` label of each histogram entry, in order."""
