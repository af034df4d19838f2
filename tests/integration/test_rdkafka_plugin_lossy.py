"""Issue 41 acceptance: ``kcat`` audited by the librdkafka plugin alone, through a lossy link.

The testbed's producer namespace (:class:`testbed.lab.Lab`: a router namespace that drops the producer's
packets towards the broker at random, Bernoulli) runs ``kcat -P`` (Debian's librdkafka) with acks=1,
retries and short request and message timeouts, so some batches are retried (duplicates) and some expire
(failed, possibly lost), into a 3-partition topic. The only audit setting is ``plugin.library.paths`` (plus
the audit topic and window). The audit consumer counts the cluster tier in the root namespace. Checked: the
plugin's ``sent`` over all windows equals the lines the test wrote; every final window's counts equal the
verifier's, so the loss a window reports (sent - unique) is the verifier's; every record carries a stamp;
every window is accounted for by its producer (acknowledged + failed = sent).

Needs root (network namespaces), like the testbed tests; runs in the host-network xdist group.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from audit_consumer.ground_truth import verify_topic
from audit_record import PRODUCER_TIER, cluster_tier
from kafka_audit.verification_report import compare_with_cluster
from kafka_plumbing.rdkafka_plugin import rdkafka_plugin

from .helpers import CLUSTER, consumer_settings, running_consumer, wait_for_final_windows

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.xdist_group("host-network"),  # tests.conftest.HOST_NETWORK_GROUP: namespaces, iptables
    pytest.mark.skipif(os.geteuid() != 0, reason="the testbed creates network namespaces: needs root"),
]
WINDOW_MS = 5_000
# 12 s of load, three or four windows: 6 s (6,000 records) retried and failed nothing in one run of many
# (TCP retransmitted every lost segment within the 1-s request timeout), so the test tested nothing. A
# blackout longer than message.timeout.ms instead failed every delivery in one run (the connection did
# not come back in time) and left windows no cluster tier could report.
RECORDS = 12_000
CHUNKS = 24  # written 0.5 s apart
LOSS_PCT = 25.0


def test_kcat_through_loss_every_final_window_equals_the_verifier(tmp_path, audit_topics):
    from testbed.impairment import BernoulliLoss, Impairment
    from testbed.lab import Lab
    from testbed.netns import CHAIN

    with Lab(tmp_path / "lab", brokers=1, audit_topic=audit_topics["audit_topic"]) as lab:
        kconfig = dict(lab.kconfig)
        topic = lab.topic(f"pytest.rdkafka.lossy.{os.urandom(4).hex()}", partitions=3)
        audit = lab.topic(audit_topics["audit_topic"], partitions=3)
        props = {
            "plugin.library.paths": str(rdkafka_plugin()),
            "client.id": "kcat-lossy",
            "acks": "1",
            "retries": "10",
            "retry.backoff.ms": "50",
            "linger.ms": "5",
            "request.timeout.ms": "1000",
            "message.timeout.ms": "2500",
            "kafka.audit.topic": audit,
            "kafka.audit.window.ms": str(WINDOW_MS),
            "kafka.audit.grace.ms": "1000",
            "kafka.audit.snapshot.interval.ms": "1000",
        }
        args = ["kcat", "-P", "-E", "-K:", "-b", lab.bootstrap_servers, "-t", topic]  # -E: stay up when
        # every broker connection is down for a moment (the lossy link), as an application would
        for k, v in props.items():
            args += ["-X", f"{k}={v}"]
        settings = consumer_settings(lab.bootstrap_servers, [topic], audit_topics, grace_ms=12_000)
        with running_consumer(settings):
            lab.apply(Impairment(loss=BernoulliLoss(percent=LOSS_PCT)))
            log = tmp_path / "kcat.log"  # a file, not a pipe: kcat logs every failed delivery, and a full
            # stderr pipe would stop it reading stdin while the test writes to it
            with log.open("w") as err:
                kcat = lab.ns.popen(args, stdin=subprocess.PIPE, stderr=err, text=True)
            try:
                per = RECORDS // CHUNKS
                for c in range(CHUNKS):  # paced load (not a wait for a result)
                    kcat.stdin.write("".join(f"k{i}:{'x' * 100}\n" for i in range(c * per, (c + 1) * per)))
                    kcat.stdin.flush()
                    time.sleep(0.5)
                time.sleep(3)  # what is still queued meets the loss too (message.timeout.ms 2.5 s)
                # the DROP rule's packet counters, in case the load met no loss at all
                rule = lab.ns.router_ok(["iptables", "-L", CHAIN, "-v", "-n", "-x"])
                lab.apply(Impairment())  # the link heals before kcat closes and the finals go out
                kcat.communicate(timeout=60)
            finally:
                if kcat.poll() is None:
                    kcat.kill()
                    kcat.wait(10)
            lab.apply(Impairment())
            stderr = log.read_text()
            # kcat exits 1 when a delivery failed (expected here), never on a fatal error
            assert kcat.returncode in (0, 1) and "FATAL" not in stderr, stderr[-3000:]
            wait_for_final_windows(kconfig, topic, audit, 90)
        v = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit)

    assert all(pid is not None for _, pid in v.rows), "records without a stamp: counted as unaudited"
    assert sum(r.sent for r in v.rows.values()) == RECORDS  # the plugin's sent = the lines written
    assert all(r.final for r in v.rows.values())
    assert compare_with_cluster(v, CLUSTER) == []  # every final window's counts equal the verifier's
    log = v.audit_log
    assert log is not None
    snaps = {r.window_start_ms: r for r in log.tier(PRODUCER_TIER) if r.topic == topic}
    cluster: dict[int, int] = {}
    for r in log.tier(cluster_tier(CLUSTER)):
        if r.topic == topic:
            assert r.final and r.unaudited == 0, r
            cluster[r.window_start_ms] = cluster.get(r.window_start_ms, 0) + r.unique
    lost = duplicated = failed = 0
    for (start, _pid), row in v.rows.items():
        snap = snaps[start]
        assert snap.final and snap.acknowledged + snap.failed == snap.sent, snap
        # the loss the window reports is the verifier's (a window that lost everything has no cluster count)
        assert snap.sent - cluster.get(start, 0) == row.lost
        assert row.lost <= snap.failed  # acks=1: only a failed send can be missing
        lost, duplicated, failed = lost + row.lost, duplicated + row.duplicated, failed + snap.failed
    print(f"\n{RECORDS} records at L={LOSS_PCT}%: failed {failed}, lost {lost}, duplicated {duplicated}")
    assert failed + duplicated > 0, f"the lossy link made no retry and no failure: it tests nothing\n{rule}"
