"""Issue 16 item 2 acceptance: loss attributed to the partitions and the leader broker that lost it.

A 3-broker local cluster; an audited producer (``attribution_producer.py``, its own process with its own
group id) sends with ``acks=1`` and ``message.timeout.ms`` = 3 s to 6 partitions (replication factor 3),
message ``seq`` to partition ``seq % 6``. After a few seconds an iptables rule in a chain of this test's
own cuts that process, and only it (``-m owner --gid-owner``), off from the broker that leads some of the
partitions (its client port; TCP reset, so nothing sent during the cut reaches the broker later), for
20 s; the brokers still reach each other, so the leaders stay. The audit topic has one partition, led
by another broker, so the producer's snapshots are not cut off with its data. Then, per final window of
the topic:

* the Spark job's window result puts the loss in those partitions, with that broker as their leader;
* each partition's ``lost`` equals the verifier's missing sequence numbers of that partition (the topic
  read in full, ``testbed.verify``) and the failed delivery reports the producer's own callback
  recorded;
* the completeness alert (``KafkaAuditCompletenessBelowTarget``, in the alerts topic) names the
  partitions and the broker;
* the "Kafka brokers" dashboard's loss-per-leader query returns that broker from real Prometheus
  scraping the job's exporter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from alerts import AlertSettings, attach_to_job
from alerts.codec import decode_alert
from alerts.event import COMPLETENESS_BELOW_TARGET
from audit_record import cluster_tier, window_result
from dashboards.brokers import LOSS_BY_LEADER_EXPR
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.topics import ensure_topic, read_to_end
from spark_streaming.job import ReconciliationJob
from spark_streaming.settings import SparkJobSettings
from testbed.verify import verify_topic
from tests.conftest import unique_name

from .helpers import CLUSTER, consumer_settings, running_consumer, wait_for
from .test_dashboards_live import PROMETHEUS, _free_port, _query, _ready, _stop

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="iptables rules: needs root"),
]
REPO = Path(__file__).resolve().parents[2]
WINDOW_MS = 5_000
PARTITIONS = 6
MESSAGE_TIMEOUT_MS = 3_000
RATE = 300  # messages/s
WARM_S, CUT_S, AFTER_S = 6, 20, 6
PRODUCER_GID = 40_016  # the producer process's group: what the iptables rule matches


class BrokerCut:
    """An iptables chain of its own that resets TCP from processes of ``gid`` to one local port.

    Jumped to from OUTPUT (loopback traffic passes it); removed in :meth:`remove` (rule, jump, chain),
    never flushing a global chain, as other tests on the host may use iptables at the same time.
    """

    def __init__(self, port: int, gid: int) -> None:
        self.chain = f"KA16-{os.getpid()}-{port}"
        self.port, self.gid = port, gid
        self.active = False

    @staticmethod
    def _ipt(*args: str, check: bool = True) -> None:
        subprocess.run(["iptables", "-w", *args], check=check, capture_output=True)

    def apply(self) -> None:
        self._ipt("-N", self.chain)
        self.active = True
        self._ipt(
            "-A", self.chain, "-p", "tcp", "-d", "127.0.0.1", "--dport", str(self.port),
            "-m", "owner", "--gid-owner", str(self.gid), "-j", "REJECT", "--reject-with", "tcp-reset",
        )  # fmt: skip
        self._ipt("-I", "OUTPUT", "-j", self.chain)

    def remove(self) -> None:
        if not self.active:
            return
        self._ipt("-D", "OUTPUT", "-j", self.chain, check=False)
        self._ipt("-F", self.chain, check=False)
        self._ipt("-X", self.chain, check=False)
        self.active = False


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader broker (node id) of ``topic``, from the cluster's metadata."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def test_loss_is_attributed_to_the_partitions_and_broker_cut_off_from_the_producer(
    request, audit_topics, tmp_path
):
    t0 = time.monotonic()
    topic = unique_name(request)
    alerts_topic = unique_name(request, ".alerts")
    finals: dict[int, dict[str, Any]] = {}
    tier = cluster_tier(CLUSTER)

    def on_results(_batch: int, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            if r["state"] == window_result.FINAL and r["topic"] == topic and r["tier"] == tier:
                finals[r["window_start_ms"]] = r

    cluster = KafkaCluster.create(tmp_path / "kafka", brokers=3, heap_mb=384)
    prom_log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - closed in the finally below
    prom: subprocess.Popen | None = None
    producer: subprocess.Popen | None = None
    job: ReconciliationJob | None = None
    cut: BrokerCut | None = None
    started: list[BaseException | None] = []
    try:
        cluster.start()
        t_cluster = time.monotonic()
        bootstrap = cluster.bootstrap_servers
        kconfig = {"bootstrap.servers": bootstrap}
        ensure_topic(kconfig, topic, partitions=PARTITIONS)  # replication factor 3
        # The producer's snapshots must not need the broker it is cut off from (they would reach the job
        # only after the cut, after their windows were final): one audit partition, led by another broker.
        ensure_topic(kconfig, audit_topics["audit_topic"], partitions=1)
        [audit_leader] = _leaders(bootstrap, audit_topics["audit_topic"]).values()
        leaders = _leaders(bootstrap, topic)
        by_broker = Counter(b for b in leaders.values() if b != audit_leader)
        victim = max(sorted(by_broker), key=lambda b: by_broker[b])  # leads 2 of 6 partitions, typically
        victim_partitions = sorted(p for p, b in leaders.items() if b == victim)
        [victim_port] = [n.broker_port for n in cluster.nodes if n.node_id == victim]

        metrics_port = _free_port()
        job = ReconciliationJob(
            SparkJobSettings(
                bootstrap_servers=bootstrap,
                clusters=[CLUSTER],
                audit_topic=audit_topics["audit_topic"],
                results_topic=unique_name(request, ".results"),
                commits_topic=unique_name(request, ".commits"),
                dlq_topic=audit_topics["dlq_topic"],
                trigger_ms=1_000,
                watermark_delay_ms=2_000,
                grace_ms=4_000,
                final_settle_ms=3_000,
                heartbeat_ms=500,
                checkpoint_dir=tmp_path / "spark" / "checkpoint",
                parquet_dir=tmp_path / "spark" / "results",
                training_dir=tmp_path / "spark" / "training",
                model_registry_dir=tmp_path / "spark" / "models",
                metrics_port=metrics_port,
                predict=False,  # attribution needs no predictor; saves loading torch
                retrain=False,
            ),
            listeners=[on_results],
        )
        attach_to_job(job, AlertSettings(bootstrap_servers=bootstrap, alerts_topic=alerts_topic))

        def start_job() -> None:  # Spark starts while the producer runs (the job reads from earliest)
            try:
                job.start()
                started.append(None)
            except BaseException as exc:
                started.append(exc)

        config = cluster.write_prometheus_config(
            tmp_path / "prometheus.yml",
            scrape_interval="1s",
            other_jobs={"kafka-audit": [f"127.0.0.1:{metrics_port}"]},
        )
        prom = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{(prom_port := _free_port())}",
            ],
            stdout=prom_log,
            stderr=subprocess.STDOUT,
        )
        prom_url = f"http://127.0.0.1:{prom_port}"

        settings = consumer_settings(bootstrap, [topic], audit_topics, window_ms=WINDOW_MS)
        with running_consumer(settings):
            out = tmp_path / "producer.json"
            args = {
                "bootstrap": bootstrap,
                "topic": topic,
                "partitions": PARTITIONS,
                "audit_topic": audit_topics["audit_topic"],
                "window_ms": WINDOW_MS,
                "rate": RATE,
                "duration_s": WARM_S + CUT_S + AFTER_S,
                "message_timeout_ms": MESSAGE_TIMEOUT_MS,
                "out": str(out),
            }
            producer = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.attribution_producer", json.dumps(args)],
                cwd=REPO,
                group=PRODUCER_GID,
                stdout=open(tmp_path / "producer.log", "wb"),  # noqa: SIM115 - the child holds it
                stderr=subprocess.STDOUT,
            )
            threading.Thread(target=start_job, daemon=True).start()
            wait_for(lambda: Path(f"{out}.started").exists() or producer.poll() is not None, 60, "producing")
            assert producer.poll() is None, (tmp_path / "producer.log").read_text()
            time.sleep(WARM_S)  # the producer's own schedule: load before the cut
            cut = BrokerCut(victim_port, PRODUCER_GID)
            cut_at = time.time()
            cut.apply()
            time.sleep(CUT_S)  # the cut's length is the test's input, not a wait for a condition
            cut.remove()
            lifted_at = time.time()
            wait_for(lambda: producer.poll() is not None, 90, "the producer to finish")
            assert producer.returncode == 0, (tmp_path / "producer.log").read_text()
            record = json.loads(out.read_text())
            wait_for(lambda: started, 120, "the Spark job to start")
            assert started[0] is None, started[0]

            # Every window the producer sent in gets its final result.
            windows = {int(w): tuple(r) for w, r in record["windows"].items()}

            def all_final() -> bool:
                assert job is not None and job.exception() is None, job.exception() if job else None
                return set(windows) <= set(finals)

            wait_for(all_final, 120, f"final results of windows {sorted(windows)}")
            t_final = time.monotonic()

        # Ground truth: the topic read in full; a missing sequence number names its partition (seq % 6).
        truth = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topics["audit_topic"])
        found = set().union(
            *(r.sequences for r in truth.rows.values() if r.producer_id == record["producer_id"])
        )
        failed = {seq: (partition, error) for seq, partition, error in record["failed"]}
        missing_by: Counter[tuple[int, int]] = Counter()
        failed_by: Counter[tuple[int, int]] = Counter()
        for start, (first, last) in windows.items():
            for seq in range(first, last + 1):
                if seq not in found:
                    missing_by[(start, seq % PARTITIONS)] += 1
                if seq in failed:
                    assert failed[seq][0] == seq % PARTITIONS, (seq, failed[seq])
                    failed_by[(start, seq % PARTITIONS)] += 1
        assert record["last_sequence"] == max(last for _, last in windows.values())
        lost_by: Counter[tuple[int, int]] = Counter()
        for start in windows:
            row = finals[start]
            parts = {p["partition"]: p for p in row["partitions"]}
            assert set(parts) <= set(range(PARTITIONS)), (start, row["partitions"])
            for p in parts.values():
                assert p["lost"] is not None and p["sent"] == p["acknowledged"] + p["failed"], p
                lost_by[(start, p["partition"])] += p["lost"]
                assert p["leader"] == leaders[p["partition"]] and p["leaders"] == [p["leader"]], p
            assert row["sent"] - row["unique"] == sum(p["lost"] for p in parts.values()), row
        lost_by, missing_by, failed_by = (+lost_by, +missing_by, +failed_by)  # drop zeros
        assert lost_by == missing_by == failed_by, (lost_by, missing_by, failed_by)
        lost_partitions = sorted({p for _, p in lost_by})
        assert lost_partitions == victim_partitions, (lost_partitions, victim_partitions, leaders)
        errors = Counter(e for _, e in failed.values())
        assert set(errors) == {"_MSG_TIMED_OUT"}, errors
        lossy = [r for r in finals.values() if r["topic"] == topic and r["sent"] - r["unique"] > 0]
        assert lossy and all(window_result.lost_by_leader(r).keys() == {victim} for r in lossy)
        for r in lossy:
            for p in r["partitions"]:
                assert p["failed_by_error"] == ({"_MSG_TIMED_OUT": p["failed"]} if p["failed"] else {}), p

        # The completeness alert names the partitions and the broker.
        def alert_events() -> list:
            events = [decode_alert(m.value()) for m in read_to_end(kconfig, alerts_topic, missing_ok=True)]
            return [
                e
                for e in events
                if e.alertname == COMPLETENESS_BELOW_TARGET and e.topic == topic and e.firing
            ]

        [alert] = wait_for(alert_events, 30, "a firing completeness alert")[:1]
        named = {a["partition"] for a in alert.attribution}
        assert named and named <= set(victim_partitions), (alert.attribution, victim_partitions)
        assert {a["leader"] for a in alert.attribution} == {victim}, alert.attribution
        window = finals[alert.window_start_ms]
        assert [a["lost"] for a in alert.attribution] == [
            x["lost"] for x in window_result.partition_losses(window, top=3)
        ]
        annotations = alert.annotations()
        assert annotations["lost_leaders"] == str(victim), annotations
        assert f"led by broker(s) {victim}" in alert.summary, alert.summary
        assert f"(leader broker {victim})" in alert.description, alert.description

        # The dashboard's loss-per-leader panel: real Prometheus scraping the job's exporter.
        expr = LOSS_BY_LEADER_EXPR.replace("$broker", ".+")

        def panel() -> dict[str, float]:
            return {s["metric"]["broker"]: float(s["value"][1]) for s in _query(prom_url, expr)}

        wait_for(lambda: _ready(prom_url), 30, "Prometheus ready")
        series = wait_for(lambda: (v := panel()).get(str(victim), 0) > 0 and v, 30, "loss per leader")
        assert {b for b, v in series.items() if v > 0} == {str(victim)}, series
        print(  # the numbers, shown with -s
            f"victim broker {victim} (partitions {victim_partitions}), cut {lifted_at - cut_at:.1f} s; "
            f"lost per (window, partition) {dict(sorted(lost_by.items()))}; "
            f"total lost {sum(lost_by.values())}"
            f" of {record['last_sequence']}; delivered {record['delivered']}; alert: {alert.summary}; "
            f"Prometheus {series}; cluster {t_cluster - t0:.0f} s, all final +{t_final - t_cluster:.0f} s, "
            f"total {time.monotonic() - t0:.0f} s"
        )
    finally:
        if cut is not None:
            cut.remove()
        if producer is not None and producer.poll() is None:
            producer.kill()
            producer.wait(30)
        if job is not None:
            job.stop()
            if job.spark is not None:
                job.spark.stop()
        if prom is not None:
            _stop(prom)
        prom_log.close()
        cluster.stop()
