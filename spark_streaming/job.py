"""The reconciliation job: Kafka source -> decode -> stateful reconcile -> exactly-once sinks.

``ReconciliationJob(settings).start()`` builds a local or cluster Spark session (``spark-sql-kafka``
jars from the project's pom, no download at run time), starts the streaming query with its checkpoint,
a heartbeat thread (event time advances while producers are idle) and the sinks. Callers stop it with
:meth:`ReconciliationJob.stop`.

The query: Kafka source -> decode (``mapInPandas``) -> stateful reconcile (``applyInPandasWithState``)
-> ``foreachBatch``: the live comparison (on the driver, over the micro-batch's collected rows,
:mod:`spark_streaming.predict`: P_l, P_d, gamma, suggestion for final windows, with the model the
driver chose for this micro-batch: the registry's champion, so a promotion is served from the next
micro-batch on), ``model_calibrated`` (:mod:`spark_streaming.calibration`), exactly-once sinks, the
training store, Prometheus metrics and listeners; then, between micro-batches, the model lifecycle
(:mod:`spark_streaming.live_model`: decisions, background retraining). The alert pipeline is a
listener of results and of decisions, attached by the layer above (``alerts.attach_to_job``): this
package never imports ``alerts`` (``docs/DESIGN.md``, "Layers").
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

from confluent_kafka import KafkaException, Producer

from audit_record import now_ms, window_result
from kafka_plumbing.jvm import jars_dir
from kafka_plumbing.security import client_config, spark_kafka_options
from kafka_plumbing.topics import AUDIT_TOPIC_CONFIG, ensure_topic
from spark_streaming.decode import DECODED_SCHEMA, HEARTBEAT_KEY, decode_batches
from spark_streaming.live_model import DecisionListener, LiveModel
from spark_streaming.metrics import ResultMetrics
from spark_streaming.predict import KpiConfig, predict_rows
from spark_streaming.settings import DEFAULT_GAMMA_TARGET, SparkJobSettings
from spark_streaming.sinks import KafkaResultSink, ParquetResultSink
from spark_streaming.window_state import OUTPUT_COLUMNS, OUTPUT_SCHEMA, STATE_SCHEMA, make_reconciler

log = logging.getLogger(__name__)
ResultListener = Callable[[int, list[dict[str, Any]]], None]
_CONNECTOR_JARS = ("spark-sql-kafka", "spark-token-provider-kafka", "kafka-clients", "commons-pool2")


def connector_jars() -> list[str]:
    """Return the Kafka connector jars Spark needs beyond what pyspark ships (from ``jars-spark``)."""
    return sorted(str(p) for p in jars_dir("spark").glob("*.jar") if p.name.startswith(_CONNECTOR_JARS))


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """Turn NaN (a missing prediction on its way through Arrow) into None, as the Avro schema wants."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


DRIVER_STATUS_LIMITS: dict[str, str] = {
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "10000",
    "spark.ui.retainedDeadExecutors": "10",
    "spark.sql.ui.retainedExecutions": "50",
}
"""How much finished work the driver remembers (Spark configuration, "Spark UI" section).

The driver's status store keeps finished jobs, stages, tasks and SQL executions even with the UI off
(``spark.ui.enabled=false``); at Spark's defaults (1,000 jobs and stages, 100,000 tasks, 1,000
executions) a streaming job that runs several jobs per micro-batch grows its heap for hours before the
store trims (issue 18: the soak's driver grew 13% in 40 minutes). A long-running job needs only the
recent ones: the job reads its own progress (``lastProgress``, ``recentProgress``: 100 batches by
default, already bounded), never the history of jobs and stages.
"""


def spark_session(
    master: str,
    shuffle_partitions: int,
    app_name: str = "kafka-audit",
    driver_host: str = "127.0.0.1",
    bind_address: str = "127.0.0.1",
) -> Any:
    """Create (or get) the Spark session with the connector jars and settings that stop cleanly.

    ``driver_host`` is the address executors reach the driver at (``spark.driver.host``) and
    ``bind_address`` the one it listens on (``spark.driver.bindAddress``): loopback locally, the
    container's name and 0.0.0.0 in docker-compose.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this venv's pandas, fastavro
    # pyspark 4.0's own pandas calls warn on every batch in the workers; keep our output readable.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    from pyspark.sql import SparkSession

    log4j = str(resources.files("spark_streaming").joinpath("log4j2-driver.properties"))
    # Spark splits the options at whitespace: a path with some keeps Spark's default logging
    driver_options = "-Xss16m"
    if not any(c.isspace() for c in log4j):
        driver_options += f" -Dlog4j2.configurationFile={log4j}"
    session = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.jars", ",".join(connector_jars()))
        .config("spark.driver.extraJavaOptions", driver_options)
        .config("spark.driver.host", driver_host)
        .config("spark.driver.bindAddress", bind_address)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        .config(map=DRIVER_STATUS_LIMITS)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


class ReconciliationJob:
    """One running reconciliation query and its sinks.

    Args:
        settings: See :class:`SparkJobSettings`.
        listeners: Called on the driver with ``(batch_id, result rows)`` after each batch is written.

    Attributes:
        gamma_target: gamma target of topics without their own (0-1): the settings', else 0.9. A layer
            above may change it before :meth:`start` (the alert pipeline sets its own when the job has
            none).
        closers: Called by :meth:`stop` after the sinks are closed, last added first (listeners that
            hold resources, e.g. the alert pipeline).
        decision_listeners: Called on the driver with each new champion/challenger decision of the
            model registry (a dict, ``predictor.promotion.Decision.to_json``), at a micro-batch boundary.
        control_listeners: Called on the driver with each decision of the control loop (a dict,
            ``control_loop.decide.ControlDecision.to_json``); filled by the layers above
            (``control_loop.attach_to_job`` calls them, ``alerts.attach_to_job`` adds one).
        live_model: The model lifecycle (:class:`~spark_streaming.live_model.LiveModel`): serving model,
            calibration, training store, background retraining (``live_model.process``).
    """

    def __init__(self, settings: SparkJobSettings, listeners: list[ResultListener] | None = None) -> None:
        self.s = settings
        self.listeners = list(listeners or [])
        self.closers: list[Callable[[], None]] = []
        self.decision_listeners: list[DecisionListener] = []
        self.control_listeners: list[Callable[[dict[str, Any]], None]] = []
        self.gamma_target: float = (
            settings.gamma_target if settings.gamma_target is not None else DEFAULT_GAMMA_TARGET
        )
        self.kconf: dict[str, Any] = client_config(
            {"bootstrap.servers": settings.bootstrap_servers, **settings.extra_config}, settings.kafka
        )
        self.metrics = ResultMetrics()
        self.live_model = LiveModel(settings, self.metrics, self.decision_listeners)
        self._kpi: KpiConfig | None = None
        self._batch_kpi: KpiConfig | None = None  # the running micro-batch's (its model)
        self.query: Any = None
        self.spark: Any = None
        self.batches_written = 0
        self.last_batch_ms = 0.0
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._kafka_sink: KafkaResultSink | None = None
        self._parquet = ParquetResultSink(settings.parquet_dir)

    # ---------------------------------------------------------------- per micro-batch (driver)
    def _on_batch(self, df: Any, batch_id: int) -> None:
        t0 = time.monotonic()
        assert self._kpi is not None
        config = self.live_model.begin_batch(batch_id, self._kpi)  # the model is fixed per micro-batch
        self._batch_kpi = config
        # Through Arrow, not collect(): pickled Row objects cost seconds per micro-batch at 3,000 topics
        # (issue 17; tens of thousands of rows of 74 columns); ints stay ints, nulls None, NaN NaN.
        rows = [_clean(r) for r in df.toArrow().to_pylist()]
        if self.s.predict:  # on the driver: one model per process, not one per executor Python worker
            predict_rows(rows, config, list(OUTPUT_COLUMNS))
        # Structure carried as JSON text inside Spark is structure again from here on (sinks, listeners).
        results = [window_result.from_spark(r) for r in rows if r["kind"] == "result"]
        dead = [r for r in rows if r["kind"] == "dead_letter"]
        late = [r for r in rows if r["kind"] == "late"]
        producers = [r for r in rows if r["kind"] == "producer"]
        self.live_model.annotate(results)
        assert self._kafka_sink is not None
        written = self._kafka_sink.write(batch_id, results, dead)
        self._parquet.write(batch_id, results)
        self.live_model.store(batch_id, results, config)
        if written:
            self.metrics.observe(results, dead, late, producers)
            for r in results:
                if r.get("predict_error"):
                    log.warning(
                        "live comparison of %s window %s (%s): %s",
                        r["topic"],
                        r["window_start_ms"],
                        r["tier"],
                        r["predict_error"],
                    )
            for listener in self.listeners:
                listener(batch_id, results)
        self.live_model.end_batch(batch_id)
        self.batches_written += 1
        self.last_batch_ms = (time.monotonic() - t0) * 1000
        self.metrics.batch.observe(time.monotonic() - t0)

    def predict_provisional(self, results: list[dict[str, Any]]) -> int:
        """Fill the live comparison of provisional ``results`` with the running micro-batch's model, in place.

        For the control loop (:mod:`control_loop.provisional`), which passes copies of the settled
        provisional results it has not decided on yet: the rows written stay as they are. Called from a
        listener, inside the micro-batch; outside one (no model chosen yet) nothing is predicted.

        Returns:
            The rows predicted.
        """
        if self._batch_kpi is None:
            return 0
        return predict_rows(results, self._batch_kpi, list(OUTPUT_COLUMNS), (window_result.PROVISIONAL,))

    def _beat(self) -> None:
        producer = Producer({**self.kconf, "linger.ms": 0, "acks": "all"})
        interval = self.s.heartbeat_ms / 1000
        while not self._stop.wait(interval):
            try:
                producer.produce(self.s.audit_topic, b"", HEARTBEAT_KEY, timestamp=now_ms())
                producer.poll(0)
            except (BufferError, KafkaException) as exc:  # broker away: the next beat will do
                log.warning("heartbeat not sent: %s", exc)
        producer.flush(5)
        producer.close()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start the Spark session, the sinks, the heartbeat and the streaming query."""
        from pyspark.sql.streaming.state import GroupStateTimeout

        s = self.s
        ensure_topic(self.kconf, s.audit_topic, 3, topic_config=AUDIT_TOPIC_CONFIG)
        self._kafka_sink = KafkaResultSink(
            self.kconf, s.results_topic, s.dlq_topic, s.commits_topic, s.query_name
        )
        if s.metrics_port:
            self.metrics.serve(s.metrics_port, s.bind_address)
        self._kpi = KpiConfig.from_settings(s, self.gamma_target)
        self.live_model.open()
        self.spark = spark_session(
            s.master, s.shuffle_partitions, driver_host=s.driver_host, bind_address=s.bind_address
        )
        reader = (
            self.spark.readStream.format("kafka")
            .option("subscribe", s.audit_topic)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .option("failOnDataLoss", "false")
        )
        for k, v in spark_kafka_options(self.kconf).items():  # servers, security (Java names), extra_config
            reader = reader.option(k, v)
        decoded = (
            reader.load()
            .select("key", "value", "partition", "offset", "timestamp")
            .mapInPandas(decode_batches, DECODED_SCHEMA)
        )
        results = (
            decoded.withWatermark("event_time", f"{s.watermark_delay_ms} milliseconds")
            .groupBy("g_topic", "g_window")
            .applyInPandasWithState(
                make_reconciler(
                    list(s.clusters),
                    s.grace_ms,
                    finality=s.finality,
                    tier_order=list(s.tier_order),
                    tier_final_wait_ms=s.tier_final_wait_ms,
                ),
                OUTPUT_SCHEMA,
                STATE_SCHEMA,
                "update",
                GroupStateTimeout.EventTimeTimeout,
            )
        )
        self.query = (
            results.writeStream.queryName(s.query_name)
            .foreachBatch(self._on_batch)
            .option("checkpointLocation", str(s.checkpoint_dir))
            .trigger(processingTime=f"{s.trigger_ms} milliseconds")
            .outputMode("update")
            .start()
        )
        if s.heartbeat_ms:
            self._heartbeat = threading.Thread(target=self._beat, name="audit-heartbeat", daemon=True)
            self._heartbeat.start()

    def progress(self) -> dict[str, Any]:
        """Return the watermark, lag and dropped-row count from Spark's last progress (and update metrics).

        Keys: ``batches``, ``batch_ms``, and once Spark reported progress ``dropped_by_watermark``,
        ``state_rows``; ``watermark_ms`` (epoch ms) and ``lag_s`` (wall clock - watermark, s) only once the
        watermark has moved: Spark reports the epoch (``1970-01-01T00:00:00.000Z``) until the first rows
        arrive, which is no watermark, not a lag of 56 years (it showed as ``audit lag 1795792626.1 s`` in
        ``up``'s first progress line, and would have set the lag gauge the audit-lag alert reads).
        """
        p = self.query.lastProgress if self.query is not None else None
        out: dict[str, Any] = {"batches": self.batches_written, "batch_ms": self.last_batch_ms}
        if not p:
            return out
        wm = (p.get("eventTime") or {}).get("watermark")
        if wm:
            from datetime import datetime

            wm_ms = datetime.fromisoformat(wm.replace("Z", "+00:00")).timestamp() * 1000
            if wm_ms > 0:
                out["watermark_ms"] = wm_ms
                out["lag_s"] = max(0.0, (now_ms() - wm_ms) / 1000)
                self.metrics.lag.set(out["lag_s"])
        ops = p.get("stateOperators") or []
        dropped = sum(op.get("numRowsDroppedByWatermark", 0) for op in ops)
        out["dropped_by_watermark"] = dropped
        out["state_rows"] = sum(op.get("numRowsTotal", 0) for op in ops)
        self.metrics.dropped.set(dropped)
        return out

    def stop(self) -> None:
        """Stop the query (finishing the running batch), the heartbeat, the sinks and a retraining."""
        self._stop.set()
        if self.query is not None:
            # Let a running micro-batch finish (bounded): stopping mid-batch interrupts Spark's tasks,
            # which is safe (the batch re-runs from the checkpoint) but logs alarming stack traces.
            deadline = time.monotonic() + 3 * self.s.trigger_ms / 1000 + 10
            while (
                time.monotonic() < deadline
                and self.query.isActive
                and self.query.status.get("isTriggerActive")
            ):
                time.sleep(0.1)
            logging.getLogger("py4j").setLevel(logging.CRITICAL)
            try:
                self.query.stop()
            except Exception:  # a query that already failed raises its error again on stop
                log.warning("query stop raised", exc_info=True)
        if self._heartbeat is not None:
            self._heartbeat.join(10)
        if self._kafka_sink is not None:
            self._kafka_sink.close()
        self.live_model.close()  # a running retraining is stopped (counted as killed)
        for close in reversed(self.closers):
            close()

    def exception(self) -> Any:
        """Return the query's failure, if it failed."""
        return self.query.exception() if self.query is not None else None
