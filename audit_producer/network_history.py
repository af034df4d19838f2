"""The network a window ran in: the producer's statistics samples, aggregated over the window's time.

librdkafka emits a statistics document every ``statistics.interval.ms``; each describes the interval
that ends when it is emitted (the brokers' ``rtt`` window, ``STATISTICS.md``), and the
:class:`~audit_producer.network_stats.TcpRetransmitMeter` estimate taken with it covers the same
interval. A window's snapshot used to carry the newest sample at the time it was *emitted*: a final
snapshot, sent ``grace_ms`` after the window's end, described the network after the window, and the
predictor learnt D and L of the next stage when the network changed (issue 13). :class:`NetworkHistory`
keeps the samples of the open windows and reduces those whose interval overlaps a window to one
:class:`~audit_record.NetworkStats`, so each snapshot describes its own window.
"""

from __future__ import annotations

from collections import deque
from statistics import fmean

from audit_record import NetworkStats


class NetworkHistory:
    """The statistics samples of the last minutes, oldest first, and their reduction per window.

    Args:
        interval_ms: ``statistics.interval.ms`` of the producer, ms: a sample taken at ``t`` covers
            ``(t - interval_ms, t]``.

    Raises:
        ValueError: if ``interval_ms`` is not positive.
    """

    def __init__(self, interval_ms: int) -> None:
        if interval_ms <= 0:
            raise ValueError(f"statistics.interval.ms={interval_ms}: must be > 0 for a network history")
        self.interval_ms = interval_ms
        self._samples: deque[tuple[int, NetworkStats]] = deque()

    def __len__(self) -> int:
        return len(self._samples)

    def add(self, at_ms: int, stats: NetworkStats) -> None:
        """Keep one sample, taken at ``at_ms`` (ms since the epoch; samples come in time order)."""
        self._samples.append((at_ms, stats))

    def forget_before(self, start_ms: int) -> None:
        """Drop the samples no window from ``start_ms`` on uses (taken at or before it, ms)."""
        while self._samples and self._samples[0][0] <= start_ms:
            self._samples.popleft()

    def during(self, start_ms: int, end_ms: int) -> NetworkStats | None:
        """Reduce the samples of the window ``[start_ms, end_ms)`` to one NetworkStats.

        A sample belongs to the window its interval's midpoint lies in (so each sample counts for one
        window of a sequence). ``rtt_avg_ms`` and ``tcp_retransmit_pct`` (L, percent) are the means
        over the window's samples (of those that know them), ``rtt_p99_ms`` their maximum,
        ``rtt_min_ms`` their minimum (the window's best round trip: D without queueing); the
        cumulative counters (``tx_retries``, ``request_timeouts``, ``tx_errors``) are the newest
        sample's. A window shorter than the interval may hold no midpoint: it gets the first sample
        taken after its start.

        Returns:
            None when no sample was taken after the window's start yet (the caller falls back to the
            newest sample).
        """
        half = self.interval_ms // 2
        mine = [s for at, s in self._samples if start_ms <= at - half < end_ms]
        if not mine:
            mine = [s for at, s in self._samples if at > start_ms][:1]
        if not mine:
            return None
        rtts = [s.rtt_avg_ms for s in mine if s.rtt_avg_ms is not None]
        p99s = [s.rtt_p99_ms for s in mine if s.rtt_p99_ms is not None]
        mins = [s.rtt_min_ms for s in mine if s.rtt_min_ms is not None]
        losses = [s.tcp_retransmit_pct for s in mine if s.tcp_retransmit_pct is not None]
        rtos = [s.tcp_timeout_pct for s in mine if s.tcp_timeout_pct is not None]
        last = mine[-1]
        return NetworkStats(
            rtt_avg_ms=fmean(rtts) if rtts else None,
            rtt_p99_ms=max(p99s) if p99s else None,
            rtt_min_ms=min(mins) if mins else None,
            tx_retries=last.tx_retries,
            request_timeouts=last.request_timeouts,
            tx_errors=last.tx_errors,
            tcp_retransmit_pct=fmean(losses) if losses else None,
            tcp_timeout_pct=fmean(rtos) if rtos else None,
        )
