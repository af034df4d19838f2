"""Prometheus exporter of window results (prometheus-client), on 127.0.0.1.

Metric names end in their unit (``_ratio``, ``_total``, ``_seconds``); labels are ``topic`` and ``tier``.
Ratio gauges hold the newest final window's value; ``_total`` counters add every final window.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

LABELS = ("topic", "tier")


class ResultMetrics:
    """The job's metrics in their own registry (so tests can run several jobs in one process)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.completeness = Gauge(
            "kafka_audit_completeness_ratio",
            "Unique received / sent, newest final window",
            LABELS,
            registry=r,
        )
        self.loss = Gauge(
            "kafka_audit_loss_ratio", "R_l of the newest final window (fraction)", LABELS, registry=r
        )
        self.dup = Gauge(
            "kafka_audit_duplicate_ratio", "R_d of the newest final window (fraction)", LABELS, registry=r
        )
        self.window_end = Gauge(
            "kafka_audit_last_final_window_end_seconds",
            "End of the newest final window (Unix seconds)",
            LABELS,
            registry=r,
        )
        self.sent = Counter(
            "kafka_audit_messages_sent_total", "Messages producers sent (final windows)", LABELS, registry=r
        )
        self.unique = Counter(
            "kafka_audit_messages_unique_total", "Distinct messages the cluster holds", LABELS, registry=r
        )
        self.lost = Counter(
            "kafka_audit_messages_lost_total", "sent - unique over final windows", LABELS, registry=r
        )
        self.duplicated = Counter(
            "kafka_audit_messages_duplicated_total", "Extra copies over final windows", LABELS, registry=r
        )
        self.windows = Counter(
            "kafka_audit_windows_total", "Window results emitted", (*LABELS, "state"), registry=r
        )
        self.dead_letters = Counter(
            "kafka_audit_dead_letters_total",
            "Malformed audit records dead-lettered",
            ("component", "reason"),
            registry=r,
        )
        self.late = Counter(
            "kafka_audit_late_snapshots_total",
            "Snapshots that arrived after their window was final",
            ("topic",),
            registry=r,
        )
        self.dropped = Gauge(
            "kafka_audit_rows_dropped_by_watermark",
            "Spark's numRowsDroppedByWatermark (cumulative)",
            registry=r,
        )
        self.lag = Gauge(
            "kafka_audit_watermark_lag_seconds", "Wall clock minus the job's event-time watermark", registry=r
        )
        self.batch = Histogram(
            "kafka_audit_batch_duration_seconds",
            "Micro-batch duration",
            registry=r,
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
        )

    def serve(self, port: int) -> None:
        """Expose the registry on ``http://127.0.0.1:<port>/metrics``."""
        start_http_server(port, addr="127.0.0.1", registry=self.registry)

    def observe(
        self, results: list[dict[str, Any]], dead: list[dict[str, Any]], late: list[dict[str, Any]]
    ) -> None:
        """Update the metrics from one micro-batch's output."""
        for row in results:
            labels = (row["topic"], row["tier"])
            self.windows.labels(*labels, row["state"]).inc()
            if row["state"] != "final":
                continue
            if row["completeness"] is not None:
                self.completeness.labels(*labels).set(row["completeness"])
                self.loss.labels(*labels).set(row["loss_rate"])
                self.dup.labels(*labels).set(row["duplicate_rate"])
            self.window_end.labels(*labels).set(row["window_end_ms"] / 1000)
            self.sent.labels(*labels).inc(row["sent"])
            self.unique.labels(*labels).inc(row["unique"])
            self.lost.labels(*labels).inc(max(0, row["sent"] - row["unique"]))
            self.duplicated.labels(*labels).inc(row["duplicated"])
        for d in dead:
            self.dead_letters.labels("spark", d["reason"]).inc()
        for lt in late:
            self.late.labels(lt["topic"]).inc(lt["late"] or 0)
