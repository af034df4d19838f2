"""The "SLOs" dashboard: error budget left, burn rates, the windows that spent the budget, freshness.

Its numbers are the Spark job's own SLO evaluation (:mod:`alerts.slo_evaluation`, gauges in the job's
exporter): the same arithmetic over the same final windows as ``kafka-audit slo status`` (tested:
``tests/integration/test_slo_job_live.py``), so it needs no recording rules. Labels ``slo, topic,
tier`` (``window`` for burn rates):

* ``kafka_audit_slo_error_budget_remaining_ratio``: 1 - error ratio over the compliance period /
  (1 - objective); below 0 when overspent;
* ``kafka_audit_slo_burn_rate{window}``: error ratio over each alert window / (1 - objective);
* ``kafka_audit_slo_period_messages{kind}`` (``sent``, ``lost``) and
  ``kafka_audit_slo_error_budget_messages``: what the budget is in messages;
* the windows that spent it: the job's ``kafka_audit_messages_lost_total`` per interval, as a share of
  the budget in messages (each bar: the final windows that ended in the interval);
* freshness per tier: percentiles of ``kafka_audit_freshness_messages_total{le}`` (the tiers' freshness
  histograms, exact counts per bucket bound; ``histogram_quantile`` interpolates inside a bucket, the
  SLOs themselves never do).
"""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard, Row
from grafana_foundation_sdk.models.common import GraphDrawStyle
from grafana_foundation_sdk.models.dashboard import DashboardCursorSync

from dashboards._panels import (
    datasource_variable,
    firing_alerts_annotation,
    label_variable,
    query,
    stat,
    table,
    timeseries,
)

UID = "kafka-audit-slos"
TITLE = "SLOs"
SEL = 'slo=~"$slo", topic=~"$topic", tier=~"$tier"'
TOPIC_TIER = 'topic=~"$topic", tier=~"$tier"'
BUDGET_METRIC = "kafka_audit_slo_error_budget_remaining_ratio"
BUDGET = f"{BUDGET_METRIC}{{{SEL}}}"
BURN = f"kafka_audit_slo_burn_rate{{{SEL}}}"
SENT = f'kafka_audit_slo_period_messages{{{SEL}, kind="sent"}}'
LOST = f'kafka_audit_slo_period_messages{{{SEL}, kind="lost"}}'
SPENT = (
    f"sum by (topic, tier) (increase(kafka_audit_messages_lost_total{{{TOPIC_TIER}}}[$__interval]))\n"
    f"/ on (topic, tier) group_right () (kafka_audit_slo_error_budget_messages{{{SEL}}} > 0)"
)
"""The share of the period's error budget the final windows that ended in each interval spent (one series
per SLO: several SLOs may judge one topic and tier, so the budget side is the "many" one)."""
FRESHNESS_QUANTILES = (0.5, 0.9, 0.99)
SLO_ALERTS = 'kafka_audit_alerts_firing{alertname=~"KafkaAudit.*BudgetBurn", topic=~"$topic"} > 0'


def freshness_quantile(q: float) -> str:
    """Return the PromQL of freshness percentile ``q`` (0-1) per tier, s, over the dashboard's interval."""
    return (
        f"histogram_quantile({q:g}, sum by (tier, le) "
        f"(rate(kafka_audit_freshness_messages_total{{{TOPIC_TIER}}}[$__rate_interval])))"
    )


def slo_dashboard() -> Dashboard:
    """Build the "SLOs" dashboard (uid ``kafka-audit-slos``)."""
    d = (
        Dashboard(TITLE)
        .uid(UID)
        .description(
            "Service-level objectives evaluated by the Spark job: error budget left, burn rates over the "
            "alert windows, the windows that spent the budget, freshness percentiles per tier."
        )
        .tags(["kafka-audit", "kafka", "slo"])
        .refresh("30s")
        .time("now-6h", "now")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .with_variable(datasource_variable())
        .with_variable(label_variable("slo", "SLO", "label_values(kafka_audit_slo_objective_ratio, slo)"))
        .with_variable(
            label_variable(
                "topic",
                "Topic",
                f'label_values({BUDGET_METRIC}{{slo=~"$slo"}}, topic)',
            )
        )
        .with_variable(
            label_variable(
                "tier",
                "Tier",
                f'label_values({BUDGET_METRIC}{{slo=~"$slo", topic=~"$topic"}}, tier)',
            )
        )
        .annotation(firing_alerts_annotation(SLO_ALERTS))
    )
    return (
        d.with_row(Row("Error budget"))
        .with_panel(
            stat(
                "Lowest budget left",
                "The smallest error budget left over the compliance period among the selected SLOs, topics "
                "and tiers: 1 - (lost / sent) / (1 - objective); below 0 when overspent.",
                [query(f"min({BUDGET})", instant=True)],
                "percentunit",
                [(None, "red"), (0.0, "orange"), (0.5, "green")],
            )
        )
        .with_panel(
            table(
                "Budget per SLO, topic and tier",
                "Now, per SLO, topic and tier: the budget left (A), the messages sent (B) and lost (C) in "
                "the final windows of the compliance period, and the budget in messages (D: (1 - objective) "
                "x sent). The same numbers as `kafka-audit slo status`.",
                [
                    query(BUDGET, instant=True, table=True),
                    query(SENT, instant=True, table=True),
                    query(LOST, instant=True, table=True),
                    query(f"kafka_audit_slo_error_budget_messages{{{SEL}}}", instant=True, table=True),
                ],
                ["Time", "__name__", "instance", "job", "kind"],
                width=18,
                height=6,
            )
        )
        .with_panel(
            timeseries(
                "Error budget remaining",
                "Budget left over the compliance period as the job evaluated it at each micro-batch (1 = "
                "untouched, 0 = spent, below 0 = overspent).",
                [query(BUDGET, "{{slo}} {{topic}} {{tier}}")],
                "percentunit",
                width=24,
                min_val=None,
            )
        )
        .with_row(Row("Burn rate"))
        .with_panel(
            timeseries(
                "Burn rate per alert window",
                "Error ratio over each alert window / (1 - objective): 1 spends exactly the budget over the "
                "period. A page fires while both windows of a pair exceed its factor (14.4 over 1h and 5m, "
                "6 over 6h and 30m by default).",
                [query(BURN, "{{slo}} {{topic}} {{tier}} {{window}}")],
                "short",
                width=24,
            )
        )
        .with_row(Row("Windows that spent the budget"))
        .with_panel(
            timeseries(
                "Budget spent per interval",
                "Share of the period's error budget (in messages) that the final windows ending in each "
                "interval lost: kafka_audit_messages_lost_total's increase / the budget in messages. Tall "
                "bars are the windows that spent the budget.",
                [query(SPENT, "{{slo}} {{topic}} {{tier}}")],
                "percentunit",
            ).draw_style(GraphDrawStyle.BARS)
        )
        .with_panel(
            timeseries(
                "Messages lost per interval",
                "Messages lost (sent - unique) in the final windows ending in each interval.",
                [
                    query(
                        f"sum by (topic, tier) (increase(kafka_audit_messages_lost_total{{{TOPIC_TIER}}}"
                        "[$__interval]))",
                        "{{topic}} {{tier}}",
                    )
                ],
                "short",
            ).draw_style(GraphDrawStyle.BARS)
        )
        .with_row(Row("Freshness"))
        .with_panel(
            timeseries(
                "Freshness percentiles per tier",
                "How long after its CreateTime each tier held the messages (p50, p90, p99 per tier, s), "
                "from the tiers' freshness histograms in the final windows.",
                [
                    query(freshness_quantile(q), f"p{round(100 * q)} {{{{tier}}}}")
                    for q in FRESHNESS_QUANTILES
                ],
                "s",
                width=24,
            )
        )
    )
