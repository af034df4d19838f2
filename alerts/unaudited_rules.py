"""The alert rules on unaudited traffic: producers without audit snapshots, messages without stamps.

Unaudited messages (from producers that do not use ``AuditedProducer``) are never loss: they are in
neither ``sent`` nor ``unique``; these rules say that their loss cannot be measured (issue 15). Nor are
unaccounted messages (a stamp naming a producer id that sent no snapshot for the topic and window):
:class:`UnaccountedMessagesRule` shows them instead of letting them vanish (issue 36).
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
        unaccounted = number_field(result, "unaccounted")
        carried = f" ({unaccounted:,.0f} messages carry their stamps: unaccounted)" if unaccounted else ""
        return window_observation(
            result,
            bad=n > self.threshold,
            value=n,
            threshold=float(self.threshold),
            summary=f"{result['topic']} ({result['tier']}): {n:.0f} unaudited producer(s)",
            suggestion=window_suggestion(result) or UNAUDITED_SUGGESTION,
            description=(
                f"{window_place(result)}: the cluster holds messages of {n:.0f} producer id(s) that sent "
                f"no audit snapshot{carried}; their loss cannot be measured."
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


UNACCOUNTED_SUGGESTION = (
    "find the producer the stamps name (kafka-audit's producer id: client.id@host.pid.random): a producer "
    "whose snapshots do not reach the audit topic, an application that copies the kafka-audit.stamp header "
    "onto messages it writes, or a forged stamp"
)
"""The suggestion of :class:`UnaccountedMessagesRule`'s alerts."""


@dataclass(frozen=True)
class UnaccountedMessagesRule(WindowRule):
    """KafkaAuditUnaccountedMessages: messages whose stamp names no reporting producer > threshold (issue 36).

    ``unaccounted`` counts the messages of the window at this tier whose audit stamp decodes but names a
    producer id that sent no producer snapshot for the topic and window (a crashed producer whose
    snapshots were lost, a client that copies headers, a garbled or forged stamp). They are in neither
    ``sent`` nor ``unique`` nor ``duplicated``: never loss and never duplicates.
    """

    threshold: int = 0

    def evaluate(self, result: Mapping[str, Any], firing: bool) -> Observation:
        """Bad if ``unaccounted > threshold`` (messages); unknown if the field is missing (older results)."""
        n = number_field(result, "unaccounted")
        if n is None:
            return Observation(bad=None)
        ids = number_field(result, "unaudited_producers") or 0.0
        distinct = number_field(result, "unaccounted_unique")
        stamps = f"{distinct:,.0f} distinct stamp(s)" if distinct is not None else "distinct stamps unknown"
        return window_observation(
            result,
            bad=n > self.threshold,
            value=n,
            threshold=float(self.threshold),
            summary=(
                f"{result['topic']} ({result['tier']}): {n:,.0f} message(s) stamped by "
                f"{ids:.0f} producer id(s) that never reported"
            ),
            suggestion=UNACCOUNTED_SUGGESTION,
            description=(
                f"{window_place(result)}: the cluster holds {n:,.0f} message(s) ({stamps}) whose audit "
                f"stamp names {ids:.0f} producer id(s) without a producer snapshot for this topic and "
                "window: a crashed producer whose snapshots were lost, a client that copies headers, or "
                "a garbled or forged stamp. They are counted apart, never as sent, lost or duplicated."
            ),
        )

    def info(self) -> RuleInfo:
        """Describe the rule."""
        fire, resolve = self._counts()
        return RuleInfo(
            self.alertname, self.severity, "unaccounted > threshold", str(self.threshold), fire, resolve
        )
