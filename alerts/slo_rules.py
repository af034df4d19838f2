"""Prometheus recording rules and multi-window multi-burn-rate alerts generated from the SLO settings.

For each completeness SLO (:class:`~alerts.slo_settings.CompletenessSlo`) and each window ``w`` its
alerts use (and its compliance period), over the Spark job's counters (``spark_streaming/metrics.py``;
they add every final window, so the ratios below are exact counts of final windows, up to
``increase()``'s extrapolation, which cancels in a ratio of two counters moved by the same windows)::

    slo:kafka_audit_messages_sent:increase<w>     sum by (topic, tier) (increase(sent_total[w]))
    slo:kafka_audit_completeness_error:ratio<w>   increase(lost_total[w]) / increase(sent_total[w])
    slo:kafka_audit_error_budget_remaining:ratio  1 - ratio<period> / (1 - objective)   (may be < 0)
    slo:kafka_audit_objective:ratio               the objective (no topic, tier)

each labelled ``slo="<name>"`` and selecting ``topic=~"<topic_pattern>", tier=~"<tier_pattern>"``.
For each freshness SLO (:class:`~alerts.slo_settings.FreshnessSlo`, threshold S seconds, one of the
freshness histogram's bounds), over ``kafka_audit_freshness_messages_total{le}`` (the tiers' freshness
histograms of final windows, cumulative per ``le``; :mod:`audit_record.freshness`)::

    slo:kafka_audit_freshness_messages:increase<w>  sum by (topic, tier) (increase(fresh{le="+Inf"}[w]))
    slo:kafka_audit_freshness_error:ratio<w>        (increase(fresh{le="+Inf"}) - increase(fresh{le="S"}))
                                                    / increase(fresh{le="+Inf"})   (held later than S)
    slo:kafka_audit_error_budget_remaining:ratio, slo:kafka_audit_objective:ratio   as above

Then one alert per SLO and window pair (SRE Workbook ch. 5, "Multiwindow, Multi-Burn-Rate Alerts"),
``KafkaAuditCompletenessBudgetBurn`` or ``KafkaAuditFreshnessBudgetBurn``: it fires while the error
ratio over both the long and the short window exceeds ``factor * (1 - objective)``; a page also needs
``low_traffic_min_events`` events (messages sent; messages held) in the long window. Labels: ``slo,
topic, tier, severity, urgency (page|ticket), long_window, short_window, burn_rate``.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from alerts.slo_settings import (
    BurnRateAlert,
    CompletenessSlo,
    FreshnessSlo,
    SloSettings,
    duration_seconds,
)
from audit_record.freshness import le_label

SENT = "kafka_audit_messages_sent_total"
LOST = "kafka_audit_messages_lost_total"
SENT_RECORD = "slo:kafka_audit_messages_sent:increase"
ERROR_RECORD = "slo:kafka_audit_completeness_error:ratio"
BUDGET_RECORD = "slo:kafka_audit_error_budget_remaining:ratio"
OBJECTIVE_RECORD = "slo:kafka_audit_objective:ratio"
ALERT_NAME = "KafkaAuditCompletenessBudgetBurn"
FRESHNESS = "kafka_audit_freshness_messages_total"
FRESHNESS_EVENTS_RECORD = "slo:kafka_audit_freshness_messages:increase"
FRESHNESS_ERROR_RECORD = "slo:kafka_audit_freshness_error:ratio"
FRESHNESS_ALERT_NAME = "KafkaAuditFreshnessBudgetBurn"

Slo = CompletenessSlo | FreshnessSlo


def promql_string(text: str) -> str:
    """Return ``text`` as a PromQL double-quoted string literal (backslashes and quotes escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def page_min_events(slo: Slo, alert: BurnRateAlert, settings: SloSettings) -> int:
    """Return the low-traffic guard of a page: events needed in the long window (0 for a ticket).

    ``settings.low_traffic_min_events`` if set, else ``ceil(1 / (factor * (1 - objective)))``: the
    fewest events in which a single bad one stays at or below the burn threshold.
    """
    if alert.urgency != "page":
        return 0
    if settings.low_traffic_min_events is not None:
        return settings.low_traffic_min_events
    return math.ceil(round(1.0 / (alert.factor * slo.error_budget), 6))


def _windows(slo: Slo, settings: SloSettings) -> list[str]:
    windows = {w for a in settings.burn_rate_alerts for w in (a.long_window, a.short_window)}
    windows.add(slo.period)
    return sorted(windows, key=duration_seconds)


def _budget(slo: Slo) -> str:
    return f"(1 - {slo.objective!r})"


def _days(seconds: float) -> str:
    return f"{seconds / 86_400:.3g} days" if seconds >= 86_400 else f"{seconds / 3_600:.3g} hours"


def _percent(x: float) -> str:
    return f"{100 * x:.6g}%"


def _records(slo: Slo) -> tuple[str, str, str]:
    """Return (events record, error-ratio record, alert name) of an SLO's kind."""
    if isinstance(slo, FreshnessSlo):
        return FRESHNESS_EVENTS_RECORD, FRESHNESS_ERROR_RECORD, FRESHNESS_ALERT_NAME
    return SENT_RECORD, ERROR_RECORD, ALERT_NAME


def _events_and_error(slo: Slo, w: str) -> tuple[str, str]:
    """Return the PromQL of an SLO's events and error ratio over window ``w`` (see the module doc)."""
    match = f"topic=~{promql_string(slo.topic_pattern)}, tier=~{promql_string(slo.tier_pattern)}"
    if isinstance(slo, FreshnessSlo):
        held = f'sum by (topic, tier) (increase({FRESHNESS}{{{match}, le="+Inf"}}[{w}]))'
        le = promql_string(le_label(slo.threshold_ms))
        fresh = f"sum by (topic, tier) (increase({FRESHNESS}{{{match}, le={le}}}[{w}]))"
        return held, f"(\n  {held}\n  -\n  {fresh}\n)\n/\n{held}"
    sent = f"sum by (topic, tier) (increase({SENT}{{{match}}}[{w}]))"
    lost = f"sum by (topic, tier) (increase({LOST}{{{match}}}[{w}]))"
    return sent, f"{lost}\n/\n{sent}"


def recording_rules(slo: Slo, settings: SloSettings) -> list[dict[str, Any]]:
    """Return the recording rules of one completeness or freshness SLO (see the module doc)."""
    assert slo.name is not None  # SloSettings.slos() names every SLO
    events_record, error_record, _ = _records(slo)
    labels = {"slo": slo.name}
    rules: list[dict[str, Any]] = [
        {"record": OBJECTIVE_RECORD, "expr": f"vector({slo.objective!r})", "labels": labels}
    ]
    for w in _windows(slo, settings):
        events, error = _events_and_error(slo, w)
        rules.append({"record": f"{events_record}{w}", "expr": events, "labels": labels})
        rules.append({"record": f"{error_record}{w}", "expr": error, "labels": labels})
    rules.append(
        {
            "record": BUDGET_RECORD,
            "expr": f"1 - {error_record}{slo.period}{{slo={promql_string(slo.name)}}} / {_budget(slo)}",
            "labels": labels,
        }
    )
    return rules


def burn_rate_alert(slo: Slo, alert: BurnRateAlert, settings: SloSettings) -> dict[str, Any]:
    """Return the alerting rule of one SLO and window pair (see the module doc)."""
    assert slo.name is not None  # SloSettings.slos() names every SLO
    events_record, error_record, alert_name = _records(slo)
    match = f"{{slo={promql_string(slo.name)}}}"
    threshold = f"({alert.factor!r} * {_budget(slo)})"
    expr = (
        f"(\n  {error_record}{alert.long_window}{match} > {threshold}\n"
        f"  and\n  {error_record}{alert.short_window}{match} > {threshold}\n)"
    )
    guard = page_min_events(slo, alert, settings)
    if guard > 0:
        expr += f"\nand on(slo, topic, tier)\n{events_record}{alert.long_window}{match} >= {guard}"
    limit = _percent(alert.factor * slo.error_budget)
    objective = _percent(slo.objective)
    if isinstance(slo, FreshnessSlo):
        stated = f"{objective} within {slo.threshold_s:g} s"
        what = (
            f"{{{{ $value | humanizePercentage }}}} of the messages of {{{{ $labels.topic }}}} that "
            f"{{{{ $labels.tier }}}} held in the last {alert.long_window} got there more than "
            f"{slo.threshold_s:g} s after their CreateTime"
        )
    else:
        stated = f"{objective} complete"
        what = (
            f"{{{{ $value | humanizePercentage }}}} of the messages sent to {{{{ $labels.topic }}}} in "
            f"the last {alert.long_window} did not reach {{{{ $labels.tier }}}}"
        )
    return {
        "alert": alert_name,
        "expr": expr,
        "labels": {
            "severity": alert.severity,
            "urgency": alert.urgency,
            "slo": slo.name,
            "long_window": alert.long_window,
            "short_window": alert.short_window,
            "burn_rate": f"{alert.factor:g}",
        },
        "annotations": {
            "summary": (
                f"{{{{ $labels.topic }}}} on {{{{ $labels.tier }}}}: SLO {slo.name} ({stated} "
                f"over {slo.period}) burning its error budget {alert.factor:g}x over {alert.long_window} "
                f"and {alert.short_window}"
            ),
            "description": (
                f"{what} (and more than {limit} "
                f"in the last {alert.short_window}): at this rate the {slo.period} error budget "
                f"({_percent(slo.error_budget)} of the messages) would be spent in "
                f"{_days(duration_seconds(slo.period) / alert.factor)}."
                + (f" Paged only with at least {guard} messages in {alert.long_window}." if guard else "")
            ),
        },
    }


def rules_document(settings: SloSettings) -> dict[str, Any]:
    """Return the Prometheus rules file (``groups``) of every SLO in ``settings``."""
    groups: list[dict[str, Any]] = []
    alerts: list[dict[str, Any]] = []
    for slo in settings.slos():
        groups.append({"name": f"kafka-audit-slo-{slo.name}", "rules": recording_rules(slo, settings)})
        alerts.extend(burn_rate_alert(slo, a, settings) for a in settings.burn_rate_alerts)
    if alerts:
        groups.append({"name": "kafka-audit-slo-alerts", "rules": alerts})
    return {"groups": groups}


def _header(settings: SloSettings) -> str:
    lines = [
        "# kafka-audit SLO rules, generated by `kafka-audit slo rules` from the SLO settings",
        "# (KAFKA_AUDIT_SLO_*, the [slo] section of the config file): do not edit, regenerate.",
        "# Check: promtool check rules <this file>. Burn-rate alerts: SRE Workbook ch. 5.",
    ]
    for slo in settings.slos():
        if isinstance(slo, CompletenessSlo):
            lines.append(
                f"# {slo.name}: completeness {_percent(slo.objective)} over {slo.period}, "
                f"topics ~ {slo.topic_pattern}, tiers ~ {slo.tier_pattern}"
            )
        elif isinstance(slo, FreshnessSlo):
            lines.append(
                f"# {slo.name}: freshness {_percent(slo.objective)} within {slo.threshold_s:g} s over "
                f"{slo.period}, topics ~ {slo.topic_pattern}, tiers ~ {slo.tier_pattern}"
            )
    return "\n".join(lines) + "\n"


class _Dumper(yaml.SafeDumper):
    """Writes multi-line strings (PromQL) as literal blocks, and no YAML aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        """Write every label map in full (a rules file is read by people, not only by Prometheus)."""
        return True


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str)


def rules_text(settings: SloSettings) -> str:
    """Return the rules file's text: a header naming the SLOs, then :func:`rules_document` as YAML."""
    body = yaml.dump(rules_document(settings), Dumper=_Dumper, sort_keys=False, width=1_000)
    return _header(settings) + body


def counts(settings: SloSettings) -> tuple[int, int]:
    """Return (recording rules, alerting rules) of :func:`rules_document`."""
    rules = [r for g in rules_document(settings)["groups"] for r in g["rules"]]
    return sum("record" in r for r in rules), sum("alert" in r for r in rules)
