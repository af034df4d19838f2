"""The "Kafka brokers" dashboard: per broker, the QoS metrics of the brokers' JMX exporters.

Every broker kafka-audit runs (``kafka-audit kafka start``, docker-compose) has the Prometheus JMX
exporter java agent; its rules (``kafka_plumbing/jmx_exporter.yaml``) name the Kafka MBeans as listed in
``kafka_plumbing.jmx_exporter.BROKER_METRICS``, and the scrape configuration labels each broker's series
``broker="<node.id>"``. Panels, per broker: bytes in and out per second and messages in
(``BrokerTopicMetrics`` ``BytesInPerSec``, ``BytesOutPerSec``, ``MessagesInPerSec``, the broker totals),
failed produce and fetch requests per second (``FailedProduceRequestsPerSec``,
``FailedFetchRequestsPerSec``); the 99th percentile of the total time of Produce and FetchConsumer
requests and of their request queue time (``RequestMetrics`` ``TotalTimeMs``, ``RequestQueueTimeMs``,
ms); under-replicated and offline partitions, ISR shrinks and expands, partitions led and leader
elections (``ReplicaManager``, ``KafkaController``, ``ControllerStats``); network processor and request
handler idle ratios; process CPU, JVM heap used and GC time (the agent's JVM collectors).

The first panel is the audit's own: messages lost in final windows per leader broker
(``kafka_audit_window_lost_messages_by_leader_total`` from kafka-audit's exporter; docs/DESIGN.md,
"Attribution"), so a lossy window reads straight down to the broker that led the partitions it lost in.

All panels are time series of one width with a fixed y-axis width and a shared tooltip, so their time
axes line up: a spike on one broker reads straight across to the others, and firing kafka-audit alerts
(``kafka_audit_alerts_firing``) are annotations on every panel, so a lossy window lines up with the
broker that was unwell.

Template variables: ``$datasource`` and ``$broker`` (multi-value; "All" is ``.+``, so only series with a
``broker`` label match, never another job's ``process_*`` or ``jvm_*`` series).
"""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import AnnotationQuery, Dashboard, QueryVariable, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.builders.timeseries import Panel as TimeseriesPanel
from grafana_foundation_sdk.models.common import LineInterpolation
from grafana_foundation_sdk.models.dashboard import DashboardCursorSync, DynamicConfigValue, VariableSort

from dashboards._panels import (
    datasource_variable,
    firing_alerts_annotation,
    label_variable,
    query,
    timeseries,
)

UID = "kafka-audit-brokers"
TITLE = "Kafka brokers"
#: Label matcher of every query: the selected brokers (the target label the scrape configuration adds).
SEL = 'broker=~"$broker"'
RATE = "$__rate_interval"
WHO = "broker {{broker}}"
#: Every panel's width (of 24) and y-axis width (px): equal for all, so the time axes line up.
WIDTH = 12
AXIS_WIDTH = 64

#: The audit's loss per leader broker (docs/DESIGN.md, "Attribution"), from kafka-audit's exporter (the
#: Spark job), not the brokers': its ``broker`` label is the leader's node.id as text ("1", "2", ...), as
#: the exporters' target label, so ``$broker`` filters it too. A series appears once a final window lost
#: messages in a partition that broker led.
LOSS_BY_LEADER_METRIC = "kafka_audit_window_lost_messages_by_leader_total"
LOSS_BY_LEADER_TITLE = "Audit loss per leader broker"
LOSS_BY_LEADER_EXPR = f"sum by (broker) (increase({LOSS_BY_LEADER_METRIC}{{{SEL}}}[5m]))"


def broker_variable() -> QueryVariable:
    """Return the ``$broker`` variable: the exporters' ``broker`` labels, numeric order, All = ``.+``."""
    return (
        label_variable("broker", "Broker", "label_values(kafka_server_replicamanager_partitioncount, broker)")
        .all_value(".+")
        .sort(VariableSort.NUMERICAL_ASC)
    )


def _panel(
    title: str,
    description: str,
    targets: list[Dataquery],
    unit: str,
    *,
    max_val: float | None = None,
) -> TimeseriesPanel:
    """Return a time series panel of the common width and y-axis width (the shared time axis)."""
    return timeseries(title, description, targets, unit, width=WIDTH, max_val=max_val).axis_width(AXIS_WIDTH)


def _gauge(metric: str) -> str:
    """PromQL: a per-broker gauge of the selected brokers."""
    return f"max by (broker) ({metric}{{{SEL}}})"


def _rate(counter: str) -> str:
    """PromQL: per-second rate of a counter of the selected brokers, summed per broker."""
    return f"sum by (broker) (rate({counter}{{{SEL}}}[{RATE}]))"


def _broker_total(counter: str) -> str:
    """PromQL: per-second rate of a ``BrokerTopicMetrics`` counter, the broker total (no ``topic``)."""
    return f'sum by (broker) (rate({counter}{{topic="", {SEL}}}[{RATE}]))'


def _p99(histogram: str, request: str) -> str:
    """PromQL: the 99th percentile of a ``RequestMetrics`` histogram (ms) for ``request``, per broker."""
    return f'max by (broker, request) ({histogram}{{request=~"{request}", quantile="0.99", {SEL}}})'


def _throughput_row(d: Dashboard) -> Dashboard:
    return (
        d.with_row(Row("Throughput and errors"))
        .with_panel(
            _panel(
                LOSS_BY_LEADER_TITLE,
                "Messages the audit found lost in final windows, by the broker that led their partition "
                "during the window (5-minute increase; the producers' metadata names the leader). A bar "
                "here lines up with that broker's failed requests, request times and ISR changes below.",
                [query(LOSS_BY_LEADER_EXPR, WHO)],
                "short",
            )
        )
        .with_panel(
            _panel(
                "Bytes in per second",
                "Bytes per second producers wrote to the partitions this broker leads (Kafka "
                "BrokerTopicMetrics BytesInPerSec, broker total; replication not included).",
                [query(_broker_total("kafka_server_brokertopicmetrics_bytesin_total"), WHO)],
                "Bps",
            )
        )
        .with_panel(
            _panel(
                "Bytes out per second",
                "Bytes per second fetched from this broker by consumers (Kafka BrokerTopicMetrics "
                "BytesOutPerSec, broker total; replication to followers not included).",
                [query(_broker_total("kafka_server_brokertopicmetrics_bytesout_total"), WHO)],
                "Bps",
            )
        )
        .with_panel(
            _panel(
                "Messages in per second",
                "Messages per second appended to the partitions this broker leads (Kafka "
                "BrokerTopicMetrics MessagesInPerSec, broker total).",
                [query(_broker_total("kafka_server_brokertopicmetrics_messagesin_total"), WHO)],
                "cps",
            )
        )
        .with_panel(
            _panel(
                "Failed produce and fetch requests per second",
                "Produce and fetch requests per second this broker answered with an error (Kafka "
                "BrokerTopicMetrics FailedProduceRequestsPerSec, FailedFetchRequestsPerSec, broker total), "
                "e.g. NOT_LEADER_OR_FOLLOWER after a leader moved, or a record batch too large. The error "
                "codes are in kafka_network_requestmetrics_errors_total.",
                [
                    query(
                        _broker_total("kafka_server_brokertopicmetrics_failedproducerequests_total"),
                        f"{WHO} produce",
                    ),
                    query(
                        _broker_total("kafka_server_brokertopicmetrics_failedfetchrequests_total"),
                        f"{WHO} fetch",
                    ),
                ],
                "reqps",
            )
        )
    )


def _latency_row(d: Dashboard) -> Dashboard:
    return (
        d.with_row(Row("Request latency and idle capacity"))
        .with_panel(
            _panel(
                "Produce total time p99",
                "99th percentile of the time a Produce request spent in the broker, from arrival to "
                "response sent, in ms (Kafka RequestMetrics TotalTimeMs, request=Produce; Kafka's decaying "
                "histogram, weighted to about the last 5 minutes). With acks=all it includes the wait for "
                "the followers (RemoteTimeMs).",
                [query(_p99("kafka_network_requestmetrics_totaltimems", "Produce"), WHO)],
                "ms",
            )
        )
        .with_panel(
            _panel(
                "FetchConsumer total time p99",
                "99th percentile of the total time of consumer Fetch requests, in ms (Kafka RequestMetrics "
                "TotalTimeMs, request=FetchConsumer). Includes the long-poll wait when there is nothing new "
                "to read (consumer fetch.max.wait.ms, 500 ms by default).",
                [query(_p99("kafka_network_requestmetrics_totaltimems", "FetchConsumer"), WHO)],
                "ms",
            )
        )
        .with_panel(
            _panel(
                "Request queue time p99",
                "99th percentile of the time Produce and FetchConsumer requests waited in the request "
                "queue for an I/O thread, in ms (Kafka RequestMetrics RequestQueueTimeMs): grows when the "
                "broker's request handlers are saturated.",
                [
                    query(
                        _p99("kafka_network_requestmetrics_requestqueuetimems", "Produce|FetchConsumer"),
                        f"{WHO} {{{{request}}}}",
                    )
                ],
                "ms",
            )
        )
        .with_panel(
            _panel(
                "Network processor and request handler idle",
                "Share of time the network threads (Kafka SocketServer NetworkProcessorAvgIdlePercent) and "
                "the request handler (I/O) threads (KafkaRequestHandlerPool RequestHandlerAvgIdlePercent, "
                "one-minute rate) were idle, 0-1 despite the names; below about 30% the broker is busy.",
                [
                    query(
                        _gauge("kafka_network_socketserver_networkprocessoravgidlepercent"),
                        f"{WHO} network",
                    ),
                    query(
                        _gauge("kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent"),
                        f"{WHO} request handlers",
                    ),
                ],
                "percentunit",
                max_val=1,
            )
        )
    )


def _replication_row(d: Dashboard) -> Dashboard:
    led = _panel(
        "Partitions led",
        "Partitions whose leader is this broker (Kafka ReplicaManager LeaderCount). A step is leadership "
        "moving: a leader election after a broker failed or was cut off, or a preferred-leader election "
        "after it came back. KRaft controllers keep no LeaderElectionRateAndTimeMs; this is where "
        "ordinary elections show.",
        [query(_gauge("kafka_server_replicamanager_leadercount"), WHO)],
        "short",
    ).line_interpolation(LineInterpolation.STEP_AFTER)
    return (
        d.with_row(Row("Replication and leadership"))
        .with_panel(
            _panel(
                "Under-replicated and offline partitions",
                "Partitions led by this broker with fewer in-sync replicas than replicas (Kafka "
                "ReplicaManager UnderReplicatedPartitions), and partitions without a live leader in the "
                "cluster as this controller sees them (KafkaController OfflinePartitionsCount). Both 0 "
                "when healthy; offline partitions cannot be written: produce requests to them fail.",
                [
                    query(
                        _gauge("kafka_server_replicamanager_underreplicatedpartitions"),
                        f"{WHO} under-replicated",
                    ),
                    query(
                        _gauge("kafka_controller_kafkacontroller_offlinepartitionscount"),
                        f"{WHO} offline (controller view)",
                    ),
                ],
                "short",
            ).line_interpolation(LineInterpolation.STEP_AFTER)
        )
        .with_panel(
            _panel(
                "ISR shrinks and expands per second",
                "Rate at which the in-sync replica sets of partitions this broker leads shrank (a follower "
                "fell behind or failed) and expanded again (Kafka ReplicaManager IsrShrinksPerSec, "
                "IsrExpandsPerSec). Shrinks without expands: a follower stays out of sync.",
                [
                    query(
                        _rate("kafka_server_replicamanager_isrshrinks_total"),
                        f"{WHO} shrinks",
                    ),
                    query(
                        _rate("kafka_server_replicamanager_isrexpands_total"),
                        f"{WHO} expands",
                    ),
                ],
                "ops",
            )
        )
        .with_panel(led)
        .with_panel(
            _panel(
                "Leader elections",
                "Leader elections per interval counted by the controller on this node (Kafka ControllerStats "
                "UncleanLeaderElectionsPerSec: a leader chosen outside the ISR, data may be lost; "
                "ElectionFromEligibleLeaderReplicasPerSec: from the eligible leader replicas, KIP-966).",
                [
                    query(
                        "sum by (broker) (increase("
                        f"kafka_controller_controllerstats_uncleanleaderelections_total{{{SEL}}}[{RATE}]))",
                        f"{WHO} unclean",
                    ),
                    query(
                        "sum by (broker) (increase(kafka_controller_controllerstats_"
                        f"electionfromeligibleleaderreplicas_total{{{SEL}}}[{RATE}]))",
                        f"{WHO} from ELR",
                    ),
                ],
                "short",
            )
        )
    )


def _jvm_row(d: Dashboard) -> Dashboard:
    heap = _panel(
        "JVM heap used",
        'Heap in use by the broker\'s JVM, bytes (jvm_memory_used_bytes{area="heap"}), and its maximum '
        "(-Xmx, dashed). Used heap near the maximum means long GC pauses ahead.",
        [
            query(f'sum by (broker) (jvm_memory_used_bytes{{area="heap", {SEL}}})', f"{WHO} used"),
            query(f'max by (broker) (jvm_memory_max_bytes{{area="heap", {SEL}}})', f"{WHO} max"),
        ],
        "bytes",
    ).override_by_regexp(
        ".* max$",
        [
            DynamicConfigValue("custom.lineStyle", {"fill": "dash", "dash": [10, 10]}),
            DynamicConfigValue("custom.fillOpacity", 0),
            DynamicConfigValue("custom.lineWidth", 1),
        ],
    )
    return (
        d.with_row(Row("CPU and memory"))
        .with_panel(
            _panel(
                "Process CPU",
                "CPU time the broker's JVM used per second of wall time (process_cpu_seconds_total): "
                "100% = one core busy.",
                [query(_rate("process_cpu_seconds_total"), WHO)],
                "percentunit",
            )
        )
        .with_panel(heap)
        .with_panel(
            _panel(
                "GC time",
                "Share of wall time the broker's JVM spent in garbage collection, all collectors "
                "(jvm_gc_collection_seconds_sum, G1 young and old generation).",
                [query(_rate("jvm_gc_collection_seconds_sum"), WHO)],
                "percentunit",
            )
        )
    )


def alert_annotation() -> AnnotationQuery:
    """Return the annotation marking firing kafka-audit alerts of every topic (completeness drops)."""
    return firing_alerts_annotation("kafka_audit_alerts_firing == 1")


def broker_dashboard() -> Dashboard:
    """Build the "Kafka brokers" dashboard (a grafana-foundation-sdk builder, uid :data:`UID`)."""
    d = (
        Dashboard(TITLE)
        .uid(UID)
        .description(
            "Per broker, from the JMX exporters: bytes in/out, request latency p99, failed requests, "
            "replication and leadership, CPU and heap; kafka-audit alerts as annotations."
        )
        .tags(["kafka-audit", "kafka", "brokers"])
        .refresh("30s")
        .time("now-1h", "now")
        .tooltip(DashboardCursorSync.TOOLTIP)
        .annotation(alert_annotation())
        .with_variable(datasource_variable())
        .with_variable(broker_variable())
    )
    return _jvm_row(_replication_row(_latency_row(_throughput_row(d))))
