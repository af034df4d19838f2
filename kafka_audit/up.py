"""What ``kafka-audit up`` runs: the whole platform in one process, on the local or a given cluster.

Starts (in order, top to bottom of the data flow) the local Kafka cluster unless
``--bootstrap-servers`` is given, the audit consumer, the Spark reconciliation job as
:func:`kafka_audit.assembly.build_audit_job` builds it (with the live comparison, the alert pipeline:
alerts topic, and Alertmanager / webhook when configured, and the control loop in its configured
mode), and optionally an audited load scenario; shows a live table of window results, measured next
to predicted (on a terminal; without one, progress lines only, so the closing table is printed once);
stops everything (by PID / in reverse order) on Ctrl-C, SIGTERM or when the scenario's windows are
final. The live table is :mod:`kafka_audit.results_table`; the commands ``up`` and ``status`` are
:mod:`kafka_audit.up_cli`.

Without a scenario it is in monitor mode: it audits the topics the cluster carries (named ones and
those matching ``topic_patterns``, re-discovered while it runs) until stopped. A running instance
registers itself (:mod:`kafka_audit.instances`), so ``kafka-audit status`` finds it whatever its data
directory; the record names the topics audited now (discovered by the patterns) and each one's last
final window, refreshed while it runs. On stop, Kafka clients are closed before the local brokers, and
librdkafka's log lines of clients that are still closing are silenced once the brokers go down (no
"Connection refused" noise).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from audit_consumer.consumer import AuditConsumer
from audit_consumer.settings import AuditConsumerSettings
from audit_producer.librdkafka_config import reliability_config
from audit_producer.load import run_load
from audit_producer.settings import ProducerAuditSettings
from audit_record import window_result
from kafka_audit import instances
from kafka_audit.assembly import build_audit_job
from kafka_audit.results_table import results_table
from kafka_audit.up_settings import UpSettings
from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.security import client_config
from kafka_plumbing.topics import ensure_topic
from spark_streaming.job import ReconciliationJob
from spark_streaming.settings import SparkJobSettings

STATUS_FILE = "up.json"
PROGRESS_EVERY_S = 10.0
"""Without a terminal, ``up`` prints a progress line at most this often, s (when the counts changed)."""


class ComponentFailed(KafkaAuditError):
    """A component of ``kafka-audit up`` failed or stopped while ``up`` ran; the message names it.

    Components: the Spark job, the audit consumer (which must run until ``up`` stops), the load. ``up``
    then stops everything and exits with status 2.
    """


class Platform:
    """The running pieces of ``kafka-audit up`` and their shutdown."""

    def __init__(self, s: UpSettings, console: Console, json_out: IO[str] | None = None) -> None:
        self.s = s
        self.console = console
        self.json_out = json_out
        self.stop_event = threading.Event()
        self.cluster: KafkaCluster | None = None
        self.consumer: AuditConsumer | None = None
        self.job: ReconciliationJob | None = None
        self.rows: dict[tuple[str, int, str], dict[str, Any]] = {}
        self.load_windows: set[tuple[str, int]] = set()
        self._threads: list[threading.Thread] = []
        self._failures: dict[str, BaseException | None] = {}
        """Components that ended while ``up`` ran: name -> the exception it raised (None: it returned)."""
        self._lock = threading.Lock()
        self.table: Callable[..., Table] = results_table
        """The live table: :func:`results_table`, or the tier view (``up --tiers``,
        :func:`kafka_audit.tier_view.live_tiers_table`), called as ``table(rows, progress)``."""

    def _on_results(self, batch_id: int, results: list[dict[str, Any]]) -> None:
        with self._lock:
            for r in results:
                self.rows[(r["topic"], r["window_start_ms"], r["tier"])] = r
                if r["state"] == "final" and self.json_out is not None:
                    self.json_out.write(json.dumps(r, sort_keys=True) + "\n")
                    self.json_out.flush()

    def start(self) -> None:
        """Start Kafka (unless external), the audit consumer, the Spark job and the scenario."""
        s = self.s
        s.data_dir.mkdir(parents=True, exist_ok=True)
        bootstrap = s.bootstrap_servers
        if bootstrap is None:
            kafka_dir = s.data_dir / "kafka"
            self.cluster = KafkaCluster.load(kafka_dir) or KafkaCluster.create(kafka_dir, s.brokers)
            with self._step(f"starting local Kafka ({s.brokers} broker(s)) ..."):
                self.cluster.start()
                self.cluster.wait_transactions_ready()  # no librdkafka retry warnings from a fresh cluster
            bootstrap = self.cluster.bootstrap_servers
        self.bootstrap = bootstrap
        self._write_status()
        conf = client_config({"bootstrap.servers": bootstrap}, s.kafka)
        for t in s.all_topics:
            ensure_topic(conf, t, partitions=3)
        consumer_finality = s.consumer_finality
        self.consumer = AuditConsumer(
            AuditConsumerSettings(
                cluster=s.cluster,
                topics=s.all_topics,
                topic_patterns=s.topic_patterns,
                discovery_interval_ms=s.discovery_interval_ms,
                bootstrap_servers=bootstrap,
                kafka=s.kafka,
                window_ms=s.window_ms,
                grace_ms=consumer_finality.grace_ms,
                delivery_margin_ms=consumer_finality.delivery_margin_ms,
                max_final_wait_ms=consumer_finality.max_wait_ms,
                instance_id=f"up-{os.uname().nodename}",
            )
        )
        self._spawn("audit-consumer", self.consumer.run, self.stop_event, required=True)
        self.job = build_audit_job(
            self.job_settings(bootstrap),
            alerts=s.alerts,
            control=s.control,
            listeners=[self._on_results],
            slo=s.slo,
        ).job
        with self._step(f"starting Spark ({s.master}) ..."):
            self.job.start()
        if s.scenario:
            self._spawn("load", self._run_scenario)

    def _step(self, text: str) -> contextlib.AbstractContextManager[Any]:
        """Return a spinner showing ``text`` on a terminal; otherwise print ``text`` as a progress line."""
        if self.console.is_terminal:
            return self.console.status(text)
        self.console.print(text, highlight=False, soft_wrap=True)
        return contextlib.nullcontext()

    def job_settings(self, bootstrap: str) -> SparkJobSettings:
        """Return the Spark job's settings: ``up``'s own, its finality rule and its data directory.

        Args:
            bootstrap: The audited cluster's ``bootstrap.servers``.
        """
        s, finality = self.s, self.s.spark_finality
        return SparkJobSettings(
            bootstrap_servers=bootstrap,
            kafka=s.kafka,
            master=s.master,
            clusters=[s.cluster],
            trigger_ms=s.trigger_ms,
            grace_ms=finality.grace_ms,
            delivery_margin_ms=finality.delivery_margin_ms,
            max_final_wait_ms=finality.max_wait_ms,
            final_settle_ms=finality.settle_ms,
            watermark_delay_ms=s.watermark_delay_ms,
            metrics_port=s.metrics_port,
            checkpoint_dir=s.data_dir / "spark" / "checkpoint",
            parquet_dir=s.data_dir / "spark" / "results",
            topic_kpi=s.kpi,
            **s.model_lifecycle,  # registry, training store, retraining (else the job's settings)
        )

    def _run_scenario(self) -> None:
        s = self.s
        assert s.scenario_topic is not None and s.scenario is not None
        audit = ProducerAuditSettings(
            window_ms=s.window_ms,
            grace_ms=s.producer_grace_ms,
            snapshot_interval_ms=min(5_000, s.window_ms // 2),
            delivery_reports="all",  # the offsets acknowledged: windows final by proof (invariant 8)
        )
        result = run_load(
            client_config(
                {"bootstrap.servers": self.bootstrap, "client.id": f"up-{s.scenario}", **s.producer_config},
                s.kafka,
            ),
            s.scenario_topic,
            s.scenario,
            rate=s.rate,
            duration_s=s.duration_s or 120.0,
            audit=audit,
            stop=self.stop_event,
        )
        # The windows of the load's messages: from its clock's start (after the producer's check, which
        # may take seconds) to its last message, not from when run_load was called.
        now = time.time_ns() // 1_000_000
        start, end = result.started_at_ms or now, result.ended_at_ms or now
        w = s.window_ms
        self.load_windows = {(s.scenario_topic, t) for t in range(start - start % w, end + 1, w)}
        self.load_done = True

    def _spawn(self, name: str, target: Callable[..., Any], *args: Any, required: bool = False) -> None:
        """Run ``target(*args)`` in a daemon thread ``name``; a ``required`` component must run until stop.

        An exception of any component, and a ``required`` one returning before :meth:`stop`, is recorded
        for :meth:`check_components` (the audit consumer is required: without it nothing is counted, and
        the results would silently stop at the producer tier).
        """

        def run() -> None:
            try:
                target(*args)
            except BaseException as exc:  # recorded, raised again by check_components in the main thread
                self._failures[name] = exc
                return
            if required and not self.stop_event.is_set():
                self._failures[name] = None

        th = threading.Thread(target=run, name=name, daemon=True)
        th.start()
        self._threads.append(th)

    def check_components(self) -> None:
        """Raise if a component of ``up`` failed or a required one stopped (see :meth:`_spawn`).

        Raises:
            ComponentFailed: naming the component and its exception (chained), e.g. ``audit-consumer
                failed: KafkaException(...)`` or ``audit-consumer stopped ...``; or the Spark job's failure.
        """
        for name, exc in self._failures.items():
            if exc is None:
                raise ComponentFailed(f"{name} stopped while kafka-audit up ran")
            raise ComponentFailed(f"{name} failed: {exc!r}") from exc
        if self.job is not None and self.job.exception() is not None:
            raise ComponentFailed(f"Spark job failed: {self.job.exception()}")

    def status_record(self) -> dict[str, Any]:
        """Return what ``kafka-audit status`` shows of this instance (JSON-able).

        Keys: ``pid``, ``started_at`` (Unix s), ``mode`` (``monitor`` or ``scenario``),
        ``bootstrap_servers``, ``cluster``, ``topics`` (audited now: :meth:`audited_topics`),
        ``last_final_windows`` (per topic: :meth:`last_final_windows`), ``topic_patterns``,
        ``scenario``, ``metrics_port``, ``data_dir`` (absolute), ``kafka_pids`` (local brokers, else empty).
        """
        s = self.s
        return {
            "pid": os.getpid(),
            "started_at": getattr(self, "_started_at", None) or time.time(),
            "mode": "monitor" if s.monitor else "scenario",
            "bootstrap_servers": self.bootstrap,
            "cluster": s.cluster,
            "topics": self.audited_topics(),
            "last_final_windows": self.last_final_windows(),
            "topic_patterns": list(s.topic_patterns),
            "scenario": s.scenario,
            "metrics_port": s.metrics_port,
            "data_dir": str(s.data_dir.resolve()),
            "kafka_pids": [n.pid for n in self.cluster.nodes] if self.cluster else [],
        }

    def audited_topics(self) -> list[str]:
        """Return the topics audited now, sorted: the named ones and those the patterns discovered.

        The audit consumer re-discovers the topics matching ``topic_patterns`` every
        ``discovery_interval_ms`` (:mod:`audit_consumer.discovery`); before its first discovery, the
        named topics only.
        """
        discovered = self.consumer.topics if self.consumer is not None else []
        return sorted({*self.s.all_topics, *discovered})

    def last_final_windows(self) -> dict[str, dict[str, Any]]:
        """Return each audited topic's newest final window result seen so far, in brief (JSON-able).

        Per topic (only topics with a final window), its :data:`audit_record.window_result.BRIEF_FIELDS`:
        ``window_start_ms`` and ``window_end_ms`` (Unix ms), ``tier``, ``sent``, ``received``,
        ``unaudited`` (messages), ``loss_rate`` and ``duplicate_rate`` (fractions, None when undefined).
        Of several tiers of one window, this cluster's own.
        """
        own = f"cluster:{self.s.cluster}"
        with self._lock:
            finals = [r for r in self.rows.values() if r["state"] == "final"]
        newest: dict[str, dict[str, Any]] = {}
        for r in sorted(finals, key=lambda r: (r["window_start_ms"], r["tier"] == own)):
            newest[r["topic"]] = r
        return {t: {k: r.get(k) for k in window_result.BRIEF_FIELDS} for t, r in sorted(newest.items())}

    def refresh_status(self) -> bool:
        """Rewrite the status record if the audited topics or their last final windows changed.

        Returns:
            True if it was rewritten. Called by :meth:`run` about twice a second; a write that fails
            (a full disk) is retried at the next call.
        """
        view = (self.audited_topics(), self.last_final_windows())
        if view == getattr(self, "_status_view", None):
            return False
        try:
            self._write_status()
        except OSError:
            return False
        self._status_view = view
        return True

    def _write_status(self) -> None:
        """Record this instance in its data directory and in the user's instance registry."""
        self._started_at = getattr(self, "_started_at", None) or time.time()
        record = self.status_record()
        instances.write_data_dir_record(self.s.data_dir, STATUS_FILE, record)
        try:
            instances.register(record)
        except OSError as exc:  # e.g. a read-only home: status then needs --data-dir
            self.console.print(f"[yellow]not registered in {instances.instances_dir()}: {exc}[/]")

    def scenario_final(self) -> bool:
        """Return True once the scenario has ended and every one of its windows has a final result."""
        if not getattr(self, "load_done", False):
            return False
        with self._lock:
            final = {(t, w) for (t, w, _), r in self.rows.items() if r["state"] == "final"}
        return bool(self.load_windows) and self.load_windows <= final

    def run(self, until_final: bool) -> None:
        """Show the results until stopped (or, with ``until_final``, until the scenario is final).

        On a terminal, a live table (:attr:`table`) redrawn twice a second; otherwise (output to a file
        or a pipe) no live frames at all, only a progress line when the count of window results changed
        (at most every :data:`PROGRESS_EVERY_S`), so the closing table is the only table in the output.
        The status record's audited topics and last final windows are refreshed on the way
        (:meth:`refresh_status`).

        Raises:
            ComponentFailed: if the Spark job fails, or the audit consumer or the load fails, or the audit
                consumer stops (:meth:`check_components`).
        """
        assert self.job is not None
        if not self.console.is_terminal:
            self._watch(until_final, self._progress_line)
            return
        with Live(self.table(self.rows, {}), console=self.console, refresh_per_second=2) as live:
            self._watch(until_final, lambda progress: live.update(self.table(self.rows, progress)))

    def _watch(self, until_final: bool, show: Callable[[dict[str, Any]], None]) -> None:
        """Call ``show(progress)`` every 0.5 s until stopped or final (see :meth:`run`)."""
        assert self.job is not None
        deadline = None
        while not self.stop_event.is_set():
            self.check_components()
            show(self.job.progress())
            self.refresh_status()
            if until_final and getattr(self, "load_done", False):
                deadline = deadline or time.monotonic() + self.final_wait_s() + 120
                if self.scenario_final() or time.monotonic() > deadline:
                    break
            self.stop_event.wait(0.5)

    def _progress_line(self, progress: dict[str, Any]) -> None:
        """Print one line of progress (window results so far, audit lag) if the counts changed.

        At most every :data:`PROGRESS_EVERY_S` seconds: for output that is not a terminal.
        """
        with self._lock:
            states = [r["state"] for r in self.rows.values()]
        counts = (states.count("final"), len(states) - states.count("final"))
        now = time.monotonic()
        if counts == getattr(self, "_progress_counts", None) or now < getattr(self, "_progress_at", 0.0):
            return
        self._progress_counts, self._progress_at = counts, now + PROGRESS_EVERY_S
        lag = progress.get("lag_s")
        self.console.print(
            f"{counts[0]} final, {counts[1]} provisional window result(s) on "
            f"{len(self.audited_topics())} topic(s)"
            + (f"; audit lag {lag:.1f} s" if lag is not None else ""),
            highlight=False,
            soft_wrap=True,
        )

    def final_wait_s(self) -> float:
        """Return how long after the load's last window starts it takes to be final, at most, s.

        One window, then the Spark job's wait for the load producers' ``message.timeout.ms``
        (:class:`audit_record.finality.Finality`), then the watermark delay.
        """
        timeout = reliability_config(self.s.producer_config).message_timeout_ms
        wait = self.s.spark_finality.wait_ms(timeout)
        return (self.s.window_ms + wait + self.s.watermark_delay_ms) / 1000

    def stop(self) -> None:
        """Stop everything in reverse order of the data flow: clients first, then Kafka, by PID.

        The load, the Spark job (its sinks, heartbeat and the alert and control clients) and the audit
        consumer close their Kafka clients while the brokers still run; the local brokers stop last.
        librdkafka's log lines from a client still closing then (``Connection refused``) are silenced:
        they say nothing once the brokers are meant to be down.
        """
        self.stop_event.set()
        if self.job is not None:
            self.job.stop()
            if self.job.spark is not None:
                self.job.spark.stop()
        for th in self._threads:
            th.join(60)
        try:
            if self.cluster is not None:
                with quiet_librdkafka():
                    self.cluster.stop()
        finally:
            (self.s.data_dir / STATUS_FILE).unlink(missing_ok=True)
            instances.unregister(os.getpid())


@contextlib.contextmanager
def quiet_librdkafka() -> Iterator[None]:
    """Silence what librdkafka writes to stderr (file descriptor 2) inside the block.

    librdkafka logs with its own default logger, straight to fd 2, from its threads: a client whose
    broker goes away prints ``Connect to ipv4#127.0.0.1:...: Connection refused`` until it is destroyed.
    Used around stopping the local brokers, after every client of ``up`` was closed; Python's own
    ``sys.stderr`` is flushed first and restored after, so errors after the block show as usual.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def read_status(data_dir: Path) -> dict[str, Any] | None:
    """Return what ``kafka-audit up`` recorded in ``data_dir`` if that process is alive, else None.

    Alive as :func:`kafka_plumbing.processes.pid_alive` says (a zombie is not, another user's process is).
    """
    return instances.read_data_dir_record(Path(data_dir), STATUS_FILE)
