"""What librdkafka's statistics say to the audited producer: the network it runs in and the partition leaders.

Every inner producer gets its own ``stats_cb`` (:meth:`ClientStatistics.callback`); only the active
one's documents count, so an inner producer being drained after a configuration change does not mix
its network into the new one's. The cumulative counters (retries, request timeouts, errors) carry on
across the swap (:meth:`ClientStatistics.switch`).
"""

from __future__ import annotations

from collections.abc import Callable

from audit_producer.leaders import LeaderHistory, partition_leaders
from audit_producer.network_history import NetworkHistory
from audit_producer.network_stats import TcpRetransmitMeter, parse_statistics
from audit_record import NetworkStats, now_ms


class ClientStatistics:
    """The statistics of the active inner producer: newest sample, samples of the open windows, leaders.

    Args:
        interval_ms: ``statistics.interval.ms`` of the inner producers, ms (below 1 counts as 1).
        tcp: The packet loss meter (L) of this network namespace, sampled with every document.
        then: The application's own ``stats_cb``, called with every document that counts; None: none.

    Attributes:
        token: The active inner producer's token: only documents of its callback count.
        latest: The newest sample (what a window without samples of its own reports).
        history: The samples of the open windows (:class:`~audit_producer.network_history.NetworkHistory`).
        leaders: Partition leaders over time (docs/DESIGN.md, "Attribution").
    """

    def __init__(self, interval_ms: int, tcp: TcpRetransmitMeter, then: Callable[[str], None] | None) -> None:
        self.token = object()
        self.latest = NetworkStats()
        self.history = NetworkHistory(max(1, interval_ms))
        self.leaders = LeaderHistory()
        self._tcp = tcp
        self._then = then
        # Cumulative tx_retries, request_timeouts, tx_errors of the inner producers replaced so far:
        self._base = (0, 0, 0)

    def callback(self, token: object) -> Callable[[str], None]:
        """Return the ``stats_cb`` of the inner producer with ``token``: counted while it is active."""

        def on_stats(stats_json: str) -> None:
            if token is self.token:
                self.observe(stats_json)

        return on_stats

    def observe(self, stats_json: str) -> None:
        """Take one statistics document of the active inner producer (JSON text, ``STATISTICS.md``)."""
        now = now_ms()
        self.leaders.observe(partition_leaders(stats_json), now)
        network = parse_statistics(stats_json, self._tcp.sample(), self._tcp.timeout_pct)
        retries, timeouts, errors = self._base  # cumulative across inner producers
        network.tx_retries += retries
        network.request_timeouts += timeouts
        network.tx_errors += errors
        self.latest = network
        self.history.add(now, network)
        if self._then is not None:
            self._then(stats_json)

    def switch(self, token: object) -> None:
        """Count the documents of the inner producer with ``token`` from now on (it replaced the active one).

        Its counters start from zero; the ones of the replaced producers are added to them.
        """
        network = self.latest
        self._base = (network.tx_retries, network.request_timeouts, network.tx_errors)
        self.token = token

    def network_during(self, start_ms: int, end_ms: int) -> NetworkStats:
        """Return the network of ``[start_ms, end_ms)`` (ms): its samples reduced, or the latest."""
        return self.history.during(start_ms, end_ms) or self.latest

    def forget_before(self, ms: int) -> None:
        """Drop the samples and leaders no open window needs: those before ``ms`` (ms since the epoch)."""
        self.leaders.forget_before(ms)
        self.history.forget_before(ms)


__all__ = ["ClientStatistics"]
