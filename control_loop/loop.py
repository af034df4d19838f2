"""The control loop attached to the Spark job: a listener of every micro-batch, on the driver.

::

    job = ReconciliationJob(spark_settings)
    loop = attach_to_job(job, ControlSettings(mode="apply"))   # closed by job.stop()
    job.start()

Per micro-batch (:meth:`ControlLoop.process`): predict the provisional results whose counts settled
(:mod:`control_loop.provisional`) with the micro-batch's model, on copies; read the kill switch
(setting, the file ``control.kill`` in the checkpoint directory, ``KAFKA_AUDIT_CONTROL_KILL=1``);
in ``apply`` mode
follow the control topic's versions (a forced record is never overtaken); decide
(:class:`~control_loop.decide.Controller`); in ``apply`` mode write each change and rollback to the
control topic (unacknowledged records are kept and written again next time); count the decisions
(:mod:`control_loop.metrics`); save the state (``control-state.json`` in the checkpoint directory);
hand every decision (``ControlDecision.to_json()``) to ``job.control_listeners`` (the alert pipeline
makes events of them). In ``advise`` mode no producer, reader or topic is created: nothing is written
to the control topic. Nothing here raises into the job: failures are logged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, MutableSequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from audit_record import window_result
from audit_record.control_record import ControlRecord
from control_loop.controller_state import STATE_FILE, ControlStateFile
from control_loop.decide import ControlDecision, Controller, decision_line
from control_loop.metrics import ControlMetrics
from control_loop.provisional import settled
from control_loop.publish import ControlPublisher, PublishError, control_record
from control_loop.settings import KILL_ENV, KILL_FILE, ControlSettings
from control_loop.topic import ControlTopicReader

if TYPE_CHECKING:
    from spark_streaming.job import ReconciliationJob

log = logging.getLogger(__name__)

ControlListener = Callable[[dict[str, Any]], None]
"""Called with each decision (``ControlDecision.to_json()``) on the driver."""

_TRUE = ("1", "true", "yes", "on")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class ControlLoop:
    """Controller + control topic + metrics + state file for one job.

    Args:
        settings: Mode and guardrails.
        kafka_config: librdkafka config of the control topic's cluster (``bootstrap.servers``, security).
        checkpoint_dir: The job's checkpoint directory: state file and default kill-switch file.
        registry: prometheus-client registry of the metrics (default: a new private one).
        listeners: Called with each decision's ``to_json()``; the list is kept, not copied (the job's
            ``control_listeners``), so listeners added later are called too.
        publisher_factory: Builds the control-topic writer in ``apply`` mode (tests pass a fake).
        reader_factory: Builds the control-topic reader in ``apply`` mode (tests pass a fake).
        clock: Wall clock, ms since the epoch UTC.
        predict: Fills the live-comparison fields (measured and predicted gamma, the suggestion) of
            settled provisional results, in place (:mod:`control_loop.provisional`); the rows are the
            loop's copies, never written anywhere. None: the controller decides from final results only.
    """

    def __init__(
        self,
        settings: ControlSettings,
        kafka_config: Mapping[str, Any],
        checkpoint_dir: Path,
        registry: CollectorRegistry | None = None,
        listeners: MutableSequence[ControlListener] | None = None,
        publisher_factory: Callable[[], Any] | None = None,
        reader_factory: Callable[[], Any] | None = None,
        clock: Callable[[], int] = _now_ms,
        predict: Callable[[list[dict[str, Any]]], Any] | None = None,
    ) -> None:
        self.predict = predict
        self.settings = settings
        self.kafka_config = dict(kafka_config)
        self.kill_file = settings.kill_file or Path(checkpoint_dir) / KILL_FILE
        self.state_file = ControlStateFile(Path(checkpoint_dir) / STATE_FILE)
        self.metrics = ControlMetrics(registry if registry is not None else CollectorRegistry())
        self.listeners: MutableSequence[ControlListener] = listeners if listeners is not None else []
        self.clock = clock
        self._publisher_factory = publisher_factory or (
            lambda: ControlPublisher(self.kafka_config, settings.control_topic, settings.publish_timeout_ms)
        )
        self._reader_factory = reader_factory or (
            lambda: ControlTopicReader(self.kafka_config, settings.control_topic)
        )
        self.publisher: Any = None
        self.reader: Any = None
        self.unsent: list[ControlRecord] = []
        saved = self.state_file.load()
        self.controller = Controller(settings, saved[0] if saved else None)
        if saved:
            self.unsent = saved[1]
            log.info(
                "control-loop state restored from %s: %d group(s), %d unsent record(s)",
                self.state_file.path,
                len(self.controller.state.groups),
                len(self.unsent),
            )

    @property
    def applies(self) -> bool:
        """True in ``apply`` mode (the only mode that writes to the control topic)."""
        return self.settings.mode == "apply"

    def kill_switch(self) -> str | None:
        """Return why the kill switch is on (setting, environment, file), None when it is off."""
        if self.settings.kill_switch:
            return "setting kill_switch"
        if os.environ.get(KILL_ENV, "").strip().lower() in _TRUE:
            return f"environment {KILL_ENV}"
        if self.kill_file.exists():
            return f"file {self.kill_file}"
        return None

    def _open(self) -> bool:
        """In apply mode, read the control topic once (versions) and create the writer; False on failure."""
        if self.reader is not None:
            return True
        reader = None
        try:
            reader = self._reader_factory()
            reader.read_to_end()
            self.publisher = self.publisher or self._publisher_factory()
        except Exception as exc:  # the broker is away: try again on the next micro-batch
            if reader is not None:  # its consumer is closed now, not left to the garbage collector
                with contextlib.suppress(Exception):
                    reader.close()
            log.warning(
                "control topic %s not readable, no decision this micro-batch: %s",
                self.settings.control_topic,
                exc,
            )
            return False
        self.reader = reader
        self.controller.seed_versions(reader.versions())
        return True

    def process(self, rows: Iterable[Mapping[str, Any]], now_ms: int | None = None) -> list[ControlDecision]:
        """Decide on one micro-batch of window results; write, count, save and hand on the decisions.

        Args:
            rows: Window results: final ones, and provisional ones whose counts settled
                (:func:`control_loop.provisional.settled`; predicted here by :attr:`predict` for windows
                the controller has not taken yet).
            now_ms: Wall clock, ms since the epoch UTC (default: :attr:`clock`).

        Returns:
            The decisions made.
        """
        if self.settings.mode == "off":
            return []
        now = self.clock() if now_ms is None else now_ms
        killed = self.kill_switch()
        self.metrics.kill_switch.set(1 if killed else 0)
        rows = list(rows)
        final = [r for r in rows if r.get("state") == window_result.FINAL]
        early = [dict(r) for r in rows if settled(r) and self.controller.is_new(r)]
        self.metrics.add_groups(self.controller.groups_of([*final, *early]))
        if early and self.predict is not None:
            try:
                self.predict(early)
            except Exception:  # the final results will do, as before
                log.exception("live comparison of %d settled provisional window(s) failed", len(early))
        unsettled = [r for r in rows if r.get("state") == window_result.PROVISIONAL and not settled(r)]
        if self.applies:
            if not self._open():
                return []
            try:
                self.controller.seed_versions({g: r.version for g, r in self.reader.poll().items()})
            except Exception as exc:  # versions as read before; a forced record shows up next time
                log.warning("control topic %s not polled: %s", self.settings.control_topic, exc)
        decisions = self.controller.decide([*final, *early, *unsettled], now, kill_switch=killed is not None)
        for d in decisions:
            (log.debug if d.kind == "held" else log.info)("%s", decision_line(d))
            if self.applies and d.writes:
                record = control_record(d, self.settings.expiry_ms)
                self.unsent = [r for r in self.unsent if r.group != d.group] + [record]
        self.metrics.count(decisions)
        if self.applies:
            self._write(now)
        self._save()
        for d in decisions:
            for listener in list(self.listeners):
                try:
                    listener(d.to_json())
                except Exception:  # a listener's bug must not stop the others or the job
                    log.exception("control listener failed on the %s decision of %s", d.kind, d.group)
        return decisions

    def _write(self, now_ms: int) -> None:
        """Write the unsent records (oldest first); keep those not acknowledged, drop expired ones."""
        keep: list[ControlRecord] = []
        for record in self.unsent:
            if record.expired(now_ms):
                log.error("control record v%d of group %s expired unsent", record.version, record.group)
                continue
            try:
                self.publisher.publish(record)
            except PublishError as exc:
                self.metrics.write_failures.inc()
                log.error("%s (written again on the next micro-batch)", exc)
                keep.append(record)
        self.unsent = keep

    def _save(self) -> None:
        try:
            self.state_file.save(self.controller.state, self.unsent)
        except OSError as exc:  # the loop goes on; a restart would resume from an older state
            log.error("control-loop state not saved to %s: %s", self.state_file.path, exc)

    def on_batch(self, batch_id: int, results: list[dict[str, Any]]) -> None:
        """``ReconciliationJob`` listener: ``(batch_id, result rows)`` on the driver. Never raises."""
        try:
            self.process(results)
        except Exception:  # the results are written already; control is best effort
            log.exception("control loop failed on micro-batch %d", batch_id)

    def close(self) -> None:
        """Close the control-topic writer and reader (if created). Never raises."""
        for part in (self.publisher, self.reader):
            if part is not None:
                try:
                    part.close()
                except Exception as exc:  # closing must not mask the job's own shutdown
                    log.warning("closing the control loop: %s", exc)


def attach_to_job(job: ReconciliationJob, settings: ControlSettings) -> ControlLoop:
    """Run the control loop on every micro-batch of ``job``; call before ``job.start()``.

    The control topic is on the job's cluster with the job's security settings unless
    ``settings.bootstrap_servers`` names another. The state and the default kill-switch file are in the
    job's checkpoint directory; metrics go to the job's registry; decisions to ``job.control_listeners``;
    ``job.stop()`` closes it. In ``off`` mode nothing is attached (the loop is returned, inactive).

    Returns:
        The loop.
    """
    kconf: dict[str, Any] = dict(job.kconf)
    if settings.bootstrap_servers:
        kconf["bootstrap.servers"] = settings.bootstrap_servers
    loop = ControlLoop(
        settings,
        kconf,
        job.s.checkpoint_dir,
        registry=job.metrics.registry,
        listeners=job.control_listeners,
        predict=(lambda rows: job.predict_provisional(rows)) if job.s.predict else None,
    )
    if settings.mode != "off":
        job.listeners.append(loop.on_batch)
        job.closers.append(loop.close)
        log.info("control loop attached: mode %s, control topic %s", settings.mode, settings.control_topic)
    return loop


__all__ = ["ControlListener", "ControlLoop", "attach_to_job"]
