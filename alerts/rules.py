"""The six alert rules, enabled and configured from :class:`alerts.settings.AlertSettings`.

Window rules judge one final window result (``audit_record/window_result.avsc`` with its live-comparison
fields; ``docs/DESIGN.md``): :mod:`alerts.delivery_rules` (completeness, gamma, prediction drift) and
:mod:`alerts.unaudited_rules` (unaudited producers and traffic, unaccounted messages), on the base
:mod:`alerts.window_rule`.
The audit-lag rule (:mod:`alerts.audit_lag_rule`) judges the set of still-provisional windows of a
(topic, tier) at wall clock ``now``. What a rule returns is :mod:`alerts.observation`.
"""

from __future__ import annotations

from alerts.audit_lag_rule import AuditLagRule
from alerts.delivery_rules import CompletenessRule, DriftRule, GammaRule
from alerts.event import (
    ALERT_NAMES,
    AUDIT_LAG,
    COMPLETENESS_BELOW_TARGET,
    GAMMA_BELOW_TARGET,
    PREDICTION_DRIFT,
    UNACCOUNTED_MESSAGES,
    UNAUDITED_PRODUCERS,
    UNAUDITED_TRAFFIC,
)
from alerts.observation import RuleInfo
from alerts.settings import AlertSettings
from alerts.unaudited_rules import UnaccountedMessagesRule, UnauditedProducersRule, UnauditedTrafficRule
from alerts.window_rule import WindowRule


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
        UnaccountedMessagesRule(
            UNACCOUNTED_MESSAGES,
            s.unaccounted_severity,
            s.unaccounted_for_windows,
            s.unaccounted_keep_firing_windows,
            threshold=s.unaccounted_threshold,
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
