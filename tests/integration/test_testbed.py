"""The testbed against real namespaces, iptables/NFQUEUE and a real broker (needs root, as CI runs)."""

from __future__ import annotations

import csv
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from testbed.grid import CSV_COLUMNS, GridSpec, run_grid
from testbed.impairment import BernoulliLoss, Delay, GilbertElliottLoss, Impairment
from testbed.lab import Lab
from testbed.netns import NetworkError, ProducerNamespace, list_namespaces
from testbed.probe import ping_probe
from testbed.run import run_scenario
from testbed.scenario import Scenario

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the testbed creates network namespaces: needs root"),
]
PROBES = 5000
ALLOWED_CC = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")


@pytest.fixture(scope="module")
def ns():
    allowed_before = ALLOWED_CC.read_text()
    with ProducerNamespace(index=1, seed=11) as n:
        yield n
    assert n.name not in list_namespaces() and n.router not in list_namespaces()
    if not list_namespaces():  # the last testbed namespace gone: the host's allowed list is as it was
        assert ALLOWED_CC.read_text() == allowed_before


def test_the_producer_namespace_runs_cubic_whatever_the_host_default(ns):
    assert ns.exec_ok(["sysctl", "-n", "net.ipv4.tcp_congestion_control"]).strip() == "cubic"


def test_an_unknown_congestion_control_is_refused_with_the_available_ones():
    with pytest.raises(NetworkError, match=r"'nosuchcc' is not available .*available: .*reno"):
        ProducerNamespace(index=2, congestion_control="nosuchcc")


@pytest.mark.parametrize("loss_pct", [0.0, 5.0, 20.0])
def test_requested_loss_is_achieved_within_2pp(ns, loss_pct):
    ns.apply(Impairment(loss=BernoulliLoss(percent=loss_pct)))
    res = ping_probe(ns, PROBES)
    assert abs(res.loss_pct - loss_pct) <= 2.0, res.summary()


def test_requested_delay_shows_as_median_rtt_increase(ns):
    ns.apply(Impairment())
    base = ping_probe(ns, 300)
    ns.apply(Impairment(delay=Delay(delay_ms=50)))
    res = ping_probe(ns, 500, interval_s=0.002)
    increase = res.median_rtt_ms - base.median_rtt_ms
    assert abs(increase - 50.0) <= 10.0, (base.summary(), res.summary())


def test_gilbert_elliott_gives_loss_bursts_of_mean_length_1_over_r(ns):
    model = GilbertElliottLoss(p=2, r=25)
    ns.apply(Impairment(loss=model))
    res = ping_probe(ns, PROBES)
    assert res.mean_burst is not None
    assert abs(res.mean_burst - model.mean_burst_packets) <= 0.3 * model.mean_burst_packets, res.summary()
    assert abs(res.loss_pct - model.mean_loss_pct) <= 3.0, res.summary()
    stats = ns.handler_stats()
    assert stats["dropped"] > 0


def test_changing_the_impairment_while_traffic_flows(ns):
    ns.apply(Impairment())
    proc = ns.popen(["ping", "-n", "-c", "3000", "-i", "0.001", ns.host_ip], stdout=-1, stderr=-1, text=True)
    try:
        ns.apply(Impairment(delay=Delay(delay_ms=5), loss=GilbertElliottLoss(p=5, r=50)))
        ns.apply(Impairment(loss=BernoulliLoss(percent=30)))
        ns.apply(Impairment())
    finally:
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode in (0, 1)
    assert "3000 packets transmitted" in out


def test_wait_drained_waits_for_the_send_queue_an_exited_process_left_to_the_kernel(ns):
    ns.apply(Impairment())
    listener = socket.create_server((ns.host_ip, 0))
    port = listener.getsockname()[1]
    sender = ns.popen(
        [
            sys.executable,
            "-c",
            "import socket, sys; s = socket.create_connection((sys.argv[1], int(sys.argv[2]))); "
            "s.setblocking(False); n = 0\n"
            "try:\n    while True: n += s.send(b'x' * 65536)\nexcept BlockingIOError:\n    print(n)",
            ns.host_ip,
            str(port),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    conn, _ = listener.accept()  # not read: the receive window fills, the sender's kernel holds the rest
    try:
        out, _ = sender.communicate(timeout=30)  # it exits with a full send queue (it wrote until EAGAIN)
        assert sender.returncode == 0
        pending = ns.open_connections()
        assert any(c.startswith("producer FIN-WAIT-1") for c in pending), pending  # the orphan
        assert any(c.startswith("broker ") for c in pending), pending  # received, not read
        with pytest.raises(NetworkError, match="still open after"):
            ns.wait_drained(timeout_s=0.5)
        received = 0
        while chunk := conn.recv(1 << 20):  # read to the sender's FIN
            received += len(chunk)
        conn.close()
        assert received == int(out)  # the kernel delivered everything the exited process had written
        ns.wait_drained(timeout_s=30)
        assert ns.open_connections() == []
    finally:
        conn.close()
        listener.close()


def test_acks0_with_10pct_loss_loses_and_the_audit_pipeline_equals_the_verifier(tmp_path):
    scenario = Scenario.model_validate(
        {
            "name": "pytest-acks0",
            "topic": f"pytest.testbed.{os.urandom(4).hex()}",
            "window_ms": 5000,
            "producer": {"acks": "0", "batch.num.messages": 1, "message.timeout.ms": 1000, "linger.ms": 0},
            "workload": {"profile": "weblog", "poll_interval_ms": 0.25},
            "stages": [
                {
                    "name": "L=10%",
                    "duration_s": 10,
                    "network": {"delay": {"delay_ms": 30}, "loss": {"model": "bernoulli", "percent": 10}},
                }
            ],
        }
    )
    with Lab(tmp_path / "lab", brokers=1) as lab:  # CUBIC: the kernel drains the exited producer's sockets
        result = run_scenario(scenario, lab, spark=True, work_dir=tmp_path / "run", log=lambda _m: None)
    [stage] = result.stages
    assert stage.sent > 10_000 and stage.lost > 0, stage
    assert result.windows and sum(w.sent for w in result.windows) == stage.sent
    assert sum(w.truth_loss_rate > 0 for w in result.windows) >= 1
    for w in result.windows:
        assert w.exact, w  # the audit pipeline's final R_l and R_d == the verifier's, exactly
        assert w.audit_late == 0, w
        assert w.tx_retries is not None and w.request_timeouts is not None, w  # the job's counters, too
    assert any(w.packet_loss_pct_est for w in result.windows)  # L > 0 at 10% packet loss
    # the producers' namespace measured TCP's retransmission timeouts too (some fire at 10% loss)
    assert all(w.tcp_timeout_pct_est is not None for w in result.windows)


def test_grid_writes_the_shared_csv_format_and_resumes(tmp_path):
    spec = GridSpec(
        name="pytest-grid",
        messages=1500,
        warmup_messages=2000,
        fixed={"delay_ms": 5, "message_timeout_ms": 5000, "poll_interval_ms": 1},
        sweep={"packet_loss_pct": [0, 10], "acks": [0, 1]},
    )
    out = tmp_path / "grid.csv"
    with Lab(tmp_path / "lab", brokers=1) as lab:
        assert run_grid(spec, out, lab) == 4
        assert run_grid(spec, out, lab) == 0  # resumed: nothing left to do
    with out.open() as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert tuple(reader.fieldnames or ()) == CSV_COLUMNS
    assert len(rows) == 4
    for row in rows:
        assert int(row["n_sent"]) == 1500
        assert int(row["n_lost"]) == 1500 - int(row["n_unique"])
        assert float(row["duration_s"]) > 0
