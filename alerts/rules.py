"""The six alert rules: what makes one window (or one evaluation) bad, with the numbers behind it.

A rule turns its input into an :class:`Observation` (bad / good / unknown, value, threshold, text);
the engine feeds it to the alert's state machine (:mod:`alerts.state_machine`). Window rules judge one final
window result (``audit_record/window_result.avsc`` with its live-comparison fields; ``docs/DESIGN.md``);
the audit-lag rule judges the set of still-provisional windows of a (topic, tier) at wall clock ``now``.

Symbols as in Wu, Shang, Wolter 2020: R_l = (sent - unique) / sent (Eq. 3), P_l the predicted loss
probability with its 90% interval [p_loss_lo, p_loss_hi] (5th/95th percentile), gamma the KPI of Eq. 2.
Fractions are 0-1 everywhere; text shows them in percent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from alerts.event import (
    ALERT_NAMES,
    AUDIT_LAG,
    COMPLETENESS_BELOW_TARGET,
    GAMMA_BELOW_TARGET,
    PREDICTION_DRIFT,
    UNAUDITED_PRODUCERS,
    UNAUDITED_TRAFFIC,
    Severity,
    leaders_text,
)
from alerts.settings import AlertSettings
from audit_record import PRODUCER_TIER, window_result

NUMBER_FIELDS: tuple[str, ...] = window_result.SUMMARY_NUMBERS
"""Window-result fields copied into an alert's ``numbers`` when present."""

UNAUDITED_SUGGESTION = "use audit_producer.AuditedProducer for every producer of the topic"

TOPIC_AUDITED = "_topic_has_audited_producers"
"""Key the engine adds to a final window before judging it: True if the (topic, tier) has audited producers
in this window or in a recent one (:meth:`alerts.engine.AlertEngine.observe`); without it, this window's
``producers`` decide."""


@dataclass(frozen=True)
class Observation:
    """One judgement of one rule.

    Attributes:
        bad: True if the alert condition holds, False if not, None if it cannot be judged.
        value: Measured value (rule's unit); threshold: what it was compared with.
        summary, description: Human text.
        window_start_ms, window_end_ms: The window judged, ms since the epoch (None: none).
        numbers: Window numbers (see :data:`NUMBER_FIELDS`).
        suggestion: The window's configuration suggestion, if any.
        attribution: The partitions that lost the most and their leader brokers, most first (dicts with
            ``partition``, ``leader``, ``lost``, ``failed``; ``window_result.partition_losses``).
    """

    bad: bool | None
    value: float | None = None
    threshold: float | None = None
    summary: str = ""
    description: str = ""
    window_start_ms: int | None = None
    window_end_ms: int | None = None
    numbers: dict[str, float] = field(default_factory=dict)
    suggestion: str | None = None
    attribution: tuple[dict[str, Any], ...] = ()


ATTRIBUTION_TOP = 3
"""How many partitions a completeness alert names (the ones that lost the most)."""


def attribution_text(losses: list[dict[str, Any]]) -> str:
    """Say in words where a window lost messages: ``partition 2 (leader broker 3): 120 lost, ...``."""
    parts = []
    for a in losses:
        leader = f"leader broker {a['leader']}" if a.get("leader") is not None else "leader unknown"
        parts.append(f"partition {a['partition']} ({leader}): {a['lost']:,} lost")
    return ", ".join(parts)


@dataclass(frozen=True)
class RuleInfo:
    """What ``kafka-audit alerts rules`` prints for one rule."""

    alertname: str
    severity: Severity
    condition: str
    threshold: str
    fire_after: str
    resolve_after: str


def _num(result: Mapping[str, Any], name: str) -> float | None:
    value = result.get(name)
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _numbers(result: Mapping[str, Any]) -> dict[str, float]:
    return {k: v for k in NUMBER_FIELDS if (v := _num(result, k)) is not None}


def _utc(ms: int | None) -> str:
    if ms is None:
        return "?"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _where(result: Mapping[str, Any]) -> str:
    return f"{result['topic']} ({result['tier']}), window {_utc(result.get('window_start_ms'))}"


def _suggestion(result: Mapping[str, Any]) -> str | None:
    text = result.get("suggestion")
    return str(text) if text else None


def _window_obs(result: Mapping[str, Any], **kw: Any) -> Observation:
    kw.setdefault("suggestion", _suggestion(result))
    return Observation(
        window_start_ms=result.get("window_start_ms"),
        window_end_ms=result.get("window_end_ms"),
        numbers=_numbers(result),
        **kw,
    )


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


@dataclass(frozen=True)
class CompletenessRule(WindowRule):
    """KafkaAuditCompletenessBelowTarget: completeness (unique / sent, fraction) < target.

    Judged on each final window; and, for a downstream tier (one whose ``previous_tier`` is not the
    producer tier: a replication tier such as MirrorMaker 2's target, an application consumer tier),
    also on a still-provisional window once ``tier_lag_ms`` have passed after its end: bad while the
    tier holds less than ``target`` of what the tier before it holds (``completeness_vs_previous``),
    i.e. it lags or lost messages on its hop (:meth:`evaluate_lagging`). The first tier after the
    producers is judged on final windows only, as producers' retries may still be in flight before.

    Attributes:
        target: Completeness target, fraction.
        tier_lag_ms: How long after a window's end a downstream tier may take to catch up with the tier
            before it, ms (None: downstream tiers are judged on final windows only).
    """

    target: float = 0.999
    tier_lag_ms: int | None = 30_000

    def evaluate_lagging(self, result: Mapping[str, Any], now_ms: int) -> Observation:
        """Judge a provisional window of a downstream tier at wall clock ``now_ms`` (ms).

        Bad if ``now_ms > window_end_ms + tier_lag_ms`` and ``completeness_vs_previous < target``;
        unknown (``bad=None``) otherwise: too early, not a downstream tier, or nothing to compare.
        """
        previous = result.get("previous_tier")
        value = _num(result, "completeness_vs_previous")
        end = result.get("window_end_ms")
        if (
            self.tier_lag_ms is None
            or previous in (None, PRODUCER_TIER)
            or value is None
            or end is None
            or now_ms <= int(end) + self.tier_lag_ms
            or value >= self.target
        ):
            return Observation(bad=None)
        behind = (_num(result, "previous_unique") or 0.0) - (_num(result, "unique") or 0.0)
        lag_s = (now_ms - int(end)) / 1000
        return _window_obs(
            result,
            bad=True,
            value=value,
            threshold=self.target,
            summary=(
                f"{result['topic']} ({result['tier']}): {value:.2%} of {previous}'s messages "
                f"{lag_s:.0f} s after the window's end, below target {self.target:.2%}"
            ),
            description=(
                f"{_where(result)}: {behind:,.0f} message(s) that {previous} holds have not reached "
                f"{result['tier']} {lag_s:.0f} s after the window's end (allowed lag "
                f"{self.tier_lag_ms / 1000:.0f} s): replication or consumption is behind or lost them."
            ),
        )

    def evaluate(self, result: Mapping[str, Any], firing: bool) -> Observation:
        """Bad if ``completeness < target``; unknown without completeness or with sent = 0."""
        value = _num(result, "completeness")
        sent = _num(result, "sent")
        if value is None or not sent:
            return Observation(bad=None)
        unique = _num(result, "unique") or 0.0
        loss = _num(result, "loss_rate")
        dup = _num(result, "duplicate_rate")
        top = window_result.partition_losses(result, top=ATTRIBUTION_TOP)
        where = (
            f"; lost most in partition(s) {', '.join(str(a['partition']) for a in top)} "
            f"led by broker(s) {leaders_text(top)}"
            if top
            else ""
        )
        return _window_obs(
            result,
            bad=value < self.target,
            value=value,
            threshold=self.target,
            summary=(
                f"{result['topic']} ({result['tier']}): completeness {value:.2%} "
                f"{'below' if value < self.target else 'meets'} target {self.target:.2%}{where}"
            ),
            description=(
                f"{_where(result)}: {unique:,.0f} of {sent:,.0f} messages arrived"
                + (f", R_l {loss:.2%}" if loss is not None else "")
                + (f", R_d {dup:.2%}" if dup is not None else "")
                + (f". Lost most: {attribution_text(top)}" if top else "")
                + "."
            ),
            attribution=tuple(top),
        )

    def info(self) -> RuleInfo:
        """Describe the rule."""
        fire, resolve = self._counts()
        condition = "completeness < target"
        if self.tier_lag_ms is not None:
            condition += (
                f"; downstream tiers also: < target of the tier before, {self.tier_lag_ms / 1000:.0f} s "
                "after window end"
            )
        return RuleInfo(self.alertname, self.severity, condition, f"{self.target:.4%}", fire, resolve)


@dataclass(frozen=True)
class GammaRule(WindowRule):
    """KafkaAuditGammaBelowTarget: gamma_actual < gamma_target (Eq. 2 KPI).

    The target is the window's ``gamma_target``, else the settings' ``gamma_target``. While firing,
    a window counts as good only at gamma >= target + ``resolve_margin``.
    """

    default_target: float | None = None
    resolve_margin: float = 0.0

    def evaluate(self, result: Mapping[str, Any], firing: bool) -> Observation:
        """Bad if gamma_actual < target (+ margin while firing); unknown without gamma or a target."""
        gamma = _num(result, "gamma_actual")
        target = _num(result, "gamma_target")
        if target is None:
            target = self.default_target
        if gamma is None or target is None:
            return Observation(bad=None)
        bound = target + self.resolve_margin if firing else target
        predicted = _num(result, "gamma_predicted")
        lo, p, hi = (_num(result, k) for k in ("p_loss_lo", "p_loss", "p_loss_hi"))
        loss = _num(result, "loss_rate")
        detail = f"{_where(result)}: gamma {gamma:.3f} (target {target:.3f}"
        detail += f", predicted {predicted:.3f})" if predicted is not None else ")"
        if loss is not None:
            detail += f"; R_l {loss:.2%}"
        if p is not None and lo is not None and hi is not None:
            detail += f", predicted P_l {p:.2%} [{lo:.2%}, {hi:.2%}]"
        suggestion = _suggestion(result)
        if suggestion:
            detail += f". Suggestion: {suggestion}"
        return _window_obs(
            result,
            bad=gamma < bound,
            value=gamma,
            threshold=target,
            summary=(
                f"{result['topic']} ({result['tier']}): gamma {gamma:.3f} "
                f"{'below' if gamma < target else 'meets'} target {target:.3f}"
            ),
            description=detail + ".",
        )

    def info(self) -> RuleInfo:
        """Describe the rule."""
        fire, resolve = self._counts()
        target = "window's gamma_target" + (
            f" (else {self.default_target:.3f})" if self.default_target is not None else ""
        )
        if self.resolve_margin:
            resolve += f", at gamma >= target + {self.resolve_margin:.3f}"
        return RuleInfo(self.alertname, self.severity, "gamma_actual < gamma_target", target, fire, resolve)


@dataclass(frozen=True)
class DriftRule(WindowRule):
    """KafkaAuditPredictionDrift: actual R_l outside the predicted 90% interval [p_loss_lo, p_loss_hi].

    ``for_count`` is k, the number of consecutive judged final windows. ``tolerance`` widens the interval
    on both sides (fraction of messages).

    Only windows whose ``model_calibrated`` is True are judged: the model that predicted them had a
    recent live MAE(P_l) on this deployment below the job's calibration threshold
    (``KAFKA_AUDIT_SPARK_CALIBRATION_MAX_MAE``), so R_l leaving the interval means the network or the
    producers' configuration changed, not that the model never fitted this deployment. A window of a
    model still calibrating (False), or written before the field existed (None), is unknown: it neither
    fires nor counts towards k, neither resolves nor breaks a streak (:mod:`alerts.state_machine`), so a
    firing drift alert stays firing through a calibrating period (e.g. after a promotion) and resolves on
    the first ``keep_firing_count`` calibrated windows inside the interval.
    """

    tolerance: float = 0.0

    def evaluate(self, result: Mapping[str, Any], firing: bool) -> Observation:
        """Bad if loss_rate < p_loss_lo - tolerance or > p_loss_hi + tolerance.

        Unknown if any of them is missing or the window's ``model_calibrated`` is not True.
        """
        if result.get("model_calibrated") is not True:
            return Observation(bad=None)
        loss, lo, hi = (_num(result, k) for k in ("loss_rate", "p_loss_lo", "p_loss_hi"))
        if loss is None or lo is None or hi is None:
            return Observation(bad=None)
        below, above = loss < lo - self.tolerance, loss > hi + self.tolerance
        where = "above" if above else "below" if below else "inside"
        p = _num(result, "p_loss")
        version = result.get("model_version")
        model = f" of model {version} (calibrated)" if version else ""
        return _window_obs(
            result,
            bad=below or above,
            value=loss,
            threshold=hi if loss >= lo else lo,
            summary=(
                f"{result['topic']} ({result['tier']}): actual R_l {loss:.2%} {where} the predicted "
                f"90% interval [{lo:.2%}, {hi:.2%}]"
            ),
            description=(
                f"{_where(result)}: measured R_l {loss:.2%}, predicted P_l "
                + (f"{p:.2%} " if p is not None else "")
                + f"[{lo:.2%}, {hi:.2%}]{model}, {self.for_count} window(s) in a row: the network (L, D) "
                "or the producers' configuration changed since the model fitted them."
            ),
        )

    def info(self) -> RuleInfo:
        """Describe the rule."""
        fire, resolve = self._counts()
        return RuleInfo(
            self.alertname,
            self.severity,
            "R_l outside [p_loss_lo, p_loss_hi], model calibrated",
            f"tolerance {self.tolerance:.4f}",
            fire,
            resolve,
        )


@dataclass(frozen=True)
class UnauditedProducersRule(WindowRule):
    """KafkaAuditUnauditedProducers: producers the cluster saw without audit snapshots > threshold."""

    threshold: int = 0

    def evaluate(self, result: Mapping[str, Any], firing: bool) -> Observation:
        """Bad if ``unaudited_producers > threshold``; unknown if the field is missing."""
        n = _num(result, "unaudited_producers")
        if n is None:
            return Observation(bad=None)
        messages = _num(result, "unaudited") or 0.0
        return _window_obs(
            result,
            bad=n > self.threshold,
            value=n,
            threshold=float(self.threshold),
            summary=f"{result['topic']} ({result['tier']}): {n:.0f} unaudited producer(s)",
            suggestion=_suggestion(result) or UNAUDITED_SUGGESTION,
            description=(
                f"{_where(result)}: the cluster holds messages of {n:.0f} producer id(s) that sent no audit "
                f"snapshot ({messages:,.0f} messages without stamps); their loss cannot be measured."
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
        unaudited, received = _num(result, "unaudited"), _num(result, "received")
        if unaudited is None or received is None:
            return Observation(bad=None)
        share = unaudited / received if received else 0.0
        audited = _num(result, "producers") or 0.0
        topic_audited = result.get(TOPIC_AUDITED, audited > 0)
        bad = share > self.threshold and (bool(topic_audited) or not self.needs_audited)
        numbers = {**_numbers(result), "unaudited": unaudited, "received": received, "unaudited_share": share}
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
                f"{_where(result)}: {unaudited:,.0f} of {received:,.0f} messages the cluster holds carry no "
                "audit stamp (producers that do not use AuditedProducer), in a topic with audited "
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
                f"{topic} ({tier}): window {_utc(start)}"
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


def window_rules(settings: AlertSettings) -> list[WindowRule]:
    """Return the enabled window rules configured by ``settings``."""
    s = settings
    rules: list[WindowRule] = [
        CompletenessRule(
            COMPLETENESS_BELOW_TARGET,
            s.completeness_severity,
            s.completeness_for_windows,
            s.completeness_keep_firing_windows,
            target=s.completeness_target,
            tier_lag_ms=s.completeness_tier_lag_ms,
        ),
        GammaRule(
            GAMMA_BELOW_TARGET,
            s.gamma_severity,
            s.gamma_for_windows,
            s.gamma_keep_firing_windows,
            default_target=s.gamma_target,
            resolve_margin=s.gamma_resolve_margin,
        ),
        DriftRule(
            PREDICTION_DRIFT,
            s.drift_severity,
            s.drift_windows,
            s.drift_keep_firing_windows,
            tolerance=s.drift_tolerance,
        ),
        UnauditedProducersRule(
            UNAUDITED_PRODUCERS,
            s.unaudited_severity,
            s.unaudited_for_windows,
            s.unaudited_keep_firing_windows,
            threshold=s.unaudited_producers_threshold,
        ),
        UnauditedTrafficRule(
            UNAUDITED_TRAFFIC,
            s.unaudited_traffic_severity,
            s.unaudited_traffic_for_windows,
            s.unaudited_traffic_keep_firing_windows,
            threshold=s.unaudited_share_threshold,
            needs_audited=s.unaudited_traffic_needs_audited,
        ),
    ]
    return [r for r in rules if r.alertname not in s.disabled_rules]


def audit_lag_rule(settings: AlertSettings) -> AuditLagRule | None:
    """Return the audit-lag rule configured by ``settings`` (None if disabled)."""
    s = settings
    if AUDIT_LAG in s.disabled_rules:
        return None
    return AuditLagRule(
        AUDIT_LAG,
        s.audit_lag_severity,
        s.audit_lag_for_evaluations,
        s.audit_lag_keep_firing_evaluations,
        grace_ms=s.grace_ms,
        margin_ms=s.audit_lag_margin_ms,
    )


def rule_infos(settings: AlertSettings) -> list[RuleInfo]:
    """Describe every enabled rule, in contract order."""
    infos = [r.info() for r in window_rules(settings)]
    lag = audit_lag_rule(settings)
    if lag is not None:
        infos.append(lag.info())
    return sorted(infos, key=lambda i: ALERT_NAMES.index(i.alertname))
