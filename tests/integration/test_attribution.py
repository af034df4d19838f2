"""Issue 16 item 2 acceptance: loss attributed to the partitions and the leader broker that lost it.

A 3-broker local cluster; an audited producer (``attribution_producer.py``, its own process with its own
group id) sends with ``acks=1`` and ``message.timeout.ms`` = 8 s to 6 partitions (replication factor 3),
message ``seq`` to partition ``seq % 6``. After a few seconds an iptables rule in a chain of this test's
own cuts that process, and only it (``-m owner --gid-owner``), off from the broker that leads some of the
partitions (its client port: connections and requests get a TCP reset, so nothing sent during the cut
reaches the broker later, and a request sent before it is answered as usual), for
20 s; the brokers still reach each other, so the leaders stay. The audit topic has one partition, led
by another broker, so the producer's snapshots are not cut off with its data. The cut starts at a window
boundary once a final window is complete and no completeness alert fires (a loaded host may lose
messages anywhere at first), so the alert's next episode is the cut's. Then, per final window of the
topic:

* the Spark job's window result puts the loss in those partitions, with that broker as their leader;
* each partition's ``lost`` equals the verifier's missing sequence numbers of that partition (the topic
  read in full, ``audit_consumer.ground_truth``) and the failed delivery reports the producer's own callback
  recorded, every missing message having one (a failed report whose message is in the topic anyway,
  librdkafka's "possibly persisted" timeout on a stalled host, is counted and printed, not lost);
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
from testbed.host_chains import chain_name, create_chain, remove_chain

from alerts import AlertSettings, attach_to_job
from alerts.codec import decode_alert
from alerts.event import COMPLETENESS_BELOW_TARGET, AlertEvent
from audit_consumer.ground_truth import verify_topic
from audit_record import cluster_tier, window_result
from dashboards.brokers import LOSS_BY_LEADER_EXPR
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.topics import ensure_topic, read_to_end
from spark_streaming.job import ReconciliationJob
from spark_streaming.settings import SparkJobSettings
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
MESSAGE_TIMEOUT_MS = 8_000
RATE = 200  # messages/s
CUT_S, AFTER_S = 20, 6
PRODUCER_GID = 40_016  # the producer process's group: what the iptables rule matches


class BrokerCut:
    """An iptables chain of its own that resets TCP requests from processes of ``gid`` to one local port.

    Jumped to from OUTPUT (loopback traffic passes it); removed in :meth:`remove` (rules, jump, chain),
    never flushing a global chain, as other tests on the host may use iptables at the same time. Named for
    this process (:func:`testbed.host_chains.chain_name`), so a later session removes it if this one is
    killed before :meth:`remove`.
    """

    TAG = "reset-"
    """The chain's tag before the port (:func:`~testbed.host_chains.chain_name`)."""

    def __init__(self, port: int, gid: int) -> None:
        self.chain = chain_name(f"{self.TAG}{port}")
        self.port, self.gid = port, gid
        self.active = False

    def rules(self) -> list[list[str]]:
        """The chain's rules, each after the match on the port and the group id.

        New connections and every segment that carries a request (PSH) are refused and reset the
        connection; a request already sent is answered as usual (pure ACKs pass), so the cut leaves no
        request whose fate the producer cannot know.
        """
        reset = ["-j", "REJECT", "--reject-with", "tcp-reset"]
        return [["--syn", *reset], ["--tcp-flags", "PSH", "PSH", *reset]]

    def apply(self) -> None:
        match = ["-p", "tcp", "-d", "127.0.0.1", "--dport", str(self.port), "-m", "owner", "--gid-owner"]
        create_chain(self.chain, [[*match, str(self.gid), *rule] for rule in self.rules()])
        self.active = True

    def remove(self) -> None:
        if not self.active:
            return
        remove_chain(self.chain)
        self.active = False


def _events(config: dict[str, str], alerts_topic: str, topic: str) -> list[AlertEvent]:
    """Completeness alert events of ``topic`` in the alerts topic, in order."""
    messages = read_to_end(config, alerts_topic, group_id=f"{alerts_topic}.reader", missing_ok=True)
    events = [decode_alert(m.value()) for m in messages]
    return [e for e in events if e.alertname == COMPLETENESS_BELOW_TARGET and e.topic == topic]


def _last_events(config: dict[str, str], alerts_topic: str, topic: str) -> list[AlertEvent]:
    """The newest completeness event of ``topic`` per alert (fingerprint): firing ones are firing now."""
    return list({e.fingerprint: e for e in _events(config, alerts_topic, topic)}.values())


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader broker (node id) of ``topic``, from the cluster's metadata, once all have one."""

    def elected() -> dict[int, int] | None:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
        leaders = {p.id: p.leader for p in md.topics[topic].partitions.values()}
        return leaders if leaders and min(leaders.values()) >= 0 else None

    return wait_for(elected, 30, f"a leader for every partition of {topic}")


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
                grace_ms=MESSAGE_TIMEOUT_MS + 10_000,  # after the consumer's grace + its commit
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

        # The consumer's grace covers the delivery bound (message.timeout.ms + 5 s) itself: its adaptive
        # wait reads the producers' timeouts from the audit topic in a thread that lagged on a loaded host
        # (windows closed 3 s after their end, the messages after that counted late).
        settings = consumer_settings(
            bootstrap, [topic], audit_topics, window_ms=WINDOW_MS, grace_ms=MESSAGE_TIMEOUT_MS + 7_000
        )
        with running_consumer(settings):
            out = tmp_path / "producer.json"
            args = {
                "bootstrap": bootstrap,
                "topic": topic,
                "partitions": PARTITIONS,
                "audit_topic": audit_topics["audit_topic"],
                "window_ms": WINDOW_MS,
                "rate": RATE,
                "max_duration_s": 600,
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
            # Cut only once the audit is calm: a final window complete and no completeness alert firing
            # (a host under load may lose messages on any broker at first), so the alert's next episode
            # is the cut's. Then cut at a window boundary: the cut's first window loses all of its
            # partitions' messages.
            wait_for(lambda: started, 180, "the Spark job to start")
            assert started[0] is None, started[0]

            def calm() -> int | None:
                assert job is not None and job.exception() is None, job.exception() if job else None
                good = [w for w, r in finals.items() if r["sent"] and r["completeness"] == 1.0]
                if not good or any(e.firing for e in _last_events(kconfig, alerts_topic, topic)):
                    return None
                return max(good)

            calm_window = wait_for(calm, 180, "a complete final window and no completeness alert", 2.0)
            boundary = (time.time_ns() // 1_000_000 // WINDOW_MS + 1) * WINDOW_MS
            time.sleep(max(0.0, boundary / 1000 + 0.1 - time.time()))  # the cut's start: a schedule
            cut = BrokerCut(victim_port, PRODUCER_GID)
            cut_at = time.time()
            cut.apply()
            time.sleep(CUT_S)  # the cut's length is the test's input, not a wait for a condition
            cut.remove()
            lifted_at = time.time()
            time.sleep(AFTER_S)  # load after the cut (what was queued is delivered), then stop
            Path(f"{out}.stop").touch()
            wait_for(lambda: producer.poll() is not None, 90, "the producer to finish")
            assert producer.returncode == 0, (tmp_path / "producer.log").read_text()
            record = json.loads(out.read_text())

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
        failed = {seq: (partition, error) for seq, partition, error, _ in record["failed"]}
        missing = {seq for first, last in windows.values() for seq in range(first, last + 1)} - found
        # Every message missing from the topic got a failed delivery report. A failed report whose message
        # is in the topic is librdkafka's "possibly persisted" timeout: its request reached the broker, the
        # answer not the producer in time (a broker or this producer stalled on a loaded host; the cut
        # itself leaves none, as requests sent before it are answered). Not lost, so not in `lost`.
        assert missing <= set(failed), sorted(missing - set(failed))[:20]
        persisted = set(failed) - missing
        missing_by: Counter[tuple[int, int]] = Counter()
        failed_by: Counter[tuple[int, int]] = Counter()
        persisted_by: Counter[tuple[int, int]] = Counter()
        for start, (first, last) in windows.items():
            for seq in range(first, last + 1):
                key = (start, seq % PARTITIONS)
                missing_by[key] += seq in missing
                if seq in failed:
                    assert failed[seq][0] == seq % PARTITIONS, (seq, failed[seq])
                    failed_by[key] += 1
                    persisted_by[key] += seq in persisted
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
        keys = sorted(set(lost_by) | set(missing_by) | set(failed_by))
        table = {k: (lost_by[k], missing_by[k], failed_by[k] - persisted_by[k]) for k in keys}
        closed = (
            {  # when the audit consumer closed each (window, partition): its final snapshot
                f"{r.window_start_ms}:{r.partition}": [r.emitted_at_ms, r.late]
                for r in truth.audit_log.tier(tier)
                if r.topic == topic and r.final and r.producer_id == record["producer_id"]
            }
            if truth.audit_log is not None
            else {}
        )
        (tmp_path / "attribution.json").write_text(
            json.dumps(
                {
                    "table": [[*k, *v] for k, v in table.items()],
                    "finals": finals,
                    "record": record,
                    "closed": closed,
                    "cut": [cut_at, lifted_at],
                }
            )
        )
        differ = {k: v for k, v in table.items() if len(set(v)) > 1}
        assert not differ, (
            f"(window, partition): (lost, verifier missing, failed reports of missing messages) differ: "
            f"{differ}"
        )
        # The loss is the cut broker's: its partitions lose every message of the windows wholly inside the
        # cut (but the last message.timeout.ms, delivered after it), and more than any other partition.
        lost_on: Counter[int] = Counter()
        for (_, partition), n in lost_by.items():
            lost_on[partition] += n
        inside = [
            w
            for w in windows
            if w >= cut_at * 1000 and w + WINDOW_MS <= lifted_at * 1000 - MESSAGE_TIMEOUT_MS
        ]
        assert inside, (windows, cut_at, lifted_at)
        for w in inside:
            parts = {p["partition"]: p for p in finals[w]["partitions"]}
            for v in victim_partitions:
                assert parts[v]["lost"] == parts[v]["sent"] > 0 and parts[v]["leader"] == victim, parts[v]
        others = [n for p, n in lost_on.items() if p not in victim_partitions]
        assert min(lost_on[p] for p in victim_partitions) > max(others, default=0), (lost_on, victim)
        errors = Counter(e for _, e in failed.values())
        assert set(errors) == {"_MSG_TIMED_OUT"}, errors
        lossy = [r for r in finals.values() if r["topic"] == topic and r["sent"] - r["unique"] > 0]
        by_leader: Counter[int | None] = Counter()
        for r in lossy:
            by_leader.update(window_result.lost_by_leader(r))
        assert by_leader.most_common(1)[0][0] == victim, by_leader
        for r in lossy:
            for p in r["partitions"]:
                assert p["failed_by_error"] == ({"_MSG_TIMED_OUT": p["failed"]} if p["failed"] else {}), p

        # The completeness alert names the partitions and the broker: the episode after the calm window.
        def cut_alert() -> list:
            return [
                e
                for e in _events(kconfig, alerts_topic, topic)
                if e.firing and (e.window_start_ms or 0) > calm_window
            ]

        [alert] = wait_for(cut_alert, 30, "a firing completeness alert after the calm window")[:1]
        window = finals[alert.window_start_ms]
        assert alert.attribution == window_result.partition_losses(window, top=3)
        if alert.window_start_ms >= boundary:  # the cut's episode: it names the victim first
            top = alert.attribution[: len(victim_partitions)]
            assert {a["partition"] for a in top} == set(victim_partitions), (alert.attribution, victim)
            assert {a["leader"] for a in top} == {victim}, alert.attribution
        else:  # a loaded host lost messages between the calm window and the cut: the episode is that loss's
            assert window["sent"] > window["unique"], window
            print(f"episode before the cut ({alert.window_start_ms} < {boundary}): {alert.attribution}")
        leader = alert.attribution[0]["leader"]
        annotations = alert.annotations()
        assert annotations["lost_leaders"].split(", ")[0] == str(leader), annotations
        assert f"led by broker(s) {leader}" in alert.summary, alert.summary
        assert f"(leader broker {leader})" in alert.description, alert.description

        # The dashboard's loss-per-leader panel: real Prometheus scraping the job's exporter.
        expr = LOSS_BY_LEADER_EXPR.replace("$broker", ".+")

        def panel() -> dict[str, float]:
            return {s["metric"]["broker"]: float(s["value"][1]) for s in _query(prom_url, expr)}

        wait_for(lambda: _ready(prom_url), 30, "Prometheus ready")
        series = wait_for(lambda: (v := panel()).get(str(victim), 0) > 0 and v, 30, "loss per leader")
        assert max(series, key=lambda b: series[b]) == str(victim), series
        print(  # the numbers, shown with -s
            f"victim broker {victim} (partitions {victim_partitions}), cut {lifted_at - cut_at:.1f} s; "
            f"lost per (window, partition) {dict(sorted(lost_by.items()))}; "
            f"total lost {sum(lost_by.values())}"
            f" of {record['last_sequence']}; delivered {record['delivered']}; failed reports "
            f"{len(failed)} ({len(persisted)} of them possibly persisted, in the topic); by leader "
            f"{dict(by_leader)}; alert: {alert.summary}; "
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
