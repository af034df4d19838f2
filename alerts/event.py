"""The alert event: one state change (firing or resolved) of one (alertname, topic, tier).

Field for field the Avro record ``alert.avsc``. Alert names and labels are the cross-team contract's
(``docs/DESIGN.md``, "Alert events"): labels ``alertname, topic, tier, severity``; annotations ``summary,
description, suggestion, window_start``.

The alerts topic also carries the predictor's champion / challenger decisions as events of the same
record (:mod:`alerts.model_events`): alertname :data:`MODEL_PROMOTED` or :data:`MODEL_REJECTED`,
severity ``info``, resolved at once; they go to the alerts topic only, never to Alertmanager. The control
loop's decisions (:mod:`alerts.control_events`, :data:`CONTROL_EVENT_NAMES`) are ``info`` events too,
sent to the alerts topic and, as an info alert active for a while, to Alertmanager.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

Severity = Literal["warning", "critical"]
"""Severity of an alert rule (settings, Alertmanager)."""
EventSeverity = Literal["info", "warning", "critical"]
"""Severity of an event: a rule's, or ``info`` for a model decision (:data:`MODEL_EVENT_NAMES`)."""
SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")

COMPLETENESS_BELOW_TARGET = "KafkaAuditCompletenessBelowTarget"
GAMMA_BELOW_TARGET = "KafkaAuditGammaBelowTarget"
PREDICTION_DRIFT = "KafkaAuditPredictionDrift"
AUDIT_LAG = "KafkaAuditAuditLag"
UNAUDITED_PRODUCERS = "KafkaAuditUnauditedProducers"
UNAUDITED_TRAFFIC = "KafkaAuditUnauditedTraffic"
"""Messages without an audit stamp beside audited producers' messages (issue 15): never counted as loss."""
UNACCOUNTED_MESSAGES = "KafkaAuditUnaccountedMessages"
"""Messages whose stamp names a producer that sent no snapshot for the topic and window (issue 36)."""
TEST_ALERT = "KafkaAuditTestAlert"
"""Sent by ``kafka-audit alerts test-fire`` only; never by a rule."""

ALERT_NAMES: tuple[str, ...] = (
    COMPLETENESS_BELOW_TARGET,
    GAMMA_BELOW_TARGET,
    PREDICTION_DRIFT,
    AUDIT_LAG,
    UNAUDITED_PRODUCERS,
    UNAUDITED_TRAFFIC,
    UNACCOUNTED_MESSAGES,
)

MODEL_PROMOTED = "KafkaAuditModelPromoted"
"""A retrained challenger replaced the champion model (``alerts.model_events``); never a rule."""
MODEL_REJECTED = "KafkaAuditModelRejected"
"""A retrained challenger was rejected, the champion keeps serving; never a rule."""
MODEL_EVENT_NAMES: tuple[str, ...] = (MODEL_PROMOTED, MODEL_REJECTED)

CONFIG_CHANGED = "KafkaAuditConfigChanged"
"""The control loop wrote a new configuration of a producer group (``alerts.control_events``)."""
CONFIG_ROLLED_BACK = "KafkaAuditConfigRolledBack"
"""The control loop rolled a group back to its previous configuration (measured gamma got worse)."""
CONFIG_KEPT = "KafkaAuditConfigKept"
"""The measured gamma after a change was not worse: the change stays."""
CONFIG_ADVICE = "KafkaAuditConfigAdvice"
"""The control loop advises a change it does not write (advise mode, or the kill switch is on)."""
CONFIG_NOT_APPLIED = "KafkaAuditConfigNotApplied"
"""The group's producers did not report a written configuration in time (not autotuned, or rejected)."""
CONTROL_EVENT_NAMES: tuple[str, ...] = (
    CONFIG_CHANGED,
    CONFIG_ROLLED_BACK,
    CONFIG_KEPT,
    CONFIG_ADVICE,
    CONFIG_NOT_APPLIED,
)


class AlertStatus(StrEnum):
    """What an event says: the alert started firing, or it resolved."""

    FIRING = "firing"
    RESOLVED = "resolved"


def leaders_text(losses: list[dict[str, Any]]) -> str:
    """Return the leader brokers of ``losses`` in order of first appearance as text (``3``, ``3, 1``)."""
    leaders: list[str] = []
    for a in losses:
        name = str(a["leader"]) if a.get("leader") is not None else "unknown"
        if name not in leaders:
            leaders.append(name)
    return ", ".join(leaders)


def fingerprint(alertname: str, topic: str, tier: str, severity: str) -> str:
    """Return the alert's identity: 16 hex digits of SHA-256 over its labels (also the Kafka key)."""
    text = "\x00".join((alertname, topic, tier, severity))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def rfc3339(ms: int) -> str:
    """Format ms since the Unix epoch as RFC 3339 UTC with milliseconds (``2026-01-02T03:04:05.678Z``)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class AlertEvent:
    """One firing or resolved event; immutable.

    Attributes:
        alertname: One of :data:`ALERT_NAMES` (or :data:`TEST_ALERT`, :data:`MODEL_EVENT_NAMES`,
            :data:`CONTROL_EVENT_NAMES`).
        topic: Audited Kafka topic (``""`` for a model decision: it concerns every topic).
        tier: Cluster tier of the window result (``cluster:<name>``); ``model:<challenger version>`` for a
            model decision; ``control:<group>`` for a control-loop decision.
        severity: ``warning`` or ``critical``; ``info`` for a model or control-loop decision.
        status: :class:`AlertStatus`.
        starts_at_ms: When this episode started firing, ms since the Unix epoch (UTC).
        ends_at_ms: When it resolved (resolved events only), ms.
        event_at_ms: Evaluation time that produced the event, ms.
        window_start_ms, window_end_ms: The window behind the transition, ms (None if none).
        value: The rule's measured value; threshold: what it was compared with (same unit).
        numbers: Window numbers behind the alert (fractions 0-1, gamma 0-1, counts), by result field name.
        summary, description: Human text (percent and UTC times spelled out).
        suggestion: The window result's configuration suggestion, if any.
        generator_url: Link back to the source (dashboard), if configured.
        attribution: KafkaAuditCompletenessBelowTarget: the partitions that lost the most in the window,
            most first, each ``{"partition", "leader", "lost", "failed"}`` (leader: broker node id or
            None; messages); empty for other alerts (docs/DESIGN.md, "Attribution").
    """

    alertname: str
    topic: str
    tier: str
    severity: EventSeverity
    status: AlertStatus
    starts_at_ms: int
    event_at_ms: int
    summary: str
    description: str
    ends_at_ms: int | None = None
    window_start_ms: int | None = None
    window_end_ms: int | None = None
    value: float | None = None
    threshold: float | None = None
    numbers: dict[str, float] = field(default_factory=dict)
    suggestion: str | None = None
    generator_url: str | None = None
    attribution: list[dict[str, Any]] = field(default_factory=list)

    @property
    def fingerprint(self) -> str:
        """The alert's identity over its labels (see :func:`fingerprint`)."""
        return fingerprint(self.alertname, self.topic, self.tier, self.severity)

    @property
    def event_id(self) -> str:
        """``fingerprint:starts_at_ms:status``: equal for re-sent copies of the same event."""
        return f"{self.fingerprint}:{self.starts_at_ms}:{self.status.value}"

    @property
    def firing(self) -> bool:
        """True for a firing event."""
        return self.status is AlertStatus.FIRING

    def labels(self) -> dict[str, str]:
        """Alertmanager / Prometheus labels: alertname, topic, tier, severity."""
        return {
            "alertname": self.alertname,
            "topic": self.topic,
            "tier": self.tier,
            "severity": self.severity,
        }

    def annotations(self) -> dict[str, str]:
        """Alertmanager annotations: summary, description, suggestion, window_start (RFC 3339), value..."""
        out = {"summary": self.summary, "description": self.description}
        if self.suggestion:
            out["suggestion"] = self.suggestion
        if self.window_start_ms is not None:
            out["window_start"] = rfc3339(self.window_start_ms)
        if self.window_end_ms is not None:
            out["window_end"] = rfc3339(self.window_end_ms)
        if self.value is not None:
            out["value"] = f"{self.value:.6g}"
        if self.threshold is not None:
            out["threshold"] = f"{self.threshold:.6g}"
        if self.attribution:
            out["lost_partitions"] = ", ".join(str(a["partition"]) for a in self.attribution)
            out["lost_leaders"] = leaders_text(self.attribution)
        return out

    @classmethod
    def decision(cls, alertname: str, tier: str, at_ms: int, **fields: Any) -> AlertEvent:
        """Return an ``info`` event recording a decision at ``at_ms`` (ms), not an episode.

        A decision (model promotion, control-loop change) fires and resolves at the same instant: status
        resolved, ``starts_at_ms`` = ``ends_at_ms`` = ``event_at_ms`` = ``at_ms``. ``fields`` are the
        other attributes (summary, description, topic, value, threshold, numbers, ...).
        """
        return cls(
            alertname=alertname,
            tier=tier,
            severity="info",
            status=AlertStatus.RESOLVED,
            starts_at_ms=at_ms,
            ends_at_ms=at_ms,
            event_at_ms=at_ms,
            **fields,
        )

    def resolved(self, at_ms: int, **changes: Any) -> AlertEvent:
        """Return the resolved event of this (firing) episode, ended at ``at_ms`` (ms); ``changes`` win."""
        fields: dict[str, Any] = {"status": AlertStatus.RESOLVED, "ends_at_ms": at_ms, "event_at_ms": at_ms}
        return dataclasses.replace(self, **{**fields, **changes})

    def to_dict(self) -> dict[str, Any]:
        """Return the Avro / JSON form: ``alert.avsc`` field names, status as its string, the fingerprint."""
        out = dataclasses.asdict(self)
        out["status"] = self.status.value
        out["numbers"] = dict(self.numbers)
        out["attribution"] = [dict(a) for a in self.attribution]
        out["fingerprint"] = self.fingerprint
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AlertEvent:
        """Build from :meth:`to_dict`'s form (``fingerprint`` is recomputed, not trusted).

        Raises:
            ValueError: unknown ``status`` or ``severity``.
            TypeError: missing or unknown fields.
        """
        data = {k: v for k, v in data.items() if k != "fingerprint"}
        if data.get("severity") not in SEVERITIES:
            raise ValueError(f"severity {data.get('severity')!r}: allowed {', '.join(map(repr, SEVERITIES))}")
        data["status"] = AlertStatus(data["status"])
        data["numbers"] = dict(data.get("numbers") or {})
        data["attribution"] = [dict(a) for a in data.get("attribution") or ()]
        return cls(**data)
