"""The base of the alert rules judged once per new final window of a (topic, tier)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from alerts.event import Severity
from alerts.observation import Observation, RuleInfo


@dataclass(frozen=True)
class WindowRule:
    """A rule judged once per new final window of a (topic, tier).

    Attributes:
        alertname: Contract alert name.
        severity: ``severity`` label.
        for_count: Bad final windows in a row to fire; keep_firing_count: good ones to resolve.
    """

    alertname: str
    severity: Severity
    for_count: int
    keep_firing_count: int

    def evaluate(self, result: Mapping[str, Any], firing: bool) -> Observation:
        """Judge one final window; ``firing`` selects the resolve threshold (value hysteresis)."""
        raise NotImplementedError

    def info(self) -> RuleInfo:
        """Describe the rule and its thresholds."""
        raise NotImplementedError

    def _counts(self, unit: str = "final window") -> tuple[str, str]:
        return (
            f"{self.for_count} bad {unit}(s) in a row",
            f"{self.keep_firing_count} good {unit}(s) in a row",
        )
