"""Prometheus exporter of window results (prometheus-client), on 127.0.0.1.

Metric names end in their unit (``_ratio``, ``_total``, ``_seconds``); labels are ``topic`` and ``tier``.
Ratio gauges hold the newest final window's value; ``_total`` counters add every final window
(``freshness_messages_total``: the tiers' freshness histograms, cumulative per ``le`` in seconds, the
bounds of :mod:`audit_record.freshness`, for the freshness SLOs' rules). Unaudited
messages (no audit stamp) have their own counter and share (``unaudited_ratio``), never in ``lost``;
unaccounted messages (a stamp naming no reporting producer) their own counter and gauge, never in ``lost``;
``final_wait_seconds`` is how long the newest window waits after its end before it is final.

The live comparison (:mod:`spark_streaming.predict`) adds, per (topic, tier) of the newest final window:
predicted P_l / P_d with ``bound`` p05 / p50 / p95, gamma actual / predicted, the gamma target, and the
suggestion as an info-style gauge (value = predicted gamma after the change; absent when the newest
window has none). Per producer (newest snapshot): the configuration in effect (``producer_info`` = 1),
librdkafka's RTT and retries; series of producers silent for ``producer_ttl_s`` are removed.

The model lifecycle (:mod:`spark_streaming.live_model`) adds, per model version: the rolling live MAE of
P_l, the 90% interval's coverage and whether the version is calibrated; which version serves
(``model_champion_info`` = 1); the final windows offered to the training store by outcome; the
promotion decisions by outcome; the background retraining runs by result.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from audit_record import freshness, window_result
from predictor.training_store import SKIP_REASONS
from spark_streaming.retraining import RESULTS as RETRAIN_RESULTS

LABELS = ("topic", "tier")
BOUNDS = (("p05", "lo"), ("p50", ""), ("p95", "hi"))
"""Prometheus ``bound`` label -> suffix of the window-result column (``p_loss_lo``, ``p_loss``...)."""
PRODUCER_LABELS = ("producer_id", "producer", "topic")
"""Labels of the per-producer series: the instance id (stamp text form), its readable name
``<client.id>@<host>.<pid>`` (``producer_identity``; a v1 id is its own name) and the topic."""
PRODUCER_INFO_LABELS = (*PRODUCER_LABELS, *window_result.CONFIG_FIELDS)
"""Labels of ``kafka_audit_producer_info``: the producer, its topic and its configuration in effect."""


def _present(x: Any) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _label(x: Any) -> str:
    if not _present(x):
        return ""
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


class ResultMetrics:
    """The job's metrics in their own registry (so tests can run several jobs in one process).

    Args:
        producer_ttl_s: Per-producer series are removed after this long without a snapshot, s.
    """

    def __init__(self, producer_ttl_s: float = 600.0) -> None:
        r = self.registry = CollectorRegistry()
        self.producer_ttl_s = producer_ttl_s
        self._producer_labels: dict[tuple[str, str], tuple[tuple[str, ...], float]] = {}
        self._suggestion_labels: dict[tuple[str, str], str] = {}
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
        self.freshness = Counter(
            "kafka_audit_freshness_messages_total",
            "Messages the tier held within le seconds of their CreateTime, cumulative per le (final windows)",
            (*LABELS, "le"),
            registry=r,
        )
        self.received = Counter(
            "kafka_audit_messages_received_total",
            "Messages the cluster holds, audited or not, copies included (final windows)",
            LABELS,
            registry=r,
        )
        self.unaudited = Counter(
            "kafka_audit_messages_unaudited_total",
            "Messages without an audit stamp (final windows); never counted as lost",
            LABELS,
            registry=r,
        )
        self.unaudited_ratio = Gauge(
            "kafka_audit_unaudited_ratio",
            "Unaudited / received messages of the newest final window (fraction of the topic's traffic)",
            LABELS,
            registry=r,
        )
        self.unaccounted = Counter(
            "kafka_audit_messages_unaccounted_total",
            "Messages whose stamp names a producer id that sent no snapshot for the topic and window "
            "(final windows); never counted as sent, lost or duplicated",
            LABELS,
            registry=r,
        )
        self.unaccounted_window = Gauge(
            "kafka_audit_unaccounted_messages",
            "Unaccounted messages (stamp naming no reporting producer) of the newest final window",
            LABELS,
            registry=r,
        )
        self.final_wait = Gauge(
            "kafka_audit_final_wait_seconds",
            "How long after its end the newest window waits before it is final (the grace, or its "
            "producers' largest message.timeout.ms + margin), seconds",
            LABELS,
            registry=r,
        )
        self.producers = Gauge(
            "kafka_audit_producers",
            "Audited producers that reported for the newest final window",
            LABELS,
            registry=r,
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

        self.predicted_loss = Gauge(
            "kafka_audit_predicted_loss_ratio",
            "Predicted P_l of the newest final window (fraction); bound p05/p50/p95 of the 90% interval",
            (*LABELS, "bound"),
            registry=r,
        )
        self.predicted_dup = Gauge(
            "kafka_audit_predicted_duplicate_ratio",
            "Predicted P_d of the newest final window (fraction); bound p05/p50/p95 of the 90% interval",
            (*LABELS, "bound"),
            registry=r,
        )
        self.gamma = Gauge(
            "kafka_audit_gamma",
            "KPI gamma (Eq. 2, 0-1), newest final window: kind actual (R_l, R_d) or predicted (P_l, P_d)",
            (*LABELS, "kind"),
            registry=r,
        )
        self.gamma_target = Gauge(
            "kafka_audit_gamma_target", "The topic's gamma target (0-1)", LABELS, registry=r
        )
        self.unaudited_producers = Gauge(
            "kafka_audit_unaudited_producers",
            "Producer ids the cluster saw without producer snapshots, newest final window",
            LABELS,
            registry=r,
        )
        self.suggestion_info = Gauge(
            "kafka_audit_suggestion_info",
            "Configuration change suggested for the newest final window; value = predicted gamma after it",
            (*LABELS, "suggestion"),
            registry=r,
        )
        self.producer_info = Gauge(
            "kafka_audit_producer_info",
            "Producer configuration in effect (newest producer snapshot); always 1",
            PRODUCER_INFO_LABELS,
            registry=r,
        )
        self.producer_rtt = Gauge(
            "kafka_audit_producer_rtt_seconds",
            "librdkafka mean broker round-trip time rtt.avg of the producer (newest snapshot), seconds",
            PRODUCER_LABELS,
            registry=r,
        )
        self.producer_retries = Gauge(
            "kafka_audit_producer_tx_retries",
            "Cumulative librdkafka request retries (txretries) of the producer (newest snapshot)",
            PRODUCER_LABELS,
            registry=r,
        )
        self.prediction_failures = Counter(
            "kafka_audit_prediction_failures_total",
            "Final windows whose live comparison failed, by stage (model, input, predict, kpi, suggest)",
            ("topic", "stage"),
            registry=r,
        )

        self.training_windows = Counter(
            "kafka_audit_training_windows_total",
            "Final windows offered to the training store, by outcome: stored, or why not (a skip reason)",
            ("outcome",),
            registry=r,
        )
        self.model_live_mae = Gauge(
            "kafka_audit_model_live_mae",
            "Rolling live MAE of P_l (mean |P_l - R_l|, fraction) of a model version over its recent windows",
            ("model_version",),
            registry=r,
        )
        self.model_live_coverage = Gauge(
            "kafka_audit_model_live_coverage",
            "Share of a model version's recent windows whose R_l was inside its 90% interval of P_l",
            ("model_version",),
            registry=r,
        )
        self.model_calibrated = Gauge(
            "kafka_audit_model_calibrated",
            "1 while a model version is calibrated for this deployment (drift alerts fire), else 0",
            ("model_version",),
            registry=r,
        )
        self.model_champion_info = Gauge(
            "kafka_audit_model_champion_info",
            "The model version serving predictions (value 1)",
            ("model_version",),
            registry=r,
        )
        self.model_decisions = Counter(
            "kafka_audit_model_decisions_total",
            "Champion/challenger decisions of the retraining, by outcome (promoted, rejected)",
            ("outcome",),
            registry=r,
        )
        self.retrain_runs = Counter(
            "kafka_audit_retrain_runs_total",
            "Background retraining processes ended, by result (completed, failed, killed)",
            ("result",),
            registry=r,
        )

        # The tier view (docs/DESIGN.md, "Tiers"): each tier against the tier before it.
        self.tier_completeness = Gauge(
            "kafka_audit_tier_completeness_ratio",
            "Completeness relative to the tier before (unique / previous tier's unique), newest final window",
            LABELS,
            registry=r,
        )
        self.tier_lag = Gauge(
            "kafka_audit_tier_lag_seconds",
            "How long after its end the newest final window reached its final counts at this tier, seconds",
            LABELS,
            registry=r,
        )
        self.tier_duplicates_added = Counter(
            "kafka_audit_tier_duplicates_added_total",
            "Duplicates this tier added to the tier before's (e.g. MirrorMaker 2 re-copies), final windows",
            LABELS,
            registry=r,
        )
        self.tier_behind = Gauge(
            "kafka_audit_tier_behind_messages",
            "Messages the tier before holds that this tier does not yet, summed over provisional windows",
            LABELS,
            registry=r,
        )
        self._behind: dict[tuple[str, str], dict[int, int]] = {}

        # Attribution (docs/DESIGN.md, "Attribution"): where a final window's loss happened.
        self.lost_by_leader = Counter(
            "kafka_audit_window_lost_messages_by_leader_total",
            "Messages lost in final windows (sent - unique per partition, or its failed delivery reports "
            "when unknown), by the broker (node id; '' unknown) that led the partition",
            (*LABELS, "broker"),
            registry=r,
        )
        self.failed_deliveries = Counter(
            "kafka_audit_window_failed_deliveries_total",
            "Failed delivery reports of the producers in final windows, by librdkafka error name",
            (*LABELS, "error"),
            registry=r,
        )

        self._final_counters: tuple[Counter, ...] = (
            self.sent,
            self.unique,
            self.lost,
            self.duplicated,
            self.received,
            self.unaudited,
            self.unaccounted,
        )
        """The (topic, tier) counters that final windows add to: at 0 from the first provisional result."""

        # Known outcomes exported from the start at 0, so increase() sees their first event.
        for outcome in ("stored", *SKIP_REASONS):
            self.training_windows.labels(outcome)
        for outcome in ("promoted", "rejected"):
            self.model_decisions.labels(outcome)
        for result in RETRAIN_RESULTS:
            self.retrain_runs.labels(result)

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """Expose the registry on ``http://<addr>:<port>/metrics`` (loopback unless told otherwise)."""
        start_http_server(port, addr=addr, registry=self.registry)

    def observe(
        self,
        results: list[dict[str, Any]],
        dead: list[dict[str, Any]],
        late: list[dict[str, Any]],
        producers: list[dict[str, Any]] | None = None,
    ) -> None:
        """Update the metrics from one micro-batch's output (result, dead-letter, late, producer rows)."""
        for row in sorted(results, key=lambda r: r["window_start_ms"]):  # the newest window wins
            labels = (row["topic"], row["tier"])
            self.windows.labels(*labels, row["state"]).inc()
            if row.get("final_wait_ms") is not None:
                self.final_wait.labels(*labels).set(row["final_wait_ms"] / 1000)
            self._observe_tier(labels, row)
            if row["state"] != "final":
                self._start_series(labels, row)
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
            self._observe_freshness(labels, row)
            self._observe_attribution(labels, row)
            self._observe_unaudited(labels, row)
            self._observe_comparison(labels, row)
        for d in dead:
            self.dead_letters.labels("spark", d["reason"]).inc()
        for lt in late:
            self.late.labels(lt["topic"]).inc(lt["late"] or 0)
        self.observe_producers(producers or [])

    def _start_series(self, labels: tuple[str, str], row: dict[str, Any]) -> None:
        """Create a (topic, tier)'s final-window counters at 0 on its provisional results.

        A counter series first scraped with its value already up hides that step from ``increase()``
        (Prometheus takes the first sample as the range's baseline): created at 0 while the window is
        still provisional, the first final window of a topic (and the first after every restart of the
        job, whose counters start over) counts in the SLO rules' ``increase()`` of sent and lost
        messages, and of the freshness ``le`` series (created once the tier measures freshness).
        """
        for counter in self._final_counters:
            counter.labels(*labels)
        if row.get("freshness_counts"):
            for le in freshness.LE_LABELS:
                self.freshness.labels(*labels, le)

    def _observe_freshness(self, labels: tuple[str, str], row: dict[str, Any]) -> None:
        """Add a final window's freshness histogram (``freshness_counts``, if measured) to the ``le`` series.

        Cumulative per ``le`` (seconds, :data:`audit_record.freshness.LE_LABELS`): ``le="30"`` counts the
        messages held within 30 s, ``le="+Inf"`` every message whose freshness was measured. Every ``le``
        series of a (topic, tier) starts together, so ratios of two of them are exact counts.
        """
        counts = row.get("freshness_counts") or []
        if not counts:
            return
        for le, n in zip(freshness.LE_LABELS, freshness.cumulative(counts), strict=True):
            self.freshness.labels(*labels, le).inc(n)

    def _observe_attribution(self, labels: tuple[str, str], row: dict[str, Any]) -> None:
        """Count a final window's loss per leader broker and its failed deliveries per error.

        Every leader of the window gets its series (at 0 until it loses), so Prometheus' ``increase()``
        sees a broker's first loss as an increase rather than as the series' first value.
        """
        row = window_result.from_spark(row)
        for p in row["partitions"]:
            if p.get("leader") is not None:
                self.lost_by_leader.labels(*labels, _label(p["leader"]))
        for broker, lost in window_result.lost_by_leader(row).items():
            self.lost_by_leader.labels(*labels, _label(broker)).inc(lost)
        for p in row["partitions"]:
            for error, n in (p.get("failed_by_error") or {}).items():
                self.failed_deliveries.labels(*labels, error).inc(n)

    def _observe_unaudited(self, labels: tuple[str, str], row: dict[str, Any]) -> None:
        """Count a final window's received, unaudited and unaccounted messages; set its shares and producers.

        ``unaccounted`` (messages whose stamp names no reporting producer) is 0 in results written before
        the field existed.
        """
        received, unaudited = row.get("received") or 0, row.get("unaudited") or 0
        unaccounted = row.get("unaccounted") or 0
        self.received.labels(*labels).inc(received)
        self.unaudited.labels(*labels).inc(unaudited)
        self.unaccounted.labels(*labels).inc(unaccounted)
        self.unaccounted_window.labels(*labels).set(unaccounted)
        self.unaudited_ratio.labels(*labels).set(unaudited / received if received else 0.0)
        self.producers.labels(*labels).set(row.get("producers") or 0)

    def _observe_comparison(self, labels: tuple[str, str], row: dict[str, Any]) -> None:
        """Set the live-comparison gauges from one final window (series without a value are removed)."""
        self.unaudited_producers.labels(*labels).set(row.get("unaudited_producers") or 0)
        stage = row.get("predict_stage")
        if stage:
            self.prediction_failures.labels(labels[0], stage).inc()
        for gauge, column in ((self.predicted_loss, "p_loss"), (self.predicted_dup, "p_dup")):
            for bound, suffix in BOUNDS:
                value = row.get(f"{column}_{suffix}" if suffix else column)
                self._set(gauge, (*labels, bound), value)
        self._set(self.gamma, (*labels, "actual"), row.get("gamma_actual"))
        self._set(self.gamma, (*labels, "predicted"), row.get("gamma_predicted"))
        self._set(self.gamma_target, labels, row.get("gamma_target"))
        old = self._suggestion_labels.pop(labels, None)
        if old is not None:
            self.suggestion_info.remove(*labels, old)
        text, after = row.get("suggestion"), row.get("suggested_gamma")
        if text:
            self.suggestion_info.labels(*labels, text).set(after if _present(after) else math.nan)
            self._suggestion_labels[labels] = text

    def _observe_tier(self, labels: tuple[str, str], row: dict[str, Any]) -> None:
        """Set the tier-view metrics from one result row (``window_result.TIER_FIELDS``; absent: skipped)."""
        if row.get("previous_tier") is None:  # a result written before the tier view
            return
        behind = self._behind.setdefault(labels, {})
        if row["state"] == "final":
            behind.pop(row["window_start_ms"], None)
            self._set(self.tier_completeness, labels, row.get("completeness_vs_previous"))
            lag_ms = row.get("tier_lag_ms")
            self._set(self.tier_lag, labels, lag_ms / 1000 if lag_ms is not None else None)
            self.tier_duplicates_added.labels(*labels).inc(row.get("duplicates_added") or 0)
        else:
            behind[row["window_start_ms"]] = max(0, (row.get("previous_unique") or 0) - (row["unique"] or 0))
        self.tier_behind.labels(*labels).set(sum(behind.values()))

    @staticmethod
    def _set(gauge: Gauge, labels: tuple[str, ...], value: Any) -> None:
        if _present(value):
            gauge.labels(*labels).set(value)
        else:
            with contextlib.suppress(KeyError):  # no series yet
                gauge.remove(*labels)

    def observe_producers(self, producers: list[dict[str, Any]], now_s: float | None = None) -> None:
        """Set the per-producer gauges from ``producer`` rows (newest snapshot wins); expire silent ones.

        Args:
            producers: Rows of :func:`spark_streaming.window_state.producer_row` (``producer_id``,
                ``producer_name`` (None: the id is the name), ``topic``,
                configuration, ``rtt_avg_ms`` in ms, cumulative ``tx_retries``, ``result_at_ms``).
            now_s: Wall clock, s (default: now); producers not seen for ``producer_ttl_s`` are removed.
        """
        now = time.time() if now_s is None else now_s
        for p in sorted(producers, key=lambda p: p.get("result_at_ms") or 0):
            key = (str(p["producer_id"]), str(p.get("producer_name") or p["producer_id"]), str(p["topic"]))
            info = (*key, *(_label(p.get(n)) for n in PRODUCER_INFO_LABELS[len(PRODUCER_LABELS) :]))
            held = self._producer_labels.get(key)
            if held is not None and held[0] != info:
                self.producer_info.remove(*held[0])
            self.producer_info.labels(*info).set(1)
            self._producer_labels[key] = (info, now)
            if _present(p.get("rtt_avg_ms")):
                self.producer_rtt.labels(*key).set(p["rtt_avg_ms"] / 1000)
            self.producer_retries.labels(*key).set(p.get("tx_retries") or 0)
        for key, (info, seen) in list(self._producer_labels.items()):
            if now - seen > self.producer_ttl_s:
                del self._producer_labels[key]
                self.producer_info.remove(*info)
                for gauge in (self.producer_rtt, self.producer_retries):
                    with contextlib.suppress(KeyError):  # never had an RTT
                        gauge.remove(*key)
