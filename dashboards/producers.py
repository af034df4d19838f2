"""The "Producer reliability" dashboard: per producer, its configuration, network and suggestions.

The Spark job exports, from each producer's newest audit snapshot, the librdkafka configuration in
effect (``kafka_audit_producer_info``: ``acks``, ``batch.num.messages``, ``message.timeout.ms``,
``linger.ms``, ``enable.idempotence``, the polling interval as labels), the measured round-trip time
(librdkafka ``rtt.avg``) and cumulative retries (``txretries``); and per topic and tier the configuration
change the predictor suggests with the gamma it predicts after the change (``kafka_audit_suggestion_info``).
"""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard, Row
from grafana_foundation_sdk.models.dashboard import DashboardCursorSync

from dashboards._panels import datasource_variable, label_variable, query, table, timeseries

UID = "kafka-audit-producers"
TITLE = "Producer reliability"
SEL = 'topic=~"$topic", producer=~"$producer"'
RATE = "$__rate_interval"


def producer_dashboard() -> Dashboard:
    """Build the "Producer reliability" dashboard (uid ``kafka-audit-producers``)."""
    d = (
        Dashboard(TITLE)
        .uid(UID)
        .description("Per producer: librdkafka configuration in effect, RTT, retries; suggested changes.")
        .tags(["kafka-audit", "kafka", "producers"])
        .refresh("30s")
        .time("now-1h", "now")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .with_variable(datasource_variable())
        .with_variable(label_variable("topic", "Topic", "label_values(kafka_audit_producer_info, topic)"))
        .with_variable(
            label_variable(
                "producer",
                "Producer",
                'label_values(kafka_audit_producer_info{topic=~"$topic"}, producer)',
            )
        )
    )
    return (
        d.with_row(Row("Configuration in effect"))
        .with_panel(
            table(
                "Producer configuration",
                "librdkafka configuration of each producer's newest audit snapshot: acks, "
                "batch.num.messages, message.timeout.ms (ms), linger.ms (ms), enable.idempotence.",
                [query(f"kafka_audit_producer_info{{{SEL}}}", instant=True, table=True)],
                ["Time", "Value", "__name__", "instance", "job"],
            )
        )
        .with_row(Row("Network and retries"))
        .with_panel(
            timeseries(
                "Round-trip time",
                "Average broker round-trip time the producer measured (librdkafka rtt.avg, s).",
                [query(f"kafka_audit_producer_rtt_seconds{{{SEL}}}", "{{producer}} {{topic}}")],
                "s",
            )
        )
        .with_panel(
            timeseries(
                "Retries",
                "Produce request retries per second (rate of librdkafka's cumulative txretries).",
                [
                    query(
                        f"rate(kafka_audit_producer_tx_retries{{{SEL}}}[{RATE}])",
                        "{{producer}} {{topic}}",
                    )
                ],
                "cps",
            )
        )
        .with_row(Row("Suggestions"))
        .with_panel(
            table(
                "Suggested configuration changes",
                "The smallest configuration change whose predicted gamma meets the target, per topic and "
                "tier; Value is the gamma predicted after the change (0-1).",
                [query('kafka_audit_suggestion_info{topic=~"$topic"}', instant=True, table=True)],
                ["Time", "__name__", "instance", "job"],
            )
        )
    )
