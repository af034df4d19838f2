"""End-to-end latency histogram: log-linear buckets, 4 per power of two (relative error <= 25%).

Bucket of a latency ``x`` ms (``x >= 1``, ``b = x.bit_length()``): ``4*b + ((x << 2) >> (b - 1)) - 4``;
``x <= 0`` goes to bucket 0. Percentiles are reported as the bucket's lower bound, max exactly.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

N_BUCKETS = 4 * 64
"""Enough for any non-negative 63-bit latency."""


def bucket_of(latency_ms: int) -> int:
    """Return the bucket index of one latency (ms)."""
    if latency_ms <= 0:
        return 0
    b = latency_ms.bit_length()
    return 4 * b + ((latency_ms << 2) >> (b - 1)) - 4


def lower_bound(bucket: int) -> float:
    """Return the smallest latency (ms) that falls in ``bucket``."""
    if bucket < 4:
        return 0.0
    b, sub = divmod(bucket, 4)
    return float((1 << (b - 1)) * (4 + sub) // 4)


def add_all(hist: list[int], latencies_ms: Iterable[int]) -> None:
    """Add many latencies (ms: an int64 array or an iterable of ints) to ``hist`` in place.

    ``hist`` is a list of :data:`N_BUCKETS` counts.
    """
    lat = latencies_ms if isinstance(latencies_ms, np.ndarray) else np.fromiter(latencies_ms, dtype=np.int64)
    if lat.size == 0:
        return
    pos = np.maximum(lat, 1)
    b = np.floor(np.log2(pos)).astype(np.int64) + 1
    # np.log2 can be off by one at exact powers of two for huge values; fix with integer checks.
    b = np.where((1 << (b - 1)) > pos, b - 1, b)
    b = np.where((1 << b) <= pos, b + 1, b)
    idx = 4 * b + ((pos << 2) >> (b - 1)) - 4
    idx = np.where(lat <= 0, 0, idx)
    for i, n in zip(*np.unique(idx, return_counts=True), strict=True):
        hist[int(i)] += int(n)


def percentile(hist: list[int], q: float) -> float | None:
    """Return the ``q``-quantile (0..1) of ``hist`` as a bucket lower bound, ms; None if empty."""
    total = sum(hist)
    if total == 0:
        return None
    rank = max(1, int(np.ceil(q * total)))
    seen = 0
    for i, n in enumerate(hist):
        seen += n
        if seen >= rank:
            return lower_bound(i)
    return None  # pragma: no cover - rank <= total
