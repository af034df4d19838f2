"""Measure what the impairment achieved: ICMP echo probes from the producer's namespace to the host.

Each probe is one packet through the impaired path (echo requests leave the producer's namespace; the
replies come back unimpaired), so the fraction of missing replies estimates the loss ratio L, runs of
consecutive missing sequence numbers are the loss bursts, and the RTT minus the unimpaired RTT is the
added delay D. Uses iputils ``ping`` (root may send at intervals below 2 ms).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from testbed.netns import NetworkError, ProducerNamespace

_REPLY = re.compile(r"icmp_seq=(\d+) .*time=([\d.]+) ms")


@dataclass
class ProbeResult:
    """Outcome of ``sent`` echo probes.

    Attributes:
        sent: Probes sent.
        rtts_ms: RTT of each answered probe, ms, by sequence number.
    """

    sent: int
    rtts_ms: dict[int, float] = field(default_factory=dict)

    @property
    def received(self) -> int:
        """Probes answered."""
        return len(self.rtts_ms)

    @property
    def loss_pct(self) -> float:
        """Measured loss ratio, percent."""
        return 100.0 * (self.sent - self.received) / self.sent if self.sent else 0.0

    @property
    def median_rtt_ms(self) -> float | None:
        """Median RTT of answered probes, ms."""
        return statistics.median(self.rtts_ms.values()) if self.rtts_ms else None

    def quantile_rtt_ms(self, q: float) -> float | None:
        """RTT quantile ``q`` (0-1) of answered probes, ms."""
        if not self.rtts_ms:
            return None
        values = sorted(self.rtts_ms.values())
        return values[min(len(values) - 1, int(q * len(values)))]

    @property
    def bursts(self) -> list[int]:
        """Lengths of the runs of consecutive lost probes, in order."""
        runs, run = [], 0
        for seq in range(1, self.sent + 1):
            if seq in self.rtts_ms:
                if run:
                    runs.append(run)
                run = 0
            else:
                run += 1
        if run:
            runs.append(run)
        return runs

    @property
    def mean_burst(self) -> float | None:
        """Mean loss-burst length, probes (None without loss)."""
        b = self.bursts
        return sum(b) / len(b) if b else None

    def summary(self) -> dict[str, float | int | None]:
        """Return the numbers as a flat dict (tables, JSON)."""
        return {
            "sent": self.sent,
            "received": self.received,
            "loss_pct": round(self.loss_pct, 3),
            "median_rtt_ms": self.median_rtt_ms,
            "p95_rtt_ms": self.quantile_rtt_ms(0.95),
            "mean_burst": self.mean_burst,
        }


def ping_probe(ns: ProducerNamespace, count: int = 5000, interval_s: float = 0.001) -> ProbeResult:
    """Send ``count`` echo probes from the namespace to the host end of the veth pair.

    Args:
        ns: The producer namespace.
        count: Probe packets.
        interval_s: Gap between probes, s (>= 0.0002; ping needs root below 0.002, which the testbed is).

    Raises:
        NetworkError: if ping cannot run.
    """
    wait_s = max(2, int(5 * ((ns.impairment.delay.delay_ms if ns.impairment.delay else 0) / 1000 + 1)))
    cmd = ["ping", "-n", "-c", str(count), "-i", f"{interval_s:.4f}", "-W", str(wait_s), ns.host_ip]
    try:
        proc = ns.popen(cmd, stdout=-1, stderr=-1, text=True)
        out, err = proc.communicate(timeout=count * interval_s * 4 + 60)
    except FileNotFoundError as exc:  # pragma: no cover - bootstrap installs iputils-ping
        raise NetworkError("ping not found: install iputils-ping") from exc
    if proc.returncode not in (0, 1):  # 1 = some probes unanswered
        raise NetworkError(f"ping failed ({proc.returncode}): {err.strip()}")
    result = ProbeResult(sent=count)
    for m in _REPLY.finditer(out):
        seq = int(m.group(1))
        if 1 <= seq <= count:
            result.rtts_ms.setdefault(seq, float(m.group(2)))
    return result
