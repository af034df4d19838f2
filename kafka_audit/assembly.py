"""The one assembly of the reconciliation job: the Spark query, its alert pipeline and its control loop.

``kafka-audit spark-job``, ``kafka-audit up`` (:mod:`kafka_audit.up`), the testbed and the soak all
build their job with :func:`build_audit_job`, so each runs the same pieces wired the same way: the
:class:`~spark_streaming.job.ReconciliationJob` (sinks, metrics, live comparison, model lifecycle), then
the alert pipeline (:func:`alerts.batch_listener.attach_to_job`: rules, alerts topic, Alertmanager, webhook),
then the control loop (:func:`control_loop.loop.attach_to_job`). It lives in the application layer,
the lowest that may import all three; the lab imports it from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alerts.batch_listener import AlertPipeline
    from alerts.settings import AlertSettings
    from alerts.slo_settings import SloSettings
    from control_loop.loop import ControlLoop
    from control_loop.settings import ControlSettings
    from spark_streaming.job import ReconciliationJob, ResultListener
    from spark_streaming.settings import SparkJobSettings


@dataclass(frozen=True)
class AssembledJob:
    """A reconciliation job with what is attached to it, not yet started.

    Attributes:
        job: The job; ``job.start()`` runs it, ``job.stop()`` stops it and closes what is attached.
        alerts: Its alert pipeline (None: the job does not alert).
        control: Its control loop (None: none attached; a loop in ``off`` mode is attached inactive).
    """

    job: ReconciliationJob
    alerts: AlertPipeline | None
    control: ControlLoop | None


def build_audit_job(
    settings: SparkJobSettings,
    *,
    alerts: AlertSettings | None,
    control: ControlSettings | None,
    listeners: Iterable[ResultListener] = (),
    control_listeners: Iterable[Callable[[dict[str, Any]], None]] = (),
    slo: SloSettings | None = None,
) -> AssembledJob:
    """Build the reconciliation job from its settings, with its alert pipeline and control loop.

    Nothing connects to Kafka or starts Spark here: call ``job.start()`` on the result (and
    ``job.stop()`` when done, also after a failed start).

    Args:
        settings: The job's settings (Kafka, Spark master, event-time rules, sinks, model lifecycle).
        alerts: The alert rules and sinks; None: no alert pipeline. The pipeline's defaults follow the
            job (grace, audit-lag margin, gamma target; :func:`alerts.batch_listener.attach_to_job`).
        control: The control loop's settings (mode ``off``, ``advise`` or ``apply``); None: no control
            loop at all.
        listeners: Called on the driver with ``(batch_id, result rows)`` after each micro-batch, before
            the alert pipeline and the control loop.
        control_listeners: Called with each decision of the control loop (a dict), after the alert
            pipeline's.
        slo: The SLOs the alert pipeline evaluates in the job (budget and burn-rate gauges, burn-rate
            alerts: :mod:`alerts.slo_evaluation`); None: none (ignored without an alert pipeline).

    Returns:
        The job and what is attached to it.
    """
    from alerts.batch_listener import attach_to_job as attach_alerts
    from control_loop.loop import attach_to_job as attach_control
    from spark_streaming.job import ReconciliationJob

    job = ReconciliationJob(settings, listeners=list(listeners))
    pipeline = attach_alerts(job, alerts, slo=slo) if alerts is not None else None
    loop = attach_control(job, control) if control is not None else None
    job.control_listeners.extend(control_listeners)
    return AssembledJob(job=job, alerts=pipeline, control=loop)


__all__ = ["AssembledJob", "build_audit_job"]
