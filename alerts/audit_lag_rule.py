"""The audit-lag alert rule: windows still provisional long after their end (the pipeline is behind)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from alerts.event import Severity
from alerts.observation import Observation, RuleInfo, utc_text


@dataclass(frozen=True)
class AuditLagRule:
    """KafkaAuditAuditLag: a window still provisional at wall clock > window end + its wait + margin.

    Judged once per evaluation for every (topic, tier) the engine has seen; counts are evaluations.
    A window's wait is the job's grace, or longer when its producers may still deliver (the window
    result's ``final_wait_ms``; docs/DESIGN.md, invariant 8).

    Attributes:
        grace_ms: The reconciliation job's grace, ms; margin_ms: extra slack, ms.
    """

    alertname: str
    severity: Severity
    for_count: int
    keep_firing_count: int
    grace_ms: int = 60_000
    margin_ms: int = 30_000

    def evaluate(
        self,
        topic: str,
        tier: str,
        open_windows: Mapping[int, int],
        now_ms: int,
        waits: Mapping[int, int] | None = None,
    ) -> Observation:
        """Judge one (topic, tier)'s provisional windows ``{window_start_ms: window_end_ms}`` at ``now_ms``.

        ``waits`` gives a window's ``final_wait_ms`` by start (ms; missing: the grace). The value is the
        oldest late window's lag behind its end, s; the threshold (its wait + margin) in s.
        """
        waits = waits or {}
        limit_ms = self.grace_ms + self.margin_ms

        def limit(start: int) -> int:
            return max(self.grace_ms, waits.get(start, 0)) + self.margin_ms

        late = sorted((s, e) for s, e in open_windows.items() if now_ms > e + limit(s))
        if not late:
            return Observation(
                bad=False,
                threshold=limit_ms / 1000,
                summary=f"{topic} ({tier}): every window final within {limit_ms / 1000:.0f} s of its end",
                description=f"{topic} ({tier}): no provisional window older than grace + margin.",
            )
        start, end = late[0]
        lag_s = (now_ms - end) / 1000
        wait_ms = limit(start) - self.margin_ms
        return Observation(
            bad=True,
            value=lag_s,
            threshold=limit(start) / 1000,
            window_start_ms=start,
            window_end_ms=end,
            numbers={"late_windows": float(len(late)), "lag_seconds": lag_s},
            summary=f"{topic} ({tier}): {len(late)} window(s) not final {lag_s:.0f} s after window end",
            description=(
                f"{topic} ({tier}): window {utc_text(start)}"
                + (f" and {len(late) - 1} later one(s)" if len(late) > 1 else "")
                + f" still provisional {lag_s:.0f} s after its end (wait {wait_ms / 1000:.0f} s"
                f" + margin {self.margin_ms / 1000:.0f} s); the audit consumer or the reconciliation job"
                " is behind."
            ),
        )

    def info(self) -> RuleInfo:
        """Describe the rule."""
        return RuleInfo(
            self.alertname,
            self.severity,
            "window provisional after end + its wait + margin",
            f"{(self.grace_ms + self.margin_ms) / 1000:.0f} s (grace {self.grace_ms / 1000:.0f} s, or the "
            f"window's final_wait_ms when longer, + margin {self.margin_ms / 1000:.0f} s)",
            f"{self.for_count} bad evaluation(s) in a row",
            f"{self.keep_firing_count} good evaluation(s) in a row",
        )
