"""The "Kafka completeness" dashboard: per topic and tier, what was sent, what arrived, and why.

Rows (top to bottom): completeness (newest final window, over time, sent vs received, lost and
duplicated); unaudited traffic (messages without an audit stamp per topic and tier, and their share of
the topic's traffic: never counted as loss); the tier view (every tier of a topic, producer -> cluster ->
MirrorMaker 2 replica -> application consumers: completeness per tier, against the tier before, lag
after the window's end, gap, duplicates added); one row per topic with the measured R_l and R_d next to
the predictor's P_l and P_d and their 90% interval band (Wu et al. 2020, Eq. 1 and 3) and the KPI
gamma against its target (Eq. 2);
the control loop (configuration changes per producer group by kind, ``kafka_audit_control_decisions_total``;
its kill switch); audit health (audit lag, unaudited producers, window results, micro-batch duration).
Firing alerts (``kafka_audit_alerts_firing``), model promotions (``kafka_audit_model_decisions_total``:
the predictions change with the model) and configuration changes and rollbacks of the control loop
(the gamma changes with the configuration) are annotations on every time series panel.

Template variables: ``$cluster`` (derived from the ``tier`` label ``cluster:<name>`` with a regex),
``$topic`` and ``$tier``; every query is filtered by all three.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import AnnotationQuery, Dashboard, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.builders.timeseries import Panel as TimeseriesPanel
from grafana_foundation_sdk.models.common import GraphDrawStyle
from grafana_foundation_sdk.models.dashboard import DashboardCursorSync, ValueMap, ValueMappingResult

from dashboards._panels import (
    band,
    control_annotation,
    dashed,
    datasource_variable,
    decision_annotation,
    firing_alerts_annotation,
    label_variable,
    query,
    stat,
    timeseries,
)

UID = "kafka-audit-completeness"
TITLE = "Kafka completeness"
#: Label matchers of every per-(topic, tier) query: the selected topics, tiers and clusters.
SEL = 'topic=~"$topic", tier=~"$tier", tier=~"cluster:$cluster"'
#: Label matchers of the per-topic row (repeated for each selected topic).
ROW_SEL = 'topic="$topic", tier=~"$tier", tier=~"cluster:$cluster"'
RATE = "$__rate_interval"
WHO = "{{topic}} {{tier}}"


def _per_second(counter: str, legend: str) -> Dataquery:
    """Per-second rate of a per-(topic, tier) counter over final windows, summed per topic and tier."""
    return query(f"sum by (topic, tier) (rate({counter}{{{SEL}}}[{RATE}]))", legend)


def topic_variables(d: Dashboard) -> Dashboard:
    """Add ``$datasource``, ``$cluster`` (from the ``tier`` label), ``$topic`` and ``$tier`` to ``d``."""
    return (
        d.with_variable(datasource_variable())
        .with_variable(
            label_variable(
                "cluster",
                "Cluster",
                "label_values(kafka_audit_windows_total, tier)",
                regex="/^cluster:(.+)$/",
            )
        )
        .with_variable(
            label_variable(
                "topic",
                "Topic",
                'label_values(kafka_audit_windows_total{tier=~"cluster:$cluster"}, topic)',
            )
        )
        .with_variable(
            label_variable(
                "tier",
                "Tier",
                'label_values(kafka_audit_windows_total{tier=~"cluster:$cluster", topic=~"$topic"}, tier)',
            )
        )
    )


def _completeness_row(d: Dashboard) -> Dashboard:
    return (
        d.with_row(Row("Completeness"))
        .with_panel(
            stat(
                "Completeness, newest final window",
                "Unique messages the cluster holds / messages producers sent, in the newest final window "
                "(1 - R_l). Red below 99%, yellow below 99.9%.",
                [query(f"kafka_audit_completeness_ratio{{{SEL}}}", WHO, instant=True)],
                "percentunit",
                [(None, "red"), (0.99, "yellow"), (0.999, "green")],
                width=6,
                height=8,
            )
        )
        .with_panel(
            timeseries(
                "Completeness over time",
                "Completeness of each final window (unique received / sent, fraction), per topic and tier.",
                [query(f"kafka_audit_completeness_ratio{{{SEL}}}", WHO)],
                "percentunit",
                width=18,
                max_val=1,
                min_val=None,
            )
        )
        .with_panel(
            timeseries(
                "Sent vs received",
                "Messages per second producers sent and the cluster holds (unique), over final windows.",
                [
                    _per_second("kafka_audit_messages_sent_total", "sent {{topic}} {{tier}}"),
                    _per_second("kafka_audit_messages_unique_total", "received (unique) {{topic}} {{tier}}"),
                ],
                "cps",
            )
        )
        .with_panel(
            timeseries(
                "Lost and duplicated",
                "Messages per second lost (sent - unique) and extra copies (duplicates), final windows.",
                [
                    _per_second("kafka_audit_messages_lost_total", "lost {{topic}} {{tier}}"),
                    _per_second("kafka_audit_messages_duplicated_total", "duplicated {{topic}} {{tier}}"),
                ],
                "cps",
            )
        )
    )


def _unaudited_row(d: Dashboard) -> Dashboard:
    """Add the unaudited-traffic row: unaudited messages per second, their share, and unaccounted messages."""
    return (
        d.with_row(Row("Unaudited traffic"))
        .with_panel(
            timeseries(
                "Unaudited messages",
                "Messages per second the cluster holds without an audit stamp (producers that do not use "
                "AuditedProducer, e.g. kcat), next to all messages it holds, over final windows. Their loss "
                "cannot be measured; they never count as lost.",
                [
                    _per_second("kafka_audit_messages_unaudited_total", "unaudited {{topic}} {{tier}}"),
                    _per_second("kafka_audit_messages_received_total", "all received {{topic}} {{tier}}"),
                ],
                "cps",
            )
        )
        .with_panel(
            timeseries(
                "Unaudited share of the traffic",
                "Unaudited / received messages of each final window (fraction). KafkaAuditUnauditedTraffic "
                "fires when it exceeds its threshold (default 0) on a topic that also has audited "
                "producers.",
                [query(f"kafka_audit_unaudited_ratio{{{SEL}}}", WHO)],
                "percentunit",
                max_val=1,
            )
        )
        .with_panel(
            timeseries(
                "Unaccounted messages",
                "Messages of the newest final window whose audit stamp names a producer id that sent no "
                "snapshot for the topic and window (a crashed producer whose snapshots were lost, a client "
                "that copies headers, a garbled or forged stamp), and per second over final windows. Never "
                "counted as sent, lost or duplicated; KafkaAuditUnaccountedMessages fires on any.",
                [
                    query(f"kafka_audit_unaccounted_messages{{{SEL}}}", "newest window {{topic}} {{tier}}"),
                    _per_second("kafka_audit_messages_unaccounted_total", "per second {{topic}} {{tier}}"),
                ],
                "short",
            )
        )
    )


#: Label matchers of the tier view: every tier of the selected topics (producer -> clusters -> consumers),
#: so neither ``$tier`` nor ``$cluster`` (cluster tiers only) filter it.
TIER_SEL = 'topic=~"$topic"'
#: Legend of the tier view: the topic and the tier.
BY_TIER = "{{topic}} {{tier}}"
TIER_VIEW_PANELS = (
    "Completeness per tier",
    "Completeness vs the tier before",
    "Tier lag after window end",
    "Behind the tier before (provisional windows)",
    "Duplicates added per tier",
)
"""Titles of the tier-view panels (``docs/DESIGN.md``, "Tiers"); their queries span every tier."""


def _tiers_row(d: Dashboard) -> Dashboard:
    """Add the tier view: per topic, each tier (cluster, replication, application consumers) over time.

    As LinkedIn's audit UI: completeness of every tier against the producers, and against the tier
    before it (where a hop loses or lags), the lag after the window's end at which each tier reached
    its final counts, what a tier still misses of the tier before (live, before windows are final)
    and the duplicates each hop adds (MirrorMaker 2 is at-least-once).
    """
    return (
        d.with_row(Row("Tiers"))
        .with_panel(
            timeseries(
                TIER_VIEW_PANELS[0],
                "Completeness of each final window at every tier of the topic (unique / sent by the "
                "producers, fraction): the cluster the producers write to, clusters MirrorMaker 2 "
                "replicates to, application consumer groups (AuditedConsumer).",
                [query(f"kafka_audit_completeness_ratio{{{TIER_SEL}}}", BY_TIER)],
                "percentunit",
                max_val=1,
                min_val=None,
            )
        )
        .with_panel(
            timeseries(
                TIER_VIEW_PANELS[1],
                "Unique messages of each final window at a tier / at the tier before it (fraction): a "
                "drop shows which hop lost messages.",
                [query(f"kafka_audit_tier_completeness_ratio{{{TIER_SEL}}}", BY_TIER)],
                "percentunit",
                max_val=1,
                min_val=None,
            )
        )
        .with_panel(
            timeseries(
                TIER_VIEW_PANELS[2],
                "How long after its end each final window reached its final counts at each tier, seconds "
                "(resolution: the tier's snapshot interval). Replication outages show as lag at the target "
                "cluster's tier and every tier after it.",
                [query(f"kafka_audit_tier_lag_seconds{{{TIER_SEL}}}", BY_TIER)],
                "s",
                width=8,
            )
        )
        .with_panel(
            timeseries(
                TIER_VIEW_PANELS[3],
                "Messages the tier before holds that this tier does not (yet), summed over the windows "
                "still provisional: a replication or consumer gap before windows are final.",
                [query(f"kafka_audit_tier_behind_messages{{{TIER_SEL}}}", BY_TIER)],
                "short",
                width=8,
            )
        )
        .with_panel(
            timeseries(
                TIER_VIEW_PANELS[4],
                "Duplicates per second each tier adds to the tier before's, over final windows "
                "(MirrorMaker 2 re-copies after a restart, application re-reads after a crash).",
                [
                    query(
                        f"sum by (topic, tier) (rate(kafka_audit_tier_duplicates_added_total{{{TIER_SEL}}}"
                        f"[{RATE}]))",
                        BY_TIER,
                    )
                ],
                "cps",
                width=8,
            )
        )
    )


def loss_vs_predicted(width: int = 8) -> TimeseriesPanel:
    """Return the per-topic panel of the measured R_l against the predicted P_l and its 90% band.

    For a row repeated per ``$topic`` (:data:`ROW_SEL`).
    """
    r_l = timeseries(
        "R_l actual vs predicted P_l",
        "Measured loss rate R_l of each final window next to the predictor's P_l for that window's "
        "producer configuration and measured network (p50), shaded between the p05 and p95 bounds.",
        [
            query(f"kafka_audit_loss_ratio{{{ROW_SEL}}}", "R_l actual"),
            query(f'kafka_audit_predicted_loss_ratio{{{ROW_SEL}, bound="p50"}}', "P_l predicted"),
            query(f'kafka_audit_predicted_loss_ratio{{{ROW_SEL}, bound="p05"}}', "P_l p05"),
            query(f'kafka_audit_predicted_loss_ratio{{{ROW_SEL}, bound="p95"}}', "P_l p95"),
        ],
        "percentunit",
        width=width,
    )
    return band(r_l, "P_l p05", "P_l p95")


def _prediction_row(d: Dashboard) -> Dashboard:
    """One row per topic: actual vs predicted R_l and R_d with the 90% interval band, gamma vs target."""
    r_d = timeseries(
        "R_d actual vs predicted P_d",
        "Measured duplicate rate R_d of each final window next to the predicted P_d (p50), shaded "
        "between the p05 and p95 bounds.",
        [
            query(f"kafka_audit_duplicate_ratio{{{ROW_SEL}}}", "R_d actual"),
            query(f'kafka_audit_predicted_duplicate_ratio{{{ROW_SEL}, bound="p50"}}', "P_d predicted"),
            query(f'kafka_audit_predicted_duplicate_ratio{{{ROW_SEL}, bound="p05"}}', "P_d p05"),
            query(f'kafka_audit_predicted_duplicate_ratio{{{ROW_SEL}, bound="p95"}}', "P_d p95"),
        ],
        "percentunit",
        width=8,
    )
    gamma = timeseries(
        "gamma vs target",
        "The KPI gamma (0-1, Eq. 2) from the measured rates (actual) and from the predicted ones, "
        "against the target; below the target the job suggests a configuration change.",
        [
            query(f'kafka_audit_gamma{{{ROW_SEL}, kind="actual"}}', "gamma actual"),
            query(f'kafka_audit_gamma{{{ROW_SEL}, kind="predicted"}}', "gamma predicted"),
            query(f"kafka_audit_gamma_target{{{ROW_SEL}}}", "target"),
        ],
        "percentunit",
        width=8,
        max_val=1,
    )
    return (
        d.with_row(Row("$topic: actual vs predicted").repeat("topic"))
        .with_panel(loss_vs_predicted())
        .with_panel(band(r_d, "P_d p05", "P_d p95"))
        .with_panel(dashed(gamma, "target"))
    )


def _control_row(d: Dashboard) -> Dashboard:
    """Add the control loop's row: its decisions per producer group over time, and its kill switch."""
    changes = (
        timeseries(
            "Configuration changes",
            "Decisions of the control loop per interval, per producer group: change (a new configuration "
            "written to the control topic), rollback (measured gamma got worse), kept (it did not), advice "
            "(advise mode or kill switch: not written); and suggestions a guardrail held back, by reason "
            "(bounds, margin, rolled_back, evaluating, dwell, not_applied). Changes and rollbacks are also "
            "annotations.",
            [
                query(
                    "sum by (group, kind) (increase("
                    f'kafka_audit_control_decisions_total{{kind!="held"}}[{RATE}]))',
                    "{{kind}} {{group}}",
                ),
                query(
                    "sum by (group, reason) (increase("
                    f'kafka_audit_control_decisions_total{{kind="held"}}[{RATE}]))',
                    "held: {{reason}} {{group}}",
                ),
            ],
            "short",
            width=18,
        )
        .draw_style(GraphDrawStyle.BARS)
        .fill_opacity(60)
    )
    kill = stat(
        "Control kill switch",
        "On while the control loop's global kill switch is on (setting, the file control.kill in the "
        "checkpoint directory, or KAFKA_AUDIT_CONTROL_KILL=1): nothing is written, decisions are advice.",
        [query("max(kafka_audit_control_kill_switch)", "kill switch", instant=True)],
        "none",
        [(None, "green"), (1, "red")],
        width=6,
        height=8,
    ).mappings(
        [
            ValueMap(
                {
                    "0": ValueMappingResult(text="off", color="green"),
                    "1": ValueMappingResult(text="ON: no changes", color="red"),
                }
            )
        ]
    )
    return d.with_row(Row("Control loop")).with_panel(changes).with_panel(kill)


def _health_row(d: Dashboard) -> Dashboard:
    return (
        d.with_row(Row("Audit health"))
        .with_panel(
            timeseries(
                "Audit lag",
                "Age of the newest final window's end (wall clock - window end, s) per topic and tier, the "
                "job's watermark lag (wall clock - event-time watermark, s), and how long after its end the "
                "newest window waits before it is final (the grace, or its producers' largest "
                "message.timeout.ms + margin, s).",
                [
                    query(f"time() - kafka_audit_last_final_window_end_seconds{{{SEL}}}", WHO),
                    query("kafka_audit_watermark_lag_seconds", "watermark lag"),
                    query(f"kafka_audit_final_wait_seconds{{{SEL}}}", "final wait {{topic}} {{tier}}"),
                ],
                "s",
                width=8,
            )
        )
        .with_panel(
            timeseries(
                "Unaudited producers",
                "Producers whose messages the cluster holds but which sent no audit snapshot (newest final "
                "window): their loss cannot be measured.",
                [query(f"kafka_audit_unaudited_producers{{{SEL}}}", WHO)],
                "short",
                width=8,
            )
        )
        .with_panel(
            timeseries(
                "Window results",
                "Window results per second emitted by the Spark job, by state (provisional / final).",
                [
                    query(
                        f"sum by (state) (rate(kafka_audit_windows_total{{{SEL}}}[{RATE}]))",
                        "{{state}}",
                    )
                ],
                "cps",
                width=8,
            )
        )
        .with_panel(
            timeseries(
                "Micro-batch duration",
                "Spark micro-batch duration, 50th and 95th percentile (s).",
                [
                    query(
                        "histogram_quantile(0.5, sum by (le) "
                        f"(rate(kafka_audit_batch_duration_seconds_bucket[{RATE}])))",
                        "p50",
                    ),
                    query(
                        "histogram_quantile(0.95, sum by (le) "
                        f"(rate(kafka_audit_batch_duration_seconds_bucket[{RATE}])))",
                        "p95",
                    ),
                ],
                "s",
                width=24,
                height=6,
            )
        )
    )


def alert_annotation() -> AnnotationQuery:
    """Return the annotation marking firing kafka-audit alerts of the selected topics."""
    return firing_alerts_annotation('kafka_audit_alerts_firing{topic=~"$topic"} == 1')


def completeness_dashboard() -> Dashboard:
    """Build the "Kafka completeness" dashboard (a grafana-foundation-sdk builder, uid :data:`UID`)."""
    d = (
        Dashboard(TITLE)
        .uid(UID)
        .description("Per topic and tier: completeness, R_l and R_d actual vs predicted, gamma, audit lag.")
        .tags(["kafka-audit", "kafka", "completeness"])
        .refresh("30s")
        .time("now-1h", "now")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .annotation(alert_annotation())
        .annotation(decision_annotation("promoted"))
        .annotation(control_annotation())
    )
    return _health_row(
        _control_row(_prediction_row(_tiers_row(_unaudited_row(_completeness_row(topic_variables(d))))))
    )
