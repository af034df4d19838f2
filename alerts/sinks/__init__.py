"""Alert sinks: the alerts topic (Avro), Prometheus Alertmanager (HTTP API v2), a generic JSON webhook."""

from alerts.sinks.alertmanager import AlertmanagerSink
from alerts.sinks.base import AlertSink
from alerts.sinks.kafka import KafkaAlertSink
from alerts.sinks.webhook import WebhookSink

__all__ = ["AlertSink", "AlertmanagerSink", "KafkaAlertSink", "WebhookSink"]
