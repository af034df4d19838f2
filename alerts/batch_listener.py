"""Engine + dispatcher + metrics in one object: what the Spark job's ``foreachBatch`` calls.

::

    job = ReconciliationJob(spark_settings)
    pipeline = attach_to_job(job, AlertSettings())   # a listener of every micro-batch, closed by job.stop()
    job.start()

With a ``state_path`` the engine's state and the undelivered events survive a restart
(:mod:`alerts.state_file`): they are saved after every evaluation, and a new pipeline continues from
them and sends the still-firing alerts once more on its first evaluation (Alertmanager needs them
re-posted to keep them active; the alerts topic and webhooks see a re-sent event, which their readers
deduplicate by ``event_id``).

The predictor's champion / challenger decisions become events too (:meth:`AlertPipeline.on_decision`,
a ``job.decision_listeners`` entry): one ``info`` event per decision, sent to the alerts topic only
(:mod:`alerts.model_events`). So do the control loop's decisions (:meth:`AlertPipeline.on_control`, a
``job.control_listeners`` entry; :mod:`alerts.control_events`): one ``info`` event per change, rollback,
kept change, advice or configuration not applied, sent to the alerts topic and, as an info alert active
for ``control_alert_ttl_ms``, to Alertmanager.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from alerts.control_events import alertmanager_copy, control_event
from alerts.dispatch import Dispatcher, sinks_from_settings
from alerts.engine import AlertEngine
from alerts.event import AlertEvent
from alerts.metrics import AlertMetrics
from alerts.model_events import decision_event
from alerts.settings import AlertSettings
from alerts.sinks.base import AlertSink
from alerts.state_file import AlertStateFile

if TYPE_CHECKING:
    from alerts.slo_evaluation import SloEvaluator
    from alerts.slo_settings import SloSettings
    from spark_streaming.job import ReconciliationJob
    from spark_streaming.settings import SparkJobSettings

log = logging.getLogger(__name__)

MODEL_EVENT_SINKS: tuple[str, ...] = ("kafka",)
"""Sinks that receive model decision events: the alerts topic only (they never fire, so no pager)."""


class AlertPipeline:
    """Evaluates window results, delivers the events, keeps the alert metrics current.

    Args:
        settings: Rules and sinks (default: ``AlertSettings()`` from the environment).
        registry: prometheus-client registry for ``kafka_audit_alerts_firing`` and the sink error counter
            (default: a new private one, see :attr:`metrics`).
        sinks: Override the sinks ``settings`` configure (tests, custom destinations).
        state_path: JSON file of the pipeline's state (None: in memory only); see the module docstring.
        slo: The in-job SLO evaluation (:mod:`alerts.slo_evaluation`), judged after the rules on every
            micro-batch; its alerts go through the same sinks, its state into the same file (None: none).
    """

    def __init__(
        self,
        settings: AlertSettings | None = None,
        registry: CollectorRegistry | None = None,
        sinks: Sequence[AlertSink] | None = None,
        state_path: Path | None = None,
        slo: SloEvaluator | None = None,
    ) -> None:
        self.settings = settings or AlertSettings()
        self.engine = AlertEngine(self.settings)
        self.slo = slo
        self.metrics = AlertMetrics(registry if registry is not None else CollectorRegistry())
        if sinks is None:
            self.dispatcher = Dispatcher.from_settings(self.settings, self.metrics)
        else:
            self.dispatcher = Dispatcher(sinks, self.metrics, self.settings.max_pending_events)
        self.state_file = AlertStateFile(state_path) if state_path is not None else None
        self._resend: list[AlertEvent] = []
        if self.state_file is not None:
            self._restore(self.state_file)

    def _restore(self, state_file: AlertStateFile) -> None:
        saved = state_file.load()
        if saved is None:
            return
        try:
            self.engine.restore(saved.engine)
        except ValueError as exc:
            state_file.set_aside(str(exc))
            return
        if self.slo is not None and "slo" in saved.engine:
            try:
                self.slo.restore(saved.engine["slo"])
            except ValueError as exc:
                log.warning("SLO alert state not restored from %s: %s", state_file.path, exc)
        self.dispatcher.restore_pending(saved.pending)
        self._resend = self._firing()
        self.metrics.update_firing(self._resend)
        log.info(
            "alert state restored from %s: %d firing, %d undelivered event(s)",
            state_file.path,
            len(self._resend),
            sum(self.dispatcher.pending().values()),
        )

    def process(self, results: Iterable[Mapping[str, Any]], now_ms: int | None = None) -> list[AlertEvent]:
        """Evaluate one micro-batch of window results (provisional and final), dispatch, update metrics.

        Never raises for a sink failure (see :class:`alerts.dispatch.Dispatcher`).

        Args:
            results: Window-result dicts, see :meth:`AlertEngine.observe`.
            now_ms: Wall clock, ms since the epoch (default: now).

        Returns:
            The events of this evaluation (firing / resolved).
        """
        now = int(time.time() * 1000) if now_ms is None else now_ms
        results = list(results)
        events = self.engine.observe(results, now)
        if self.slo is not None:
            events.extend(self.slo.observe(results, now))
        self.metrics.count_events(events)
        self.metrics.update_firing(self._firing())
        resend, self._resend = self._resend, []
        self.dispatcher.dispatch([*resend, *events], now)
        self._save()
        return events

    def _firing(self) -> list[AlertEvent]:
        return self.engine.firing() + (self.slo.firing() if self.slo is not None else [])

    def _save(self) -> None:
        if self.state_file is not None:
            state = self.engine.to_state()
            if self.slo is not None:
                state["slo"] = self.slo.to_state()
            try:
                self.state_file.save(state, self.dispatcher.pending_events())
            except OSError as exc:  # alerting goes on; a restart would then resume from an older state
                log.error("alert state not saved to %s: %s", self.state_file.path, exc)

    def publish_decision(self, decision: Mapping[str, Any], now_ms: int | None = None) -> AlertEvent:
        """Send one predictor decision (``Decision.to_json()``) to the alerts topic as an ``info`` event.

        Only the sinks of :data:`MODEL_EVENT_SINKS` are called; a failed delivery stays in that sink's
        retry queue (saved with the state) and is retried on the next evaluation. The event is counted in
        ``kafka_audit_alert_events_total{alertname,status}``.

        Args:
            decision: See :func:`alerts.model_events.decision_event`.
            now_ms: Wall clock of the dispatch, ms since the epoch (default: now).

        Returns:
            The event sent.
        """
        url = str(self.settings.generator_url) if self.settings.generator_url else None
        event = decision_event(decision, generator_url=url)
        self.metrics.count_events([event])
        log.info("model decision event: %s", event.summary)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        self.dispatcher.dispatch([event], now, sinks=MODEL_EVENT_SINKS)
        self._save()
        return event

    def on_decision(self, decision: dict[str, Any]) -> None:
        """``ReconciliationJob.decision_listeners`` entry: one new model decision, on the driver.

        Never raises: a failure is logged (with its traceback) and must not stop the audit job.
        """
        try:
            self.publish_decision(decision)
        except Exception:  # the decision is recorded in the registry already; its event is best effort
            log.exception("model decision event for %r failed", decision.get("challenger_version"))

    def publish_control(self, decision: Mapping[str, Any], now_ms: int | None = None) -> AlertEvent | None:
        """Send one control-loop decision (``ControlDecision.to_json()``) as an ``info`` event.

        The event goes to the alerts topic; Alertmanager gets it as an info alert active until
        ``decided_at_ms + control_alert_ttl_ms`` (:func:`alerts.control_events.alertmanager_copy`); the
        webhook gets nothing. A failed delivery stays in that sink's retry queue (saved with the state).
        Counted in ``kafka_audit_alert_events_total``. Decisions that are no event (a guardrail held a
        suggestion back) return None and send nothing.

        Args:
            decision: See :func:`alerts.control_events.control_event`.
            now_ms: Wall clock of the dispatch, ms since the epoch (default: now).

        Returns:
            The alerts-topic event sent, or None.
        """
        url = str(self.settings.generator_url) if self.settings.generator_url else None
        event = control_event(decision, generator_url=url)
        if event is None:
            return None
        self.metrics.count_events([event])
        log.info("control decision event: %s", event.summary)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        self.dispatcher.dispatch([event], now, sinks=("kafka",))
        self.dispatcher.dispatch(
            [alertmanager_copy(event, self.settings.control_alert_ttl_ms)], now, sinks=("alertmanager",)
        )
        self._save()
        return event

    def on_control(self, decision: dict[str, Any]) -> None:
        """``ReconciliationJob.control_listeners`` entry: one control-loop decision, on the driver.

        Never raises: a failure is logged (with its traceback) and must not stop the audit job.
        """
        try:
            self.publish_control(decision)
        except Exception:  # the decision is made (and written) already; its event is best effort
            log.exception("control decision event for group %r failed", decision.get("group"))

    def on_batch(self, batch_id: int, results: list[dict[str, Any]]) -> None:
        """``spark_streaming.job.ReconciliationJob`` listener: ``(batch_id, result rows)`` on the driver.

        Never raises: an alerting bug is logged (with its traceback) and must not stop the audit job.
        """
        try:
            self.process(results)
        except Exception:  # the reconciliation results are already written; alerting is best effort here
            log.exception("alert evaluation of micro-batch %d failed", batch_id)

    def close(self) -> None:
        """Flush and close the sinks."""
        self.dispatcher.close()


ALERT_STATE_FILE = "alerts-state.json"
"""The alert pipeline's state (:mod:`alerts.state_file`), kept in the job's checkpoint directory."""


def job_emit_delay_ms(s: SparkJobSettings) -> int:
    """Return how long after a window's wait ends the job may take to emit its final result, ms.

    Event time reaches the window's end + wait + watermark delay with the next heartbeat; the micro-batch
    that reads it (up to one trigger interval later) moves the watermark, the next one (another interval)
    emits the final result and takes up to one more interval: ``heartbeat_ms + watermark_delay_ms +
    3 * trigger_ms``. The audit-lag rule's margin must cover it, or every window of a job with a long
    trigger interval fires KafkaAuditAuditLag (found by the soak, issue 18).
    """
    return s.heartbeat_ms + s.watermark_delay_ms + 3 * s.trigger_ms


def attach_to_job(
    job: ReconciliationJob, settings: AlertSettings, slo: SloSettings | None = None
) -> AlertPipeline:
    """Evaluate the alert rules on every micro-batch of ``job``; call before ``job.start()``.

    The alerts topic goes to the job's cluster, with the job's security settings, unless
    ``settings.bootstrap_servers`` names another; ``settings.grace_ms`` defaults to the job's grace,
    ``settings.audit_lag_margin_ms`` to at least the job's own emit delay (:func:`job_emit_delay_ms`), and
    the job's gamma target (topics without their own) to ``settings.gamma_target`` when the job names
    none and the alert settings name one. The pipeline's state (firing alerts, judged windows,
    undelivered events) lives in the job's checkpoint directory (:data:`ALERT_STATE_FILE`), so it
    resumes with the query; ``job.stop()`` closes the sinks. The predictor's model decisions
    (``job.decision_listeners``) become events of the alerts topic (:meth:`AlertPipeline.on_decision`),
    the control loop's decisions (``job.control_listeners``) events of the alerts topic and info alerts
    in Alertmanager (:meth:`AlertPipeline.on_control`). With ``slo`` the SLOs are evaluated in the job
    too (:mod:`alerts.slo_evaluation`: gauges in the job's registry, burn-rate alerts through the same
    sinks), starting from the final windows of the longest compliance period in the job's Parquet
    results.

    Returns:
        The pipeline, registered as a listener on the job's metrics registry.
    """
    from alerts.sinks.kafka import KafkaAlertSink

    if "grace_ms" not in settings.model_fields_set:
        settings = settings.model_copy(update={"grace_ms": job.s.grace_ms})
    if "audit_lag_margin_ms" not in settings.model_fields_set:
        margin = max(settings.audit_lag_margin_ms, job_emit_delay_ms(job.s))
        settings = settings.model_copy(update={"audit_lag_margin_ms": margin})
    if job.s.gamma_target is None and settings.gamma_target is not None:
        job.gamma_target = settings.gamma_target
    sinks: list[AlertSink] = sinks_from_settings(settings)
    if not settings.bootstrap_servers:  # alerts topic on the audited cluster, with the job's security
        sinks.insert(
            0,
            KafkaAlertSink(
                job.kconf,
                settings.alerts_topic,
                message_timeout_ms=settings.kafka_message_timeout_ms,
                flush_timeout_ms=settings.kafka_flush_timeout_ms,
            ),
        )
    evaluator = None
    if slo is not None:
        from alerts.slo_evaluation import SloEvaluator
        from alerts.slo_status import read_parquet_results

        url = str(settings.generator_url) if settings.generator_url else None
        evaluator = SloEvaluator(slo, job.metrics.registry, generator_url=url)
        now = int(time.time() * 1000)
        if job.s.parquet_dir.is_dir():
            loaded = evaluator.load(read_parquet_results(job.s.parquet_dir, now - evaluator.keep_ms), now)
            log.info("SLO evaluation: %d final window(s) read back from %s", loaded, job.s.parquet_dir)
    pipeline = AlertPipeline(
        settings,
        registry=job.metrics.registry,
        sinks=sinks,
        state_path=job.s.checkpoint_dir / ALERT_STATE_FILE,
        slo=evaluator,
    )
    job.listeners.append(pipeline.on_batch)
    job.decision_listeners.append(pipeline.on_decision)
    job.control_listeners.append(pipeline.on_control)
    job.closers.append(pipeline.close)
    return pipeline
