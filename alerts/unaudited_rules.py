"""The alert rules on unaudited traffic: producers without audit snapshots, messages without stamps.

Unaudited messages (from producers that do not use ``AuditedProducer``) are never loss: they are in
neither ``sent`` nor ``unique``; these rules say that their loss cannot be measured (issue 15).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from alerts.observation import (
    Observation,
    RuleInfo,
    number_field,
    window_numbers,
    window_observation,
    window_place,
    window_suggestion,
)
from alerts.window_rule import WindowRule

UNAUDITED_SUGGESTION = "use audit_producer.AuditedProducer for every producer of the topic"
"""The suggestion of both rules' alerts."""

TOPIC_AUDITED = "_topic_has_audited_producers"
"""Key the engine adds to a final window before judging it: True if the (topic, tier) has audited producers
in this window or in a recent one (:meth:`alerts.engine.AlertEngine.observe`); without it, this window's
``producers`` decide."""


@dataclass(frozen=True)
class UnauditedProducersRule(WindowRule):
    """KafkaAuditUnauditedProducers: producers the cluster saw without audit snapshots > threshold."""

    threshold: int = 0

    def evaluate(self, result: Mapping[str, Any], firing: bool) -> Observation:
        """Bad if ``unaudited_producers > threshold``; unknown if the field is missing."""
        n = number_field(result, "unaudited_producers")
        if n is None:
            return Observation(bad=None)
        messages = number_field(result, "unaudited") or 0.0
        return window_observation(
            result,
            bad=n > self.threshold,
            value=n,
            threshold=float(self.threshold),
            summary=f"{result['topic']} ({result['tier']}): {n:.0f} unaudited producer(s)",
            suggestion=window_suggestion(result) or UNAUDITED_SUGGESTION,
            description=(
                f"{window_place(result)}: the cluster holds messages of {n:.0f} producer id(s) that sent "
                f"no audit snapshot ({messages:,.0f} messages without stamps); their loss cannot be measured."
            ),
        )

    def info(self) -> RuleInfo:
        """Describe the rule."""
        fire, resolve = self._counts()
        return RuleInfo(
            self.alertname,
            self.severity,
            "unaudited_producers > threshold",
            str(self.threshold),
            fire,
            resolve,
        )


@dataclass(frozen=True)
class UnauditedTrafficRule(WindowRule):
    """KafkaAuditUnauditedTraffic: messages without an audit stamp beside audited ones (issue 15).

    The share is ``unaudited / received`` of the window at this tier (fraction of the messages the
    cluster holds). Unaudited messages are never loss: they are not in ``sent`` and not in ``unique``.
    With ``needs_audited`` only topics that also have audited producers alert: in this window, or in a
    recent one (the engine's :data:`TOPIC_AUDITED`); a topic nobody instrumented is monitored, not
    alerted on.
    """

    threshold: float = 0.0
    needs_audited: bool = True

    def evaluate(self, result: Mapping[str, Any], firing: bool) -> Observation:
        """Bad if ``unaudited / received > threshold`` (and audited producers reported, if needed).

        Unknown without ``unaudited`` or ``received``.
        """
        unaudited, received = number_field(result, "unaudited"), number_field(result, "received")
        if unaudited is None or received is None:
            return Observation(bad=None)
        share = unaudited / received if received else 0.0
        audited = number_field(result, "producers") or 0.0
        topic_audited = result.get(TOPIC_AUDITED, audited > 0)
        bad = share > self.threshold and (bool(topic_audited) or not self.needs_audited)
        numbers = {
            **window_numbers(result),
            "unaudited": unaudited,
            "received": received,
            "unaudited_share": share,
        }
        return Observation(
            bad=bad,
            value=share,
            threshold=self.threshold,
            window_start_ms=result.get("window_start_ms"),
            window_end_ms=result.get("window_end_ms"),
            numbers=numbers,
            suggestion=UNAUDITED_SUGGESTION,
            summary=(
                f"{result['topic']} ({result['tier']}): {unaudited:,.0f} unaudited message(s), "
                f"{share:.2%} of the topic's traffic"
            ),
            description=(
                f"{window_place(result)}: {unaudited:,.0f} of {received:,.0f} messages the cluster holds "
                "carry no audit stamp (producers that do not use AuditedProducer), in a topic with audited "
                f"producers ({audited:.0f} in this window). Their loss cannot be measured; they are not "
                "counted as lost."
            ),
        )

    def info(self) -> RuleInfo:
        """Describe the rule."""
        fire, resolve = self._counts()
        condition = "unaudited / received > threshold" + (
            ", topic has audited producers" if self.needs_audited else ""
        )
        return RuleInfo(self.alertname, self.severity, condition, f"{self.threshold:.2%}", fire, resolve)
