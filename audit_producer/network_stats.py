"""What a producer knows of its network: librdkafka statistics and the TCP retransmission ratio.

``parse_statistics`` reduces librdkafka's ``statistics.interval.ms`` JSON (``STATISTICS.md``) to the
audit record's :class:`~audit_record.NetworkStats`; :class:`TcpRetransmitMeter` estimates the packet
loss L (paper Eq. 1) and the retransmission-timeout rate from the kernel's TCP counters of the
producer's network namespace.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from audit_record import NetworkStats

SNMP_PATH = Path("/proc/net/snmp")
"""SNMP MIB counters of the reading process's network namespace (``/proc/net`` = ``/proc/self/net``)."""

NETSTAT_PATH = Path("/proc/net/netstat")
"""Linux TCP extension counters (``TcpExt:``) of the reading process's network namespace."""

MIN_OUT_SEGMENTS = 20
"""Fewer TCP segments than this since the last estimate: too few for a new ratio; keep accumulating."""


def _read_mib(path: Path, section: str, names: tuple[str, ...]) -> tuple[int, ...] | None:
    """Return the named counters of one section of a ``/proc/net`` MIB file, in ``names`` order.

    The file holds, per section, a header line (``<section> name name ...``) and a values line
    (``<section> value value ...``). Returns None when the file is unreadable or lacks the section or a
    counter.
    """
    try:
        lines = [ln.split() for ln in path.read_text().splitlines() if ln.startswith(section)]
    except OSError:
        return None
    if len(lines) < 2:
        return None
    fields = dict(zip(lines[0][1:], lines[1][1:], strict=False))
    try:
        return tuple(int(fields[name]) for name in names)
    except (KeyError, ValueError):
        return None


def read_tcp_counters(path: Path = SNMP_PATH) -> tuple[int, int] | None:
    """Return the cumulative TCP ``(OutSegs, RetransSegs)`` of this network namespace.

    ``/proc/net/snmp`` has a ``Tcp:`` header line with the counter names and a ``Tcp:`` line with their
    values (RFC 1213 tcpOutSegs, tcpRetransSegs). Returns None when the file is missing or unreadable
    (not Linux, no ``/proc``).
    """
    counters = _read_mib(path, "Tcp:", ("OutSegs", "RetransSegs"))
    return None if counters is None else (counters[0], counters[1])


def read_tcp_timeouts(path: Path = NETSTAT_PATH) -> int | None:
    """Return the cumulative ``TCPTimeouts`` of this network namespace: retransmission timeouts (RTO).

    ``/proc/net/netstat`` has a ``TcpExt:`` header line with the counter names and a ``TcpExt:`` line
    with their values (Linux ``LINUX_MIB_TCPTIMEOUTS``: the retransmission timer fired, RFC 6298).
    Returns None when the file or the counter is missing (not Linux, no ``/proc``).
    """
    counters = _read_mib(path, "TcpExt:", ("TCPTimeouts",))
    return None if counters is None else counters[0]


class TcpRetransmitMeter:
    """Packet loss estimate L (percent) from the TCP retransmission ratio between two samples.

    ``100 * delta(RetransSegs) / delta(OutSegs)`` over the interval since the previous estimate, for
    the whole network namespace of the process: in the testbed every producer runs in its own
    namespace, so this measures exactly its link; on a shared host it is the host's TCP traffic. Linux
    counts retransmissions in RetransSegs only, so with loss L on the producer's packets the ratio is
    about L / (1 - L) of the data segments, pulled down again by the pure ACKs in OutSegs. Measured in
    the testbed namespace (request/response traffic, Bernoulli loss on the producer's packets): L = 5%
    reads 5.5%, L = 15% reads 15.9%, no loss reads 0.

    A stalled link sends few segments (TCP backs off its retransmission timer exponentially): over
    such an interval the meter repeats its last estimate while the interval extends, rather than
    leaving L unknown just when the loss is worst (an unknown L is predicted as 0).

    L cannot tell a burst from random loss: both retransmit the same share of segments. Over the same
    interval the meter also measures :attr:`timeout_pct`, ``100 * delta(TCPTimeouts) / delta(OutSegs)``:
    random loss is repaired by fast retransmit (SACK), a burst that swallows a whole flight and its
    retransmissions is repaired only when the retransmission timer fires, and each such timeout
    stalls the connection (with exponential back-off) for at least the 200 ms minimum RTO. Measured in
    the testbed (2 ms polling, ``shift`` scenario): Gilbert-Elliott bursts of 8 packets on average
    (L 11-16%) read 2.0-3.1% and lost 0.34-0.56 of a window; Bernoulli loss of 12% (L 7.5-8.4%) read
    0.2-0.3% and lost nothing; calm and 7% Bernoulli read 0-0.14%.

    Args:
        path: The SNMP counters file (tests pass their own).
        netstat_path: The TCP extension counters file (tests pass their own).
    """

    def __init__(self, path: Path = SNMP_PATH, netstat_path: Path = NETSTAT_PATH) -> None:
        self.path = path
        self.netstat_path = netstat_path
        self._last = read_tcp_counters(path)
        self._last_timeouts = read_tcp_timeouts(netstat_path)
        self._estimate: float | None = None
        self.timeout_pct: float | None = None
        """Retransmission timeouts per 100 segments sent over the interval of the last estimate
        (percent; None when unknown); updated by :meth:`sample` together with its return value."""

    def sample(self) -> float | None:
        """Return the retransmission ratio in percent (0-100) since the last estimate.

        When fewer than :data:`MIN_OUT_SEGMENTS` segments went out since the last estimate, the
        interval extends to the next call and the last estimate is returned again. None when the
        counters cannot be read, went back (another namespace: the meter starts over), or no estimate
        has been made yet.
        """
        now = read_tcp_counters(self.path)
        if now is None or self._last is None:
            return self._start_over(now)
        out, retrans = now[0] - self._last[0], now[1] - self._last[1]
        if out < 0 or retrans < 0:  # counters reset (new namespace): start over
            return self._start_over(now)
        if out < MIN_OUT_SEGMENTS:
            return self._estimate
        timeouts = read_tcp_timeouts(self.netstat_path)
        rto = None if timeouts is None or self._last_timeouts is None else timeouts - self._last_timeouts
        self._last, self._last_timeouts = now, timeouts
        self._estimate = min(100.0, 100.0 * retrans / out)
        self.timeout_pct = min(100.0, 100.0 * rto / out) if rto is not None and rto >= 0 else None
        return self._estimate

    def _start_over(self, now: tuple[int, int] | None) -> None:
        self._last, self._last_timeouts = now, read_tcp_timeouts(self.netstat_path)
        self._estimate = self.timeout_pct = None
        return None


def parse_statistics(
    stats_json: str, tcp_retransmit_pct: float | None = None, tcp_timeout_pct: float | None = None
) -> NetworkStats:
    """Reduce one librdkafka statistics document to what the audit record carries.

    Only real brokers count (``nodeid >= 0``; bootstrap placeholders are skipped). RTTs in the
    document are microseconds; the result is in ms. Malformed JSON yields NetworkStats without broker
    numbers.

    Args:
        stats_json: The document librdkafka passes to ``stats_cb``.
        tcp_retransmit_pct: The packet loss estimate of the same interval (see
            :class:`TcpRetransmitMeter`), percent; carried as is.
        tcp_timeout_pct: The retransmission-timeout rate of the same interval
            (:attr:`TcpRetransmitMeter.timeout_pct`), percent; carried as is.
    """
    try:
        doc: dict[str, Any] = json.loads(stats_json)
    except ValueError:
        return NetworkStats(tcp_retransmit_pct=tcp_retransmit_pct, tcp_timeout_pct=tcp_timeout_pct)
    avgs: list[float] = []
    p99s: list[float] = []
    mins: list[float] = []
    retries = timeouts = errors = 0
    for broker in (doc.get("brokers") or {}).values():
        if broker.get("nodeid", -1) < 0:
            continue
        rtt = broker.get("rtt") or {}
        if rtt.get("cnt", 0) > 0:
            avgs.append(rtt.get("avg", 0) / 1000.0)
            p99s.append(rtt.get("p99", 0) / 1000.0)
            mins.append(rtt.get("min", 0) / 1000.0)
        retries += int(broker.get("txretries", 0))
        timeouts += int(broker.get("req_timeouts", 0))
        errors += int(broker.get("txerrs", 0))
    return NetworkStats(
        rtt_avg_ms=sum(avgs) / len(avgs) if avgs else None,
        rtt_p99_ms=max(p99s) if p99s else None,
        rtt_min_ms=min(mins) if mins else None,
        tx_retries=retries,
        request_timeouts=timeouts,
        tx_errors=errors,
        tcp_retransmit_pct=tcp_retransmit_pct,
        tcp_timeout_pct=tcp_timeout_pct,
    )
