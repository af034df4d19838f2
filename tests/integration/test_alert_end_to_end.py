"""Issue 5 end to end: impaired network -> audit -> Spark + predictor -> gamma alert in Alertmanager ->
the suggestion applied -> completeness up -> the alert resolves (real broker, Spark, Alertmanager; root).

A testbed stage with L = 15% packet loss and a default producer configuration (acks=1,
batch.num.messages=1, 4,000 messages/s) runs until Alertmanager shows KafkaAuditGammaBelowTarget with a
suggestion. The test then restarts the load with the suggestion applied (librdkafka properties and the
number of producers it names, same network) and waits for the alert to resolve.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime
from typing import Any

import pytest
from testbed.impairment import BernoulliLoss, Delay, Impairment
from testbed.lab import Lab, stop_quietly
from testbed.producer_process import ProducerRun

from alerts import AlertSettings, attach_to_job
from audit_consumer.consumer import AuditConsumer
from audit_consumer.settings import AuditConsumerSettings
from audit_record.window_result import suggested_changes
from spark_streaming.job import ReconciliationJob
from spark_streaming.settings import SparkJobSettings

from .alertmanager import running_alertmanager
from .helpers import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the testbed creates network namespaces: needs root"),
]
WINDOW_MS = 5_000
CLUSTER = "e2e"
ALERT = "KafkaAuditGammaBelowTarget"
TARGET = 0.9
DEFAULT_CONFIG = {"acks": "1", "batch.num.messages": 1, "message.timeout.ms": 2000, "linger.ms": 0}
POLL_INTERVAL_MS = 0.25  # 4,000 messages/s
# This test is about the alert pipeline (fire -> suggestion -> apply -> resolve); it was calibrated with
# BBR in the producer's namespace. Under the testbed's default CUBIC, L = 15% costs more than the
# predictor (trained on the paper's data) expects after its suggestion, and the alert stays firing.
CONGESTION_CONTROL = "bbr"


def _producers(lab: Lab, topic: str, config: dict[str, Any], n: int, tag: str) -> list:
    return [
        lab.start_producer(
            ProducerRun(
                bootstrap_servers=lab.bootstrap_servers,
                topic=topic,
                config=config,
                profile="weblog",
                poll_interval_ms=POLL_INTERVAL_MS * n,  # the same stream, shared by n producers
                duration_s=90,
                window_ms=WINDOW_MS,
                client_id=f"e2e-{tag}-{i}",
                seed=i,
            )
        )
        for i in range(n)
    ]


def test_gamma_alert_fires_with_a_suggestion_and_resolves_once_it_is_applied(tmp_path):
    finals: dict[int, dict[str, Any]] = {}

    def on_results(_batch: int, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            if r["state"] == "final" and r["topic"] == topic and r["sent"] > 0:
                finals[r["window_start_ms"]] = r

    with (
        running_alertmanager(tmp_path / "am") as am,
        Lab(tmp_path / "lab", brokers=1, congestion_control=CONGESTION_CONTROL) as lab,
    ):
        topic = lab.topic(f"pytest.e2e.{os.urandom(3).hex()}")
        stop = threading.Event()
        consumer = AuditConsumer(
            AuditConsumerSettings(
                cluster=CLUSTER,
                topics=[topic],
                bootstrap_servers=lab.bootstrap_servers,
                window_ms=WINDOW_MS,
                grace_ms=2_000,
                commit_interval_ms=500,
                instance_id="e2e",
            )
        )
        consumer_thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
        consumer_thread.start()
        job = ReconciliationJob(
            SparkJobSettings(
                bootstrap_servers=lab.bootstrap_servers,
                clusters=[CLUSTER],
                trigger_ms=1_000,
                watermark_delay_ms=2_000,
                grace_ms=4_000,
                heartbeat_ms=500,
                checkpoint_dir=tmp_path / "spark" / "checkpoint",
                parquet_dir=tmp_path / "spark" / "results",
                topic_kpi={topic: {"stream_type": "weblog", "gamma_target": TARGET}},
            ),
            listeners=[on_results],
        )
        attach_to_job(
            job, AlertSettings(alertmanager_url=am.url, gamma_target=TARGET, alertmanager_resend_ms=1_000)
        )
        job.start()
        procs: list = []
        try:
            lab.apply(Impairment(delay=Delay(delay_ms=30), loss=BernoulliLoss(percent=15)))
            stage1_ms = time.time_ns() // 1_000_000
            procs = _producers(lab, topic, DEFAULT_CONFIG, 1, "default")

            def firing() -> list[dict[str, Any]]:
                if job.exception() is not None:
                    raise AssertionError(f"the Spark job failed: {job.exception()}")
                return [a for a in am.alerts() if a["labels"]["alertname"] == ALERT]

            [alert] = wait_for(firing, 150, "a gamma alert in Alertmanager")
            # Within 2 windows: the window that fired it (gamma_for_windows = 2 bad windows in a row) is at
            # the latest the 2nd full window of the lossy stage (index 2 counting the partial first one).
            first = stage1_ms - stage1_ms % WINDOW_MS
            fired_on = datetime.fromisoformat(alert["annotations"]["window_start"]).timestamp() * 1000
            seen = [(w, r["sent"], r["gamma_actual"]) for w, r in sorted(finals.items())]
            assert first <= fired_on <= first + 2 * WINDOW_MS, (first, fired_on, seen)
            # The alert's window result carries the suggestion as structure; the annotation says it in words.
            window = finals[int(fired_on)]
            suggestion = alert["annotations"]["suggestion"]
            assert suggestion == window["suggestion"]
            changes = suggested_changes(window)
            assert changes, window
            assert alert["labels"]["topic"] == topic

            # Apply the suggestion: restart the load with its configuration and producer count.
            for p in procs:
                stop_quietly(p)
            n = int(changes.pop("producers", 1))
            config = {
                **DEFAULT_CONFIG,
                **{k: v if k == "acks" else int(v) for k, v in changes.items()},
            }
            stage2_ms = time.time_ns() // 1_000_000
            procs = _producers(lab, topic, config, n, "tuned")
            try:
                wait_for(lambda: not firing(), 150, "the gamma alert to resolve")
            except AssertionError as exc:
                since = [
                    (w, r["sent"], r["completeness"], r["gamma_actual"])
                    for w, r in sorted(finals.items())
                    if w >= stage2_ms - WINDOW_MS
                ]
                raise AssertionError(
                    f"{exc}; {suggestion!r} applied as {n} producer(s) with {config}; windows since: {since}"
                ) from None
        finally:
            for p in procs:
                stop_quietly(p)
            stop.set()
            job.stop()
            if job.spark is not None:
                job.spark.stop()
            consumer_thread.join(60)

    def mean_completeness(rows: list[dict[str, Any]]) -> float:
        return sum(r["completeness"] for r in rows) / len(rows)

    before = [r for w, r in finals.items() if stage1_ms <= w and w + WINDOW_MS <= stage2_ms]
    after = [r for w, r in finals.items() if w >= stage2_ms]
    assert before and after, (sorted(finals), stage1_ms, stage2_ms)
    columns = ("window_start_ms", "completeness", "packet_loss_pct_est", "gamma_actual", "suggestion")
    summary = [tuple(r[k] for k in columns) for r in finals.values()]
    print("windows (start, completeness, L est. %, gamma_actual, suggestion):", *sorted(summary), sep="\n")
    assert mean_completeness(after) > mean_completeness(before), summary
    assert all(r["gamma_actual"] < TARGET for r in before if r["sent"] > 1000), summary
