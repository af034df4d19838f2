"""``kafka-audit up``: the whole platform in one command, on the embedded default or a given cluster.

Starts (in order, top to bottom of the data flow) the local Kafka cluster unless
``--bootstrap-servers`` is given, the audit consumer, the Spark reconciliation job (with the live
comparison, the alert pipeline: alerts topic, and Alertmanager / webhook when configured, and the
control loop in its configured mode), and
optionally an audited load scenario; shows a live table of window results, measured next to
predicted; stops everything (by PID / in reverse order) on Ctrl-C, SIGTERM or when the scenario's
windows are final.

Without a scenario it is in monitor mode: it audits the topics the cluster carries (named ones and
those matching ``topic_patterns``, re-discovered while it runs) until stopped. A running instance
registers itself (:mod:`kafka_audit.instances`), so ``kafka-audit status`` finds it whatever its data
directory. On stop, Kafka clients are closed before the local brokers, and librdkafka's log lines of
clients that are still closing are silenced once the brokers go down (no "Connection refused" noise).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from alerts.batch_listener import attach_to_job
from audit_consumer.consumer import AuditConsumer
from audit_consumer.settings import AuditConsumerSettings
from audit_producer.librdkafka_config import reliability_config
from audit_producer.load import run_load
from audit_producer.settings import ProducerAuditSettings
from audit_record import window_result
from control_loop.loop import attach_to_job as attach_control
from kafka_audit import instances
from kafka_audit.up_settings import UpSettings
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.security import client_config
from kafka_plumbing.topics import ensure_topic
from spark_streaming.job import ReconciliationJob
from spark_streaming.settings import SparkJobSettings

STATUS_FILE = "up.json"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def _interval(p: float | None, lo: float | None, hi: float | None) -> str:
    """P_l with its 90% interval: ``1.23% [0.50-2.00]`` (percent)."""
    if p is None:
        return "-"
    if lo is None or hi is None:
        return _pct(p)
    return f"{100 * p:.2f}% [{100 * lo:.2f}-{100 * hi:.2f}]"


def _calibrating(r: dict[str, Any]) -> bool:
    """Return True if the window's P_l came from a model still calibrating for this deployment."""
    return r.get("model_calibrated") is False and r.get("p_loss") is not None


def serving_model(rows: Iterable[dict[str, Any]]) -> str | None:
    """Return ``model <version>`` of the newest final window with a model version (None if none).

    ``calibrating`` is added while that model is not yet calibrated for this deployment (no drift alert
    fires then).
    """
    finals = [r for r in rows if r.get("state") == "final" and r.get("model_version")]
    if not finals:
        return None
    newest = max(finals, key=lambda r: (r["window_start_ms"], r.get("result_at_ms") or 0))
    return f"model {newest['model_version']}" + (" calibrating" if _calibrating(newest) else "")


def _gamma(r: dict[str, Any], show_target: bool) -> str:
    """Return gamma actual / predicted (Eq. 2), red when actual is below the target."""
    actual, predicted, target = r.get("gamma_actual"), r.get("gamma_predicted"), r.get("gamma_target")
    if actual is None:
        return "-"
    text = f"{actual:.2f}/" + ("-" if predicted is None else f"{predicted:.2f}")
    if show_target and target is not None:
        text += f" <{target:.2f}" if actual < target else f" ≥{target:.2f}"
    if target is None:
        return text
    return f"[red]{text}[/]" if actual < target else f"[green]{text}[/]"


def short_suggestion(row: dict[str, Any]) -> str:
    """Return a window's suggested changes only, e.g. ``batch.num.messages 1→8`` (the alert has the numbers).

    Read from the structured ``suggested_*`` fields (:func:`audit_record.window_result.suggested_changes`)
    next to the values in effect; ``""`` when the window has no suggestion.
    """
    now = window_result.current_properties(row)
    return ", ".join(
        f"{prop} {_value(now[prop])}→{_value(new)}"
        for prop, new in window_result.suggested_changes(row).items()
    )


def _value(x: Any) -> str:
    return "?" if x is None else f"{x:g}" if isinstance(x, float) else str(x)


def unaudited_cell(row: dict[str, Any]) -> str:
    """Return a window's unaudited messages and their share of what the cluster holds: ``8,000 (100%)``.

    Unaudited messages carry no audit stamp (their producers do not use ``AuditedProducer``); they are
    counted apart and never as lost. ``-`` when there are none.
    """
    unaudited, received = row.get("unaudited") or 0, row.get("received") or 0
    if not unaudited:
        return "-"
    share = f"{100 * unaudited / received:.0f}%" if received else "?"
    return f"[yellow]{unaudited:,} ({share})[/]"


def _unaudited_only(row: dict[str, Any]) -> bool:
    """Return True for a window with unaudited messages and no audited producer (``sent`` 0): no R_l."""
    return not row.get("sent") and bool(row.get("unaudited"))


def results_table(
    rows: dict[tuple[str, int, str], dict[str, Any]],
    progress: dict[str, Any],
    limit: int = 20,
    final_only: bool = False,
) -> Table:
    """Build the live / closing table: newest window results first, measured next to predicted.

    Per window: messages sent, the measured R_l and R_d, the predicted P_l (with its 90% interval) and
    P_d, gamma actual / predicted (red below the target) and the suggested configuration change; the
    prediction columns fill in when a window is final. Fits 140 columns; the tier column appears only
    when more than one cluster tier is shown (else the title names it), likewise the gamma target. The
    title names the model version serving the newest final window (:func:`serving_model`); a P_l made
    by a model still calibrating for this deployment ends in ``cal.`` (dimmed): no drift alert judges it.
    The ``unaudited`` column (messages without an audit stamp and their share of the traffic,
    :func:`unaudited_cell`) appears only when a shown window has some; a window with unaudited messages
    only (no audited producer) shows ``n/a`` for R_l and R_d, explained in the caption.
    """
    from datetime import UTC, datetime

    chosen = [r for r in rows.values() if not final_only or r["state"] == "final"]
    chosen = sorted(chosen, key=lambda r: (r["window_start_ms"], r["topic"]), reverse=not final_only)[:limit]
    tiers = sorted({r["tier"] for r in chosen})
    unaudited = any(r.get("unaudited") for r in chosen)
    targets = sorted({r["gamma_target"] for r in chosen if r.get("gamma_target") is not None})
    notes = []
    if len(tiers) == 1:
        notes.append(tiers[0])
    lag = progress.get("lag_s")
    if lag is not None:
        notes.append(f"audit lag {lag:.1f} s")
    if len(targets) == 1:
        notes.append(f"gamma actual/predicted, target {targets[0]:.2f}")
    model = serving_model(rows.values())
    if model is not None:
        notes.append(model)
    caption = (
        "unaudited: messages without an audit stamp (share of what the cluster holds), never counted as "
        "lost; n/a: no audited producer in the window, so no loss rate"
        if unaudited
        else None
    )
    table = Table(
        title="kafka-audit: window results" + (f" ({', '.join(notes)})" if notes else ""), caption=caption
    )
    columns = ["topic", *(["tier"] if len(tiers) > 1 else []), "window (UTC)", "sent"]
    columns += [*(["unaudited"] if unaudited else []), "R_l"]
    columns += ["P_l [90%]", "R_d", "P_d", "gamma", "suggestion", "state"]
    for col in columns:
        if col == "suggestion":
            table.add_column(col, overflow="fold", max_width=30)
        else:
            table.add_column(
                col,
                justify="left" if col in ("topic", "tier", "state") else "right",
                no_wrap=col == "P_l [90%]",
            )
    for r in chosen:
        cells = [r["topic"]]
        if len(tiers) > 1:
            cells.append(r["tier"].removeprefix("cluster:"))
        na = _unaudited_only(r)
        cells += [
            datetime.fromtimestamp(r["window_start_ms"] / 1000, UTC).strftime("%H:%M:%S"),
            f"{r['sent']:,}",
            *([unaudited_cell(r)] if unaudited else []),
            "n/a" if na else _pct(r["loss_rate"]),
            _interval(r.get("p_loss"), r.get("p_loss_lo"), r.get("p_loss_hi"))
            if not _calibrating(r)
            else f"[dim]{_interval(r.get('p_loss'), r.get('p_loss_lo'), r.get('p_loss_hi'))} cal.[/]",
            "n/a" if na else _pct(r["duplicate_rate"]),
            _pct(r.get("p_dup")),
            _gamma(r, show_target=len(targets) > 1),
            short_suggestion(r),
            "[green]final[/]" if r["state"] == "final" else "[yellow]provisional[/]",
        ]
        table.add_row(*cells)
    return table


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
            with self.console.status(f"starting local Kafka ({s.brokers} broker(s)) ..."):
                self.cluster.start()
            bootstrap = self.cluster.bootstrap_servers
        self.bootstrap = bootstrap
        self._write_status()
        conf = client_config({"bootstrap.servers": bootstrap}, s.kafka)
        for t in s.all_topics:
            ensure_topic(conf, t, partitions=3)
        consumer_finality, spark_finality = s.consumer_finality, s.spark_finality
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
        self._spawn("audit-consumer", self.consumer.run, self.stop_event)
        self.job = ReconciliationJob(
            SparkJobSettings(
                bootstrap_servers=bootstrap,
                kafka=s.kafka,
                master=s.master,
                clusters=[s.cluster],
                trigger_ms=s.trigger_ms,
                grace_ms=spark_finality.grace_ms,
                delivery_margin_ms=spark_finality.delivery_margin_ms,
                max_final_wait_ms=spark_finality.max_wait_ms,
                final_settle_ms=spark_finality.settle_ms,
                watermark_delay_ms=s.watermark_delay_ms,
                metrics_port=s.metrics_port,
                checkpoint_dir=s.data_dir / "spark" / "checkpoint",
                parquet_dir=s.data_dir / "spark" / "results",
                topic_kpi=s.kpi,
                **s.model_lifecycle,  # registry, training store, retraining (else the job's settings)
            ),
            listeners=[self._on_results],
        )
        attach_to_job(self.job, s.alerts)
        attach_control(self.job, s.control)
        with self.console.status(f"starting Spark ({s.master}) ..."):
            self.job.start()
        if s.scenario:
            self._spawn("load", self._run_scenario)

    def _run_scenario(self) -> None:
        s = self.s
        assert s.scenario_topic is not None and s.scenario is not None
        audit = ProducerAuditSettings(
            window_ms=s.window_ms,
            grace_ms=s.producer_grace_ms,
            snapshot_interval_ms=min(5_000, s.window_ms // 2),
            delivery_reports="errors",
        )
        start = time.time_ns() // 1_000_000
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
        end = start + int(result.seconds * 1000)
        w = s.window_ms
        self.load_windows = {(s.scenario_topic, t) for t in range(start - start % w, end + 1, w)}
        self.load_done = True

    def _spawn(self, name: str, target: Callable[..., Any], *args: Any) -> None:
        th = threading.Thread(target=target, args=args, name=name, daemon=True)
        th.start()
        self._threads.append(th)

    def status_record(self) -> dict[str, Any]:
        """Return what ``kafka-audit status`` shows of this instance (JSON-able).

        Keys: ``pid``, ``started_at`` (Unix s), ``mode`` (``monitor`` or ``scenario``),
        ``bootstrap_servers``, ``cluster``, ``topics``, ``topic_patterns``, ``scenario``,
        ``metrics_port``, ``data_dir`` (absolute), ``kafka_pids`` (local brokers, else empty).
        """
        s = self.s
        return {
            "pid": os.getpid(),
            "started_at": getattr(self, "_started_at", None) or time.time(),
            "mode": "monitor" if s.monitor else "scenario",
            "bootstrap_servers": self.bootstrap,
            "cluster": s.cluster,
            "topics": s.all_topics,
            "topic_patterns": list(s.topic_patterns),
            "scenario": s.scenario,
            "metrics_port": s.metrics_port,
            "data_dir": str(s.data_dir.resolve()),
            "kafka_pids": [n.pid for n in self.cluster.nodes] if self.cluster else [],
        }

    def _write_status(self) -> None:
        """Record this instance in its data directory and in the user's instance registry."""
        self._started_at = time.time()
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
        """Show the live table until stopped (or, with ``until_final``, until the scenario is final)."""
        assert self.job is not None
        deadline = None
        with Live(self.table(self.rows, {}), console=self.console, refresh_per_second=2) as live:
            while not self.stop_event.is_set():
                if self.job.exception() is not None:
                    raise RuntimeError(f"Spark job failed: {self.job.exception()}")
                live.update(self.table(self.rows, self.job.progress()))
                if until_final and getattr(self, "load_done", False):
                    deadline = deadline or time.monotonic() + self.final_wait_s() + 120
                    if self.scenario_final() or time.monotonic() > deadline:
                        break
                self.stop_event.wait(0.5)

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
