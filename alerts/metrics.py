"""Prometheus metrics of the alert engine and its sinks (prometheus-client), in a registry passed in.

* ``kafka_audit_alerts_firing{alertname,topic,severity}``: 1 while an alert of that name fires for
  the topic (on any tier), 0 after it resolved (``docs/DESIGN.md``, "Metrics").
* ``kafka_audit_alert_sink_errors_total{sink}``: failed delivery attempts per sink (``kafka``,
  ``alertmanager``, ``webhook``); the failed events are retried on the next dispatch.
* ``kafka_audit_alert_events_total{alertname,status}``: events the engine emitted.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

from alerts.event import AlertEvent

SINK_NAMES = ("kafka", "alertmanager", "webhook")


class AlertMetrics:
    """The alert metrics, registered once in ``registry`` (one instance per registry).

    Args:
        registry: Where to register, e.g. the Spark job's ``ResultMetrics().registry``.

    Raises:
        ValueError: if the registry already holds these metric names (prometheus-client's duplicate check).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.firing_gauge = Gauge(
            "kafka_audit_alerts_firing",
            "1 while the alert fires for the topic (any tier), 0 after it resolved",
            ("alertname", "topic", "severity"),
            registry=registry,
        )
        self.sink_errors = Counter(
            "kafka_audit_alert_sink_errors_total",
            "Failed alert deliveries per sink (retried on the next evaluation)",
            ("sink",),
            registry=registry,
        )
        self.events = Counter(
            "kafka_audit_alert_events_total",
            "Alert events emitted (firing, resolved)",
            ("alertname", "status"),
            registry=registry,
        )
        for sink in SINK_NAMES:
            self.sink_errors.labels(sink=sink)
        self._seen: set[tuple[str, str, str]] = set()

    def update_firing(self, firing: Iterable[AlertEvent]) -> None:
        """Set the firing gauge from the engine's firing alerts (``AlertEngine.firing()``).

        Series seen before and no longer firing drop to 0 (kept, so dashboards see the resolve).
        """
        now = {(e.alertname, e.topic, e.severity) for e in firing}
        for key in self._seen | now:
            self.firing_gauge.labels(*key).set(1 if key in now else 0)
        self._seen |= now

    def count_events(self, events: Iterable[AlertEvent]) -> None:
        """Count emitted events by alertname and status."""
        for e in events:
            self.events.labels(e.alertname, e.status.value).inc()
