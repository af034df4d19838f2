"""The alert rules on how a final window was delivered: completeness, the KPI gamma, prediction drift.

:class:`CompletenessRule` (completeness against its target, also a downstream tier against the tier
before it), :class:`GammaRule` (the KPI gamma against its target) and :class:`DriftRule` (the measured
R_l outside the predicted 90% interval). Symbols as in Wu, Shang, Wolter 2020: R_l = (sent - unique) /
sent (Eq. 3), P_l the predicted loss probability with its 90% interval [p_loss_lo, p_loss_hi]
(5th/95th percentile), gamma the KPI of Eq. 2. Fractions are 0-1 everywhere; text shows them in percent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from alerts.event import leaders_text
from alerts.observation import (
    Observation,
    RuleInfo,
    number_field,
    window_observation,
    window_place,
    window_suggestion,
)
from alerts.window_rule import WindowRule
from audit_record import PRODUCER_TIER, window_result

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
        value = number_field(result, "completeness_vs_previous")
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
        behind = (number_field(result, "previous_unique") or 0.0) - (number_field(result, "unique") or 0.0)
        lag_s = (now_ms - int(end)) / 1000
        return window_observation(
            result,
            bad=True,
            value=value,
            threshold=self.target,
            summary=(
                f"{result['topic']} ({result['tier']}): {value:.2%} of {previous}'s messages "
                f"{lag_s:.0f} s after the window's end, below target {self.target:.2%}"
            ),
            description=(
                f"{window_place(result)}: {behind:,.0f} message(s) that {previous} holds have not reached "
                f"{result['tier']} {lag_s:.0f} s after the window's end (allowed lag "
                f"{self.tier_lag_ms / 1000:.0f} s): replication or consumption is behind or lost them."
            ),
        )

    def evaluate(self, result: Mapping[str, Any], firing: bool) -> Observation:
        """Bad if ``completeness < target``; unknown without completeness or with sent = 0."""
        value = number_field(result, "completeness")
        sent = number_field(result, "sent")
        if value is None or not sent:
            return Observation(bad=None)
        unique = number_field(result, "unique") or 0.0
        loss = number_field(result, "loss_rate")
        dup = number_field(result, "duplicate_rate")
        top = window_result.partition_losses(result, top=ATTRIBUTION_TOP)
        where = (
            f"; lost most in partition(s) {', '.join(str(a['partition']) for a in top)} "
            f"led by broker(s) {leaders_text(top)}"
            if top
            else ""
        )
        return window_observation(
            result,
            bad=value < self.target,
            value=value,
            threshold=self.target,
            summary=(
                f"{result['topic']} ({result['tier']}): completeness {value:.2%} "
                f"{'below' if value < self.target else 'meets'} target {self.target:.2%}{where}"
            ),
            description=(
                f"{window_place(result)}: {unique:,.0f} of {sent:,.0f} messages arrived"
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
        gamma = number_field(result, "gamma_actual")
        target = number_field(result, "gamma_target")
        if target is None:
            target = self.default_target
        if gamma is None or target is None:
            return Observation(bad=None)
        bound = target + self.resolve_margin if firing else target
        predicted = number_field(result, "gamma_predicted")
        lo, p, hi = (number_field(result, k) for k in ("p_loss_lo", "p_loss", "p_loss_hi"))
        loss = number_field(result, "loss_rate")
        detail = f"{window_place(result)}: gamma {gamma:.3f} (target {target:.3f}"
        detail += f", predicted {predicted:.3f})" if predicted is not None else ")"
        if loss is not None:
            detail += f"; R_l {loss:.2%}"
        if p is not None and lo is not None and hi is not None:
            detail += f", predicted P_l {p:.2%} [{lo:.2%}, {hi:.2%}]"
        suggestion = window_suggestion(result)
        if suggestion:
            detail += f". Suggestion: {suggestion}"
        return window_observation(
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
        loss, lo, hi = (number_field(result, k) for k in ("loss_rate", "p_loss_lo", "p_loss_hi"))
        if loss is None or lo is None or hi is None:
            return Observation(bad=None)
        below, above = loss < lo - self.tolerance, loss > hi + self.tolerance
        where = "above" if above else "below" if below else "inside"
        p = number_field(result, "p_loss")
        version = result.get("model_version")
        model = f" of model {version} (calibrated)" if version else ""
        return window_observation(
            result,
            bad=below or above,
            value=loss,
            threshold=hi if loss >= lo else lo,
            summary=(
                f"{result['topic']} ({result['tier']}): actual R_l {loss:.2%} {where} the predicted "
                f"90% interval [{lo:.2%}, {hi:.2%}]"
            ),
            description=(
                f"{window_place(result)}: measured R_l {loss:.2%}, predicted P_l "
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
