"""``kafka-audit soak``: start everything, apply the chaos schedule, record, verify, judge, report.

Order of start (stop is the reverse, every process by PID, in ``finally``): 3 KRaft brokers
(:class:`kafka_plumbing.local_cluster.KafkaCluster`), the topics, Alertmanager, the Spark standalone
cluster (:mod:`soak.spark_cluster`), the Spark driver (:mod:`soak.driver`, the reconciliation job with
its alert pipeline posting to Alertmanager), Prometheus (scraping the brokers and the job, the shipped
rules, alerting to Alertmanager), 2 audit consumers in one group (``kafka-audit audit-consumer``), the
load (:mod:`soak.load`). Then the chaos thread (:mod:`soak.chaos`) and the recorder
(:mod:`soak.recorder`) run until the load ends; the soak waits until every window of the load is final,
reads every topic with the verifier (:func:`audit_consumer.ground_truth.verify_topic`), judges
(:mod:`soak.verdict`) and writes ``records/summary.json`` and the report (:mod:`soak.report`).

Child processes get a clean environment: every ``KAFKA_AUDIT_*`` variable of the caller is dropped
and the soak's own are set, so a soak is reproducible from its settings alone.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from alerts.codec import decode_alert
from alerts.settings import DEFAULT_ALERTS_TOPIC
from audit_record import DEFAULT_AUDIT_TOPIC, now_ms
from kafka_plumbing.cluster_ports import HOST, free_port
from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.topics import AUDIT_TOPIC_CONFIG, ensure_topic, read_to_end
from soak import network
from soak.chaos import Chaos
from soak.load import LoadSpec
from soak.monitoring import Alertmanager, Prometheus, audit_lag_slack_s
from soak.processes import Component, ManagedProcess, children, cmdline
from soak.recorder import Recorder, read_jsonl
from soak.schedule import Schedule, load_schedule
from soak.settings import SoakSettings
from soak.spark_cluster import SparkStandalone
from soak.verdict import (
    ChaosSpan,
    Verdict,
    batch_stats,
    classify_alerts,
    compare_windows,
    judge,
    rss_growth,
)

log = logging.getLogger(__name__)
CLUSTER = "soak"
TIER = f"cluster:{CLUSTER}"
CONSUMERS = 2
PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The checkout: on ``PYTHONPATH`` of every child (drivers, executors' Python workers, consumers)."""


class SoakError(KafkaAuditError):
    """A component failed so that the soak cannot go on (the message says which, with its log tail)."""


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """Return the caller's environment without ``KAFKA_AUDIT_*``, plus ``extra`` and loopback Spark."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_AUDIT_")}
    path = [str(PROJECT_ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    env.update(SPARK_LOCAL_IP=HOST, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(path), **extra)
    return env


class Soak:
    """One soak run: its settings, schedule, processes and records.

    Attributes:
        dir: The data directory; ``records/`` holds what the report is made from.
        load_started_ms, load_ended_ms: When the load ran (minute 0 of the records), ms.
        components: What the recorder samples, by name.
    """

    def __init__(self, settings: SoakSettings, schedule: Schedule | None = None) -> None:
        self.s = settings
        self.schedule = schedule or load_schedule(settings.schedule)
        self.schedule.check_fits(settings.duration_s)
        self.dir = Path(settings.data_dir).resolve()
        self.records = self.dir / "records"
        self.stop_event = threading.Event()
        self.cluster: KafkaCluster | None = None
        self.spark: SparkStandalone | None = None
        self.alertmanager: Alertmanager | None = None
        self.prometheus: Prometheus | None = None
        self.driver: ManagedProcess | None = None
        self.consumers: list[ManagedProcess] = []
        self.load: ManagedProcess | None = None
        self.components: dict[str, Component] = {}
        self.load_started_ms = 0
        self.load_ended_ms = 0
        self.final_wait: dict[str, Any] = {}
        self.metrics_port = free_port()
        self.chaos: Chaos | None = None
        self.recorder: Recorder | None = None

    # ------------------------------------------------------------------------------------------ start
    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` of the soak's cluster."""
        assert self.cluster is not None
        return self.cluster.bootstrap_servers

    def _driver_env(self) -> dict[str, str]:
        s = self.s
        assert self.alertmanager is not None and self.spark is not None
        spark_dir = self.dir / "spark"
        return child_env(
            {
                "KAFKA_AUDIT_SPARK_BOOTSTRAP_SERVERS": self.bootstrap,
                "KAFKA_AUDIT_SPARK_MASTER": self.spark.master_url,
                "KAFKA_AUDIT_SPARK_CLUSTERS": json.dumps([CLUSTER]),
                "KAFKA_AUDIT_SPARK_TRIGGER_MS": str(s.trigger_ms),
                "KAFKA_AUDIT_SPARK_GRACE_MS": str(s.spark_grace_ms),
                "KAFKA_AUDIT_SPARK_FINAL_SETTLE_MS": str(max(0, s.spark_grace_ms - s.consumer_grace_ms)),
                "KAFKA_AUDIT_SPARK_MAX_FINAL_WAIT_MS": "310000",
                "KAFKA_AUDIT_SPARK_WATERMARK_DELAY_MS": str(s.watermark_delay_ms),
                "KAFKA_AUDIT_SPARK_CHECKPOINT_DIR": str(spark_dir / "checkpoint"),
                "KAFKA_AUDIT_SPARK_PARQUET_DIR": str(spark_dir / "results"),
                "KAFKA_AUDIT_SPARK_METRICS_PORT": str(self.metrics_port),
                "KAFKA_AUDIT_SPARK_SHUFFLE_PARTITIONS": "2",
                "KAFKA_AUDIT_SPARK_RETRAIN": "true" if s.retrain else "false",
                "KAFKA_AUDIT_ALERTS_ALERTMANAGER_URL": self.alertmanager.url,
                "PYSPARK_SUBMIT_ARGS": (
                    f"--driver-memory {s.driver_memory_mb}m --executor-memory {s.executor_memory_mb}m "
                    "--conf spark.cores.max=2 --conf spark.executor.cores=1 "
                    "--conf 'spark.driver.extraJavaOptions=-Xss16m "
                    f"-Xms{s.driver_memory_mb}m -XX:+AlwaysPreTouch' "
                    # Spark sets the executors' -Xmx from spark.executor.memory and refuses -Xmx here;
                    # -Xms of the same size, touched at start, keeps G1 from growing the heap for an hour.
                    "--conf 'spark.executor.extraJavaOptions="
                    f"-Xms{s.executor_memory_mb}m -XX:+AlwaysPreTouch' "
                    f"--conf spark.executorEnv.PYTHONPATH={PROJECT_ROOT} pyspark-shell"
                ),
            }
        )

    def _consumer(self, number: int) -> ManagedProcess:
        s = self.s
        argv = [sys.executable, "-m", "kafka_audit", "audit-consumer"]
        for t in s.topic_names:
            argv += ["-t", t]
        argv += [
            "--cluster",
            CLUSTER,
            "--instance-id",
            f"soak-ac-{number}",
            "--window-ms",
            str(s.window_ms),
            "--grace-ms",
            str(s.consumer_grace_ms),
            "--max-final-wait-ms",
            "310000",
            "-b",
            self.bootstrap,
        ]
        env = child_env({"KAFKA_AUDIT_CONSUMER_GROUP_ID": "kafka-audit.soak"})
        return ManagedProcess(argv, self.dir / "logs" / f"audit-consumer-{number}.log", env)

    def _load_process(self) -> ManagedProcess:
        s = self.s
        spec = LoadSpec(
            bootstrap_servers=self.bootstrap,
            topics=s.topic_names,
            producers=s.producers,
            rate=s.rate,
            message_bytes=s.message_bytes,
            duration_s=s.duration_s,
            window_ms=s.window_ms,
            config={
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": s.message_timeout_ms,
                "linger.ms": 20,
            },
        )
        argv = [sys.executable, "-m", "soak.load", spec.model_dump_json()]
        return ManagedProcess(argv, self.dir / "logs" / "producers.log", child_env({}))

    def _register_components(self) -> None:
        assert self.cluster is not None and self.spark is not None
        assert self.alertmanager is not None and self.prometheus is not None and self.driver is not None
        comps = self.components
        for node in self.cluster.nodes:
            comps[f"broker-{node.node_id}"] = Component(
                f"broker-{node.node_id}", "broker", lambda n=node: n.pid
            )
        spark = self.spark
        comps["spark-master"] = Component("spark-master", "spark-master", lambda: spark.master.pid)
        for w in spark.workers:
            comps[f"spark-worker-{w.number}"] = Component(
                f"spark-worker-{w.number}", "spark-worker", lambda w=w: w.process.pid, exclude=w.executor_pids
            )
            comps[f"spark-executor-{w.number}"] = Component(
                f"spark-executor-{w.number}",
                "spark-executor",
                lambda w=w: next(iter(w.executor_pids()), None),
            )
        driver = self.driver
        comps["spark-driver"] = Component(
            "spark-driver", "spark-driver", lambda: driver.pid, exclude=lambda: retraining_pids(driver.pid)
        )
        for i, c in enumerate(self.consumers, start=1):
            comps[f"audit-consumer-{i}"] = Component(
                f"audit-consumer-{i}", "audit-consumer", lambda c=c: c.pid
            )
        load = self.load
        comps["producers"] = Component("producers", "producers", lambda: load.pid if load else None)
        am, prom = self.alertmanager, self.prometheus
        comps["alertmanager"] = Component("alertmanager", "alertmanager", lambda: am.process.pid)
        comps["prometheus"] = Component("prometheus", "prometheus", lambda: prom.process.pid)

    def start(self) -> None:
        """Start every component (see the module docstring); return when the load runs."""
        s = self.s
        network.clean_up_leftovers()
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.records.mkdir(parents=True)
        (self.dir / "logs").mkdir()
        self._phase("kafka")
        self.cluster = KafkaCluster.create(
            self.dir / "kafka", brokers=3, heap_mb=s.broker_heap_mb, heap_fixed=True
        )
        self.cluster.start()
        conf = {"bootstrap.servers": self.bootstrap}
        for t in s.topic_names:
            ensure_topic(conf, t, partitions=3)
        ensure_topic(conf, DEFAULT_AUDIT_TOPIC, 3, topic_config=AUDIT_TOPIC_CONFIG)
        self._phase("alertmanager")
        self.alertmanager = Alertmanager(self.dir / "alertmanager")
        self.alertmanager.start()
        self._phase("spark cluster")
        self.spark = SparkStandalone(
            self.dir / "spark-cluster", workers=2, worker_memory_mb=s.executor_memory_mb
        )
        self.spark.start()
        self._phase("spark driver")
        self.driver = ManagedProcess(
            [sys.executable, "-m", "soak.driver", str(self.records)],
            self.dir / "logs" / "spark-driver.log",
            self._driver_env(),
        )
        self.driver.start()  # it catches up from the audit topic: the load need not wait for it
        self._phase("prometheus")
        self.prometheus = Prometheus(
            self.dir / "prometheus",
            self.cluster,
            f"{HOST}:{self.metrics_port}",
            self.alertmanager,
            audit_lag_slack_s(s.window_ms, s.watermark_delay_ms, s.trigger_ms),
        )
        self.prometheus.start()
        self._phase("audit consumers")
        self.consumers = [self._consumer(i) for i in range(1, CONSUMERS + 1)]
        for c in self.consumers:
            c.start()
        self._phase("load")
        self.load = self._load_process()
        self._register_components()
        self.load_started_ms = now_ms()
        self.load.start()

    def _phase(self, what: str) -> None:
        log.info("soak: starting %s", what)
        with open(self.records / "phases.jsonl", "a") as f:
            f.write(json.dumps({"at_ms": now_ms(), "phase": what}) + "\n")

    def driver_batches(self, pid: int) -> int:
        """Micro-batches the driver process ``pid`` has recorded so far."""
        return sum(1 for r in read_jsonl(self.records / "progress.jsonl") if r.get("pid") == pid)

    def start_driver(self, timeout_s: float = 300.0) -> None:
        """Start the driver; return once its first micro-batch is recorded.

        Raises:
            SoakError: it exited or recorded no micro-batch in time (log tail in the message).
        """
        assert self.driver is not None
        self.wait_driver_ready(self.driver.start(), timeout_s)

    def wait_driver_ready(self, pid: int, timeout_s: float = 300.0) -> None:
        """Return once the driver process ``pid`` has recorded a micro-batch.

        Raises:
            SoakError: it exited or recorded none in time (log tail in the message).
        """
        assert self.driver is not None
        deadline = time.monotonic() + timeout_s
        while self.driver_batches(pid) == 0:
            if self.driver.exited() is not None or time.monotonic() > deadline:
                tail = self.driver.log_path.read_text(errors="replace")[-3000:]
                raise SoakError(
                    f"Spark driver {pid} recorded no micro-batch (exit {self.driver.exited()}):\n{tail}"
                )
            time.sleep(1.0)

    # ------------------------------------------------------------------------------------------ run
    def run(self) -> Verdict:
        """Run the soak to its end (start, chaos, records, final windows, verification, report)."""
        try:
            self.start()
            self.recorder = Recorder(self)
            self.chaos = Chaos(self)
            self.recorder.start()
            self.chaos.start()
            self._wait_for_load()
            self.chaos.join()
            self._wait_for_final_windows()
            self.recorder.stop()
            return self.finish()
        finally:
            self.stop()

    def _check_alive(self) -> None:
        """Raise SoakError if a component that must run exited on its own (not killed by the chaos)."""
        assert self.chaos is not None
        busy = self.chaos.busy
        for name, p in (
            ("spark-driver", self.driver),
            *((f"audit-consumer-{i + 1}", c) for i, c in enumerate(self.consumers)),
        ):
            if p is not None and p.exited() is not None and name not in busy:
                tail = p.log_path.read_text(errors="replace")[-3000:]
                raise SoakError(f"{name} exited with {p.exited()}:\n{tail}")

    def _wait_for_load(self) -> None:
        assert self.load is not None and self.load.proc is not None
        deadline = time.monotonic() + self.s.duration_s + 300
        while self.load.exited() is None:
            self._check_alive()
            if time.monotonic() > deadline:
                raise SoakError("the load did not end in time")
            time.sleep(1.0)
        self.load_ended_ms = now_ms()
        results = self.producer_results()
        errors = [r for r in results if "error" in r]
        if errors or len(results) != self.s.producers:
            raise SoakError(f"producers failed: {errors or results}")

    def producer_results(self) -> list[dict[str, Any]]:
        """Return what each producer did (the load's JSON lines)."""
        assert self.load is not None
        out = []
        for line in self.load.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if "producer" in row:
                    out.append(row)
        return out

    def expected_windows(self) -> set[tuple[str, int]]:
        """Return (topic, window start) of every window that must become final.

        Every window the job has a result of (provisional or final) for the cluster tier, and every
        window that lies wholly inside the load (the producers sent in it whatever the start-up took).
        """
        w = self.s.window_ms
        inner_from = self.load_started_ms + w - self.load_started_ms % w
        inner_to = self.load_ended_ms - self.load_ended_ms % w - w
        expected = {(t, start) for t in self.s.topic_names for start in range(inner_from, inner_to + 1, w)}
        for r in read_jsonl(self.records / "results.jsonl"):
            if r["tier"] == TIER:
                expected.add((r["topic"], int(r["window_start_ms"])))
        return expected

    def final_results(self) -> dict[tuple[str, int, str], dict[str, Any]]:
        """Return the newest final result per (topic, window, tier) the driver recorded."""
        out: dict[tuple[str, int, str], dict[str, Any]] = {}
        for r in read_jsonl(self.records / "results.jsonl"):
            if r.get("state") == "final":
                out[(r["topic"], int(r["window_start_ms"]), r["tier"])] = r
        return out

    def _wait_for_final_windows(self) -> None:
        """Wait up to ``final_timeout_s`` for every expected window; note the wait in ``final_wait``."""
        t0 = time.monotonic()
        deadline = t0 + self.s.final_timeout_s
        while True:
            self._check_alive()
            final = {(t, w) for (t, w, tier) in self.final_results() if tier == TIER}
            missing = sorted(self.expected_windows() - final)
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(2.0)
        self.final_wait = {"waited_s": round(time.monotonic() - t0, 1), "missing": missing}
        if missing:
            log.warning("soak: %d window(s) not final in time: %s", len(missing), missing[:5])

    # ------------------------------------------------------------------------------------------ end
    def read_alerts(self) -> list[dict[str, Any]]:
        """Every event of the alerts topic (``source`` = ``job``), plus Prometheus' firing alerts."""
        out: list[dict[str, Any]] = []
        conf = {"bootstrap.servers": self.bootstrap}
        for m in read_to_end(conf, DEFAULT_ALERTS_TOPIC, group_id="kafka-audit.soak", missing_ok=True):
            try:
                e = decode_alert(m.value())
            except Exception as exc:  # an undecodable event is dead-lettered by its writer; skip it
                log.warning("soak: undecodable alert event at offset %s: %s", m.offset(), exc)
                continue
            out.append({**asdict(e), "source": "job"})
        assert self.recorder is not None
        out.extend(self.recorder.prometheus_alerts())
        return out

    def verify(self) -> dict[str, dict[int, dict[str, int]]]:
        """Return the verifier's totals per topic and window."""
        from audit_consumer.ground_truth import totals_by_window, verify_topic

        conf = {"bootstrap.servers": self.bootstrap}
        return {
            t: totals_by_window(verify_topic(conf, t, self.s.window_ms, timeout_s=600))
            for t in self.s.topic_names
        }

    def finish(self) -> Verdict:
        """Verify, judge and write ``records/summary.json`` and the report; return the verdict."""
        from soak.report import write_reports

        assert self.chaos is not None and self.recorder is not None
        truth = self.verify()
        results = list(self.final_results().values())
        checks = compare_windows(results, truth, [TIER])
        spans = [
            ChaosSpan(e["label"], e["started_ms"], e["ended_ms"])
            for e in self.chaos.done
            if e.get("ended_ms")
        ]
        alerts = self.read_alerts()
        with open(self.records / "alerts.jsonl", "w") as f:
            for a in alerts:
                if a["source"] == "job":
                    f.write(json.dumps(a, default=str) + "\n")
        verdicts = classify_alerts(alerts, spans, self.s.settle_ms, self.s.window_ms + self.s.final_wait_ms)
        samples = read_jsonl(self.records / "samples.jsonl")
        growth = rss_growth(samples, self.load_started_ms, end_minute=self.s.duration_s / 60)
        progress = [
            r for r in read_jsonl(self.records / "progress.jsonl") if r["at_ms"] >= self.load_started_ms
        ]
        stats = batch_stats(progress, spans, self.s.settle_ms)
        verdict = judge(
            checks, verdicts, growth, stats, self.s.trigger_ms, judge_rss=self.s.duration_s >= 30 * 60
        )
        summary = {
            "settings": json.loads(self.s.model_dump_json()),
            "schedule": [e.model_dump() for e in self.schedule.events],
            "load_started_ms": self.load_started_ms,
            "load_ended_ms": self.load_ended_ms,
            "producers": self.producer_results(),
            "chaos": self.chaos.done,
            "final_wait": self.final_wait,
            "windows": [asdict(c) for c in checks],
            "alerts": [asdict(a) | {"false_alert": a.false_alert} for a in verdicts],
            "growth": [asdict(g) for g in growth],
            "batches": asdict(stats),
            "verdict": asdict(verdict) | {"passed": verdict.passed},
            "incarnations": {n: [asdict(i) for i in c.incarnations] for n, c in self.components.items()},
        }
        (self.records / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        write_reports(self.dir, self.dir / "report")
        return verdict

    def stop(self) -> None:
        """Stop everything, clients first, by PID; undo a network cut. Never raises."""
        self.stop_event.set()
        steps: list[tuple[str, Any]] = [
            ("chaos", lambda: self.chaos and self.chaos.abort()),
            ("recorder", lambda: self.recorder and self.recorder.stop()),
            ("network", network.clean_up_leftovers),
            ("load", lambda: self.load and self.load.stop(30)),
            *((f"consumer-{i}", lambda c=c: c.stop(30)) for i, c in enumerate(self.consumers)),
            ("driver", lambda: self.driver and self.driver.stop(60)),
            ("prometheus", lambda: self.prometheus and self.prometheus.stop()),
            ("spark", lambda: self.spark and self.spark.stop()),
            ("alertmanager", lambda: self.alertmanager and self.alertmanager.stop()),
            ("kafka", lambda: self.cluster and self.cluster.stop()),
        ]
        for name, step in steps:
            try:
                step()
            except Exception:
                log.warning("soak: stopping %s failed", name, exc_info=True)


def retraining_pids(driver_pid: int | None) -> list[int]:
    """Return the driver's background retraining child, if one runs (``kafka_audit predictor retrain``).

    Not part of the driver's RSS: it is a short-lived process of its own (``docs/DESIGN.md``, "Model
    lifecycle"), sampled by no component.
    """
    if driver_pid is None:
        return []
    return [c for c in children(driver_pid) if "retrain" in cmdline(c) and "predictor" in cmdline(c)]


def under_replicated(bootstrap: str) -> int:
    """Partitions of the cluster whose in-sync replicas are fewer than their replicas (-1: no answer)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        md = admin.list_topics(timeout=5)
    except Exception:
        return -1
    return sum(
        1
        for t in md.topics.values()
        for p in t.partitions.values()
        if len(p.isrs) < len(p.replicas) or p.leader < 0
    )
