"""The model lifecycle in the real job (broker + Spark local[2]): hot swap, and a killed retraining.

1. Hot swap: while the job runs, a model is promoted in its registry. Final windows judged before the
   promotion carry the old version, those after it the new one (the swap happens at a micro-batch
   boundary, no restart), and every window is final exactly once in the results topic and in Parquet.
2. A retraining process killed (SIGKILL) mid-run is counted, leaves the champion serving and the job
   running: later windows still get predictions from the champion.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import audit_producer.producer as producer_module
from audit_producer import ProducerAuditSettings
from audit_producer.load import run_load
from audit_record import PRODUCER_TIER
from audit_record.reader import read_audit_log
from predictor.model import Predictor
from predictor.registry import ModelRegistry
from spark_streaming.job import ReconciliationJob
from spark_streaming.results import final_results, read_results
from spark_streaming.retraining import RetrainPolicy

from .helpers import CLUSTER, PinnedLoss, consumer_settings, running_consumer, wait_for
from .test_spark_reconciliation import job_settings, producers_final

pytestmark = [pytest.mark.integration, pytest.mark.slow]
WINDOW_MS = 5_000
TIER = f"cluster:{CLUSTER}"


@contextmanager
def steady_load(kconfig, topic: str, audit_topic: str, rate: float = 400.0) -> Iterator[threading.Event]:
    """Audited load (acks=1) in a thread until the yielded event is set (or 150 s)."""
    stop = threading.Event()
    errors: list[BaseException] = []
    audit = ProducerAuditSettings(
        window_ms=WINDOW_MS, grace_ms=1_000, snapshot_interval_ms=1_000, audit_topic=audit_topic
    )

    def produce() -> None:
        try:
            run_load(
                {**kconfig, "client.id": "lifecycle", "acks": "1", "statistics.interval.ms": 500},
                topic,
                "weblog",
                rate=rate,
                duration_s=150,
                audit=audit,
                stop=stop,
            )
        except BaseException as exc:
            errors.append(exc)

    th = threading.Thread(target=produce, daemon=True)
    th.start()
    try:
        yield stop
    finally:
        stop.set()
        th.join(60)
    if errors:
        raise errors[0]


def sent_windows(kconfig, topic: str, audit_topic: str) -> set[int]:
    wait_for(lambda: producers_final(kconfig, topic, audit_topic), 60, "final producer snapshots")
    snaps = read_audit_log(kconfig, audit_topic).tier(PRODUCER_TIER)
    return {r.window_start_ms for r in snaps if r.topic == topic and r.sent > 0}


def parquet_finals(root: Path) -> dict[tuple[str, int, str], list[dict]]:
    rows = [
        r for f in sorted(root.rglob("*.parquet")) for r in pq.read_table(f, partitioning=None).to_pylist()
    ]
    return final_results(rows)


class Finals:
    """A job listener: the final rows of ``topic`` (with the batch id) as the job writes them."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.rows: list[tuple[int, dict]] = []
        self._lock = threading.Lock()

    def __call__(self, batch_id: int, results: list[dict]) -> None:
        with self._lock:
            self.rows += [
                (batch_id, r) for r in results if r["topic"] == self.topic and r["state"] == "final"
            ]

    def predicted(self, version: str | None = None, after_ms: int = 0) -> list[dict]:
        with self._lock:
            return [
                r
                for _, r in self.rows
                if r["p_loss"] is not None
                and (version is None or r["model_version"] == version)
                and r["window_start_ms"] >= after_ms
            ]


def _alive(job: ReconciliationJob) -> None:
    if job.exception() is not None:
        raise AssertionError(f"the Spark query failed: {job.exception()}")


def test_a_promoted_model_is_served_from_the_next_micro_batch_exactly_once(
    tmp_path, kconfig, bootstrap, topic, audit_topics
):
    settings = job_settings(bootstrap, audit_topics, tmp_path, "swap", retrain=False)
    finals = Finals(topic)
    job = ReconciliationJob(settings, listeners=[finals])
    job.start()
    registry = ModelRegistry(settings.model_registry_dir)
    try:
        with running_consumer(consumer_settings(bootstrap, [topic], audit_topics, window_ms=WINDOW_MS)):
            with steady_load(kconfig, topic, audit_topics["audit_topic"]):
                wait_for(
                    lambda: _alive(job) or len(finals.predicted("shipped")) >= 2, 120, "shipped predictions"
                )
                # A new version (the shipped weights under a new card version), promoted while running.
                model = Predictor.load(None)
                registry.save(model, "v0001")
                registry.promote("v0001")
                wait_for(lambda: _alive(job) or len(finals.predicted("v0001")) >= 2, 90, "v0001 predictions")
            windows = sent_windows(kconfig, topic, audit_topics["audit_topic"])

            def all_final() -> bool:
                _alive(job)
                done = final_results(read_results(kconfig, settings.results_topic))
                return windows <= {w for (t, w, _) in done if t == topic}

            wait_for(all_final, 120, "every window final")
        assert (
            job.metrics.registry.get_sample_value(
                "kafka_audit_model_champion_info", {"model_version": "v0001"}
            )
            == 1
        )
    finally:
        job.stop()

    # Exactly once: every window of the load is final once in the results topic and once in Parquet.
    in_topic = final_results(read_results(kconfig, settings.results_topic))
    in_parquet = parquet_finals(settings.parquet_dir)
    for w in windows:
        assert len(in_topic[(topic, w, TIER)]) == 1, f"window {w}: final {len(in_topic[(topic, w, TIER)])}x"
        assert len(in_parquet[(topic, w, TIER)]) == 1, f"window {w} in Parquet"
        assert (
            in_parquet[(topic, w, TIER)][0]["model_version"] == in_topic[(topic, w, TIER)][0]["model_version"]
        )
    # Before the swap version N, after it N+1: by window order and by micro-batch, never mixed.
    rows = sorted((in_topic[(topic, w, TIER)][0] for w in windows), key=lambda r: r["window_start_ms"])
    versions = [r["model_version"] for r in rows if r["p_loss"] is not None]
    assert set(versions) == {"shipped", "v0001"}, versions
    first_new = versions.index("v0001")
    assert versions == ["shipped"] * first_new + ["v0001"] * (len(versions) - first_new), versions
    by_batch: dict[int, set[str]] = {}
    for batch_id, r in finals.rows:
        if r["model_version"] is not None:
            by_batch.setdefault(batch_id, set()).add(r["model_version"])
    assert all(len(v) == 1 for v in by_batch.values()), by_batch
    assert all(isinstance(r["model_calibrated"], bool) for r in rows if r["p_loss"] is not None)


def test_killing_the_retraining_leaves_the_champion_serving_and_the_job_running(
    tmp_path, kconfig, bootstrap, topic, audit_topics, monkeypatch
):
    monkeypatch.setattr(producer_module, "TcpRetransmitMeter", PinnedLoss)  # L known: windows are eligible
    settings = job_settings(
        bootstrap,
        audit_topics,
        tmp_path,
        "retrain",
        retrain=True,
        retrain_every_windows=1,
        retrain_min_windows=3,
        training_min_messages=50,
    )
    finals = Finals(topic)
    job = ReconciliationJob(settings, listeners=[finals])
    job.start()
    live = job.live_model
    registry = ModelRegistry(settings.model_registry_dir)
    try:
        with (
            running_consumer(consumer_settings(bootstrap, [topic], audit_topics, window_ms=WINDOW_MS)),
            steady_load(kconfig, topic, audit_topics["audit_topic"]),
        ):
            pid = wait_for(lambda: _alive(job) or live.process.pid, 120, "a retraining process")
            # No second run after this one: the champion must stay the one serving before the kill.
            live.policy = RetrainPolicy(every_windows=10**9, every_minutes=10**6, min_windows=10**9)
            os.kill(pid, signal.SIGKILL)
            killed_ms = time.time_ns() // 1_000_000
            wait_for(
                lambda: (
                    _alive(job)
                    or job.metrics.registry.get_sample_value(
                        "kafka_audit_retrain_runs_total", {"result": "killed"}
                    )
                ),
                30,
                "the killed run counted",
            )
            assert not live.process.running
            assert registry.champion_version() == "shipped" and registry.champion_dir() is None
            assert registry.versions() == []  # nothing half-written became a version
            # The job goes on: windows that start after the kill are judged, with the champion.
            wait_for(
                lambda: _alive(job) or len(finals.predicted(after_ms=killed_ms)) >= 2, 90, "later windows"
            )
            later = finals.predicted(after_ms=killed_ms)
        assert all(r["model_version"] == "shipped" for r in later)
        assert job.exception() is None and job.query.isActive
        assert job.metrics.registry.get_sample_value(
            "kafka_audit_training_windows_total", {"outcome": "stored"}
        )
    finally:
        job.stop()
    assert not live.process.running
