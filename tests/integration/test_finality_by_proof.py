"""Issue 37 acceptance: a window is final seconds after its end once it is proven complete, else it waits.

Real broker, real audit consumer, real Spark job (``local[2]``), audited producers:

1. A healthy network with librdkafka's default ``message.timeout.ms`` (300 s): every window is final by
   proof within 2 trigger intervals after its end + the watermark delay (the timeout rule would wait
   305 s + the job's settle time), and equals the verifier.
2. Messages that fail after the window is otherwise complete (the broker frozen with SIGSTOP while they
   are on the wire; some land once it resumes): the window waits for the timeout rule, is never final
   before it, and equals the verifier, the landed failed messages included.
3. A producer killed with SIGKILL mid-window: its window waits for the timeout rule and is exact.

Measured waits (wall clock from window end to the final result) are printed (``pytest -s``) and written
to ``$KAFKA_AUDIT_MEASUREMENTS`` (JSON lines) when that variable is set.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from audit_consumer.ground_truth import tally, verify_topic
from audit_consumer.settings import AuditConsumerSettings
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_record import window_result
from kafka_plumbing.local_cluster import KafkaCluster
from kafka_plumbing.topics import ensure_topic, read_to_end
from spark_streaming.job import ReconciliationJob
from spark_streaming.settings import SparkJobSettings
from tests.conftest import release_clients, unique_name

from .helpers import CLUSTER, consumer_settings, running_consumer, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WINDOW_MS = 5_000
TRIGGER_MS = 2_000
WATERMARK_DELAY_MS = 4_000
SETTLE_MS = 3_000  # the job's final_settle_ms (default 30 s): the timeout rule's windows come sooner
ADAPTIVE = 310_000  # max_final_wait_ms, the product default (tests/conftest.py sets 0 for other tests)
TIER = f"cluster:{CLUSTER}"


def _measure(name: str, **values: Any) -> None:
    line = json.dumps({"measurement": name, **values}, sort_keys=True)
    print(line)
    path = os.environ.get("KAFKA_AUDIT_MEASUREMENTS")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


class FinalTimes:
    """A job listener: when (wall clock, ms) each window's final result was written, and the results."""

    def __init__(self) -> None:
        self.at: dict[tuple[str, int], int] = {}
        self.rows: dict[tuple[str, int], dict[str, Any]] = {}
        self.provisional: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.lock = threading.Lock()

    def __call__(self, batch_id: int, results: list[dict[str, Any]]) -> None:
        now = int(time.time() * 1000)
        with self.lock:
            for r in results:
                if r["tier"] != TIER:
                    continue
                key = (r["topic"], r["window_start_ms"])
                if r["state"] == window_result.FINAL:
                    assert key not in self.rows, f"window {key} final twice"
                    self.at[key], self.rows[key] = now, r
                else:
                    self.provisional.setdefault(key, []).append(r)

    def final(self, topic: str, windows: set[int]) -> bool:
        with self.lock:
            return all((topic, w) in self.rows for w in windows)

    def waiting(self, topic: str, windows: set[int]) -> dict[int, Any]:
        """Window start -> what its newest provisional result waits for, for windows not final yet."""
        with self.lock:
            return {
                w: [(r["final_rule"], r["waiting_for"]) for r in self.provisional.get((topic, w), [])[-1:]]
                for w in sorted(windows)
                if (topic, w) not in self.rows
            }


def _job(
    bootstrap: str, audit_topics: dict[str, str], tmp: Path, times: FinalTimes, **kw: Any
) -> ReconciliationJob:
    name = audit_topics["audit_topic"][-8:]
    settings = SparkJobSettings(
        **{
            "trigger_ms": TRIGGER_MS,
            "watermark_delay_ms": WATERMARK_DELAY_MS,
            **kw,
        },
        bootstrap_servers=bootstrap,
        audit_topic=audit_topics["audit_topic"],
        dlq_topic=audit_topics["dlq_topic"],
        results_topic=f"{audit_topics['audit_topic']}.results",
        commits_topic=f"{audit_topics['audit_topic']}.commits",
        checkpoint_dir=tmp / "checkpoint",
        parquet_dir=tmp / "parquet",
        clusters=[CLUSTER],
        grace_ms=8_000,
        final_settle_ms=SETTLE_MS,
        max_final_wait_ms=ADAPTIVE,
        tier_final_wait_ms=10_000,  # a SIGKILLed producer never sends a final snapshot: 10 s, not 120
        heartbeat_ms=500,
        predict=False,
        retrain=False,
        query_name=f"q-proof-{name}",
    )
    return ReconciliationJob(settings, listeners=[times])


def _consumer(bootstrap: str, topic: str, audit_topics: dict[str, str], **kw: Any) -> AuditConsumerSettings:
    """The audit consumer with the product's adaptive finality (its own close rule stays the timeout)."""
    return consumer_settings(
        bootstrap, [topic], audit_topics, window_ms=WINDOW_MS, max_final_wait_ms=ADAPTIVE, **kw
    )


@contextmanager
def _running_job(job: ReconciliationJob) -> Iterator[ReconciliationJob]:
    job.start()
    try:
        yield job
    finally:
        job.stop()


def _truth(kconfig: dict[str, str], topic: str, audit_topic: str | None) -> dict[int, dict[str, int]]:
    """Per window: sent, received, unique, duplicated of the audited messages (the verifier).

    ``audit_topic`` None: the topic's stamps alone (``tally``; no ``sent``), for a producer that was
    SIGKILLed (the verifier refuses a topic holding sequences its producer never reported).
    """
    if audit_topic is None:
        v = tally(
            read_to_end(kconfig, topic, group_id="kafka-audit.verify", read_committed=False), topic, WINDOW_MS
        )
    else:
        v = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topic)
    out: dict[int, dict[str, int]] = {}
    for (start, pid), row in v.rows.items():
        if pid is None:
            continue
        t = out.setdefault(start, {"sent": 0, "received": 0, "unique": 0, "duplicated": 0})
        for k in t:
            t[k] += getattr(row, k, 0)
    return out


def _assert_exact(final: dict[str, Any], truth: dict[str, int], *, sent: bool = True) -> None:
    keys = ("sent", "received", "unique", "duplicated") if sent else ("received", "unique", "duplicated")
    got = {k: final[k] for k in keys}
    assert got == {k: truth[k] for k in keys}, (final["window_start_ms"], got, truth)


def _window_start_soon(min_left_ms: int) -> int:
    """Wait for a window with at least ``min_left_ms`` ahead; return its start."""
    wait_for(
        lambda: time.time() * 1000 % WINDOW_MS < WINDOW_MS - min_left_ms,
        WINDOW_MS / 1000 + 1,
        "a window",
        0.02,
    )
    now = int(time.time() * 1000)
    return now - now % WINDOW_MS


def _produce_for(producer: AuditedProducer, topic: str, seconds: float, rate: float) -> set[int]:
    """Produce about ``rate`` messages/s for ``seconds``; return the windows (start, ms) of their CreateTimes.

    The CreateTime is given explicitly, so the windows are the messages' own, never a guess from the clock
    after the loop (on a loaded host the last sleep can end in a window that holds no message).
    """
    interval = 1 / rate
    stop = time.monotonic() + seconds
    i = 0
    windows: set[int] = set()
    while time.monotonic() < stop:
        now_ms = int(time.time() * 1000)
        producer.produce(topic, f"m{i}".encode(), timestamp=now_ms)
        windows.add(now_ms - now_ms % WINDOW_MS)
        i += 1
        producer.poll(0)
        time.sleep(interval)
    return windows


def test_healthy_windows_are_final_within_two_triggers_after_end_plus_watermark_delay(
    request, tmp_path, kconfig, bootstrap, topic, audit_topics
):
    times = FinalTimes()
    with (
        # the job's default trigger (5 s) and watermark delay (10 s): the bound is theirs
        _running_job(
            _job(bootstrap, audit_topics, tmp_path, times, trigger_ms=5_000, watermark_delay_ms=10_000)
        ) as job,
        running_consumer(_consumer(bootstrap, topic, audit_topics)),
    ):
        # librdkafka's defaults: message.timeout.ms 300 s, acks all; the audit's defaults but the window
        producer = AuditedProducer(
            {"bootstrap.servers": bootstrap, "client.id": "healthy"},
            ProducerAuditSettings(window_ms=WINDOW_MS, audit_topic=audit_topics["audit_topic"]),
        )
        assert producer.reliability.message_timeout_ms == 300_000
        try:
            start = _window_start_soon(4_000)
            windows = _produce_for(producer, topic, 3 * WINDOW_MS / 1000, rate=200)
            assert min(windows) == start
            _until(
                job,
                [producer],
                lambda: times.final(topic, windows),
                90,
                "every window final by proof",
                lambda: f"newest provisional (rule, waiting for): {times.waiting(topic, windows)}",
            )
        finally:
            producer.close()
    truth = _truth(kconfig, topic, audit_topics["audit_topic"])
    assert set(truth) == windows
    bound_ms = job.s.watermark_delay_ms + 2 * job.s.trigger_ms
    waits = {w: times.at[(topic, w)] - (w + WINDOW_MS) for w in sorted(windows)}
    timeout_rule_ms = 300_000 + 5_000 + SETTLE_MS
    _measure(
        "finality_by_proof_healthy",
        wall_wait_after_end_ms=list(waits.values()),
        bound_ms=bound_ms,
        final_wait_ms=[times.rows[(topic, w)]["final_wait_ms"] for w in sorted(windows)],
        timeout_rule_wait_ms=timeout_rule_ms,
        trigger_ms=job.s.trigger_ms,
        watermark_delay_ms=job.s.watermark_delay_ms,
    )
    for w in sorted(windows):
        final = times.rows[(topic, w)]
        _assert_exact(final, truth[w])
        assert (final["final_rule"], final["waiting_for"]) == ("proof", None), final
        assert waits[w] <= bound_ms, (w, waits[w], bound_ms)
        # what the timeout rule would have waited (event time): the provisional results said it
        assert {r["final_wait_ms"] for r in times.provisional[(topic, w)]} == {timeout_rule_ms}


TIMEOUT_MS = 6_000  # message.timeout.ms of the producers whose windows wait for the timeout rule
FROZEN_TIMEOUT_MS = 3_000  # ... of the producer whose broker is frozen: 5 s of SIGSTOP, short enough
# for the audit consumer's transaction to survive it (8.5 s made it abort and rewind in one run of three)
MARGIN_MS = 5_000  # the job's delivery margin (default)


def test_messages_failing_after_the_window_is_otherwise_complete_wait_for_the_timeout_rule(
    request, tmp_path, audit_topics
):
    cluster = KafkaCluster.create(tmp_path / "kafka", brokers=1)
    cluster.start()
    try:
        bootstrap = cluster.bootstrap_servers
        kconfig = {"bootstrap.servers": bootstrap}
        topic = unique_name(request)
        ensure_topic(kconfig, topic, 1)
        times = FinalTimes()
        broker = cluster.nodes[0]
        assert broker.pid is not None
        with (
            _running_job(_job(bootstrap, audit_topics, tmp_path, times)) as job,
            running_consumer(_consumer(bootstrap, topic, audit_topics, transaction_timeout_ms=60_000)),
        ):
            producer = AuditedProducer(
                {
                    "bootstrap.servers": bootstrap,
                    "client.id": "frozen",
                    "acks": "all",
                    "linger.ms": 5,
                    "message.timeout.ms": FROZEN_TIMEOUT_MS,
                    "request.timeout.ms": FROZEN_TIMEOUT_MS - 1_000,
                },
                ProducerAuditSettings(
                    window_ms=WINDOW_MS, snapshot_interval_ms=1_000, audit_topic=audit_topics["audit_topic"]
                ),
            )
            try:
                healthy = _window_start_soon(4_000)
                frozen = healthy + WINDOW_MS
                # The healthy window, then the next one until 1 s before its end: acknowledged at once.
                _produce_for(producer, topic, (frozen + WINDOW_MS - 1_000) / 1000 - time.time(), rate=100)
                os.kill(broker.pid, signal.SIGSTOP)  # the last second's messages: written, never answered
                try:
                    _produce_for(producer, topic, (frozen + WINDOW_MS) / 1000 - time.time(), rate=100)
                    # they fail (message.timeout.ms) while the broker is frozen; some are on the wire
                    wait_for(
                        lambda: (
                            producer.poll(0.1),
                            time.time() * 1000 > frozen + WINDOW_MS + FROZEN_TIMEOUT_MS + 1_000,
                        )[1],
                        WINDOW_MS + FROZEN_TIMEOUT_MS,
                        "the stuck messages to time out",
                        0.1,
                    )
                finally:
                    os.kill(broker.pid, signal.SIGCONT)  # what the broker had received lands now
                _until(
                    job, [producer], lambda: times.final(topic, {healthy, frozen}), 120, "both windows final"
                )
            finally:
                producer.close()
        truth = _truth(kconfig, topic, audit_topics["audit_topic"])
    finally:
        release_clients()
        cluster.stop()
    ok, bad = times.rows[(topic, healthy)], times.rows[(topic, frozen)]
    waited = times.at[(topic, frozen)] - (frozen + WINDOW_MS)
    _measure(
        "finality_failed_after_complete",
        healthy_wall_wait_ms=times.at[(topic, healthy)] - (healthy + WINDOW_MS),
        failed_wall_wait_ms=waited,
        failed=bad["failed"],
        landed_although_failed=bad["unique"] - bad["acknowledged"],
        final_wait_ms=bad["final_wait_ms"],
        waiting_for=bad["waiting_for"],
    )
    _assert_exact(ok, truth[healthy])
    _assert_exact(bad, truth[frozen])
    assert ok["final_rule"] == "proof"
    assert bad["failed"] > 0 and bad["final_rule"] == "timeout", bad
    assert "failed messages (they may still land)" in bad["waiting_for"], bad["waiting_for"]
    assert bad["final_wait_ms"] == FROZEN_TIMEOUT_MS + MARGIN_MS + SETTLE_MS
    assert waited >= FROZEN_TIMEOUT_MS + MARGIN_MS + SETTLE_MS, waited  # never final before the timeout rule
    # its provisional results said what it waited for (the producer's snapshots of the frozen second only
    # reach the job once the broker resumes, when those messages have failed already)
    said = [r["waiting_for"] for r in times.provisional[(topic, frozen)]]
    assert said and all(w for w in said), said


_KILLED = """
import sys, time
from audit_producer import AuditedProducer, ProducerAuditSettings
bootstrap, topic, audit_topic = sys.argv[1:4]
p = AuditedProducer(
    {"bootstrap.servers": bootstrap, "client.id": "killed", "linger.ms": 5, "message.timeout.ms": 6000},
    ProducerAuditSettings(window_ms=5000, snapshot_interval_ms=1000, audit_topic=audit_topic),
)
i = 0
while True:
    p.produce(topic, b"k%d" % i)
    i += 1
    p.poll(0)
    time.sleep(0.005)
"""


def test_a_producer_killed_mid_window_waits_for_the_timeout_rule_and_is_exact(
    tmp_path, kconfig, bootstrap, topic, audit_topics
):
    times = FinalTimes()
    with (
        _running_job(_job(bootstrap, audit_topics, tmp_path, times)) as job,
        running_consumer(_consumer(bootstrap, topic, audit_topics)),
    ):
        child = subprocess.Popen(
            [sys.executable, "-c", _KILLED, bootstrap, topic, audit_topics["audit_topic"]],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        survivor = AuditedProducer(
            {"bootstrap.servers": bootstrap, "client.id": "survivor", "message.timeout.ms": TIMEOUT_MS},
            ProducerAuditSettings(window_ms=WINDOW_MS, audit_topic=audit_topics["audit_topic"]),
        )
        try:
            _produce_for(survivor, topic, 2, rate=100)  # the child is running by then
            before = _window_start_soon(4_000)
            killed = before + WINDOW_MS
            _produce_for(survivor, topic, (killed + WINDOW_MS // 2) / 1000 - time.time(), rate=100)
            child.send_signal(signal.SIGKILL)  # mid-window: no delivery report, no snapshot after this
            child.wait(10)
            _produce_for(survivor, topic, (killed + WINDOW_MS) / 1000 - time.time(), rate=100)
            _until(
                job,
                [survivor],
                lambda: times.final(topic, {before, killed}),
                120,
                "both windows final",
                lambda: f"newest provisional (rule, waiting for): {times.waiting(topic, {before, killed})}",
            )
        finally:
            if child.poll() is None:
                child.kill()
            survivor.close()
    truth = _truth(kconfig, topic, None)
    ok, cut = times.rows[(topic, before)], times.rows[(topic, killed)]
    waited = times.at[(topic, killed)] - (killed + WINDOW_MS)
    _measure(
        "finality_sigkill_mid_window",
        before_wall_wait_ms=times.at[(topic, before)] - (before + WINDOW_MS),
        killed_wall_wait_ms=waited,
        final_wait_ms=cut["final_wait_ms"],
        waiting_for=cut["waiting_for"],
    )
    _assert_exact(ok, truth[before], sent=False)
    _assert_exact(cut, truth[killed], sent=False)  # sent: the killed producer's last snapshot
    assert ok["final_rule"] == "proof", ok
    assert cut["final_rule"] == "timeout", cut
    assert "producer killed@" in cut["waiting_for"] and "not accounted for yet" in cut["waiting_for"], cut
    assert waited >= TIMEOUT_MS + MARGIN_MS + SETTLE_MS, waited  # never final before the timeout rule


def _until(
    job: ReconciliationJob,
    producers: list[AuditedProducer],
    done: Any,
    timeout_s: float,
    what: str,
    explain: Any = None,
) -> None:
    """Wait for ``done()``, polling the producers meanwhile (as an application does); fail on a job error.

    ``explain()``, if given, is added to the timeout's message (what the windows still wait for).
    """

    def check() -> bool:
        for p in producers:
            p.poll(0)
        if job.exception() is not None:
            raise AssertionError(f"the Spark query failed: {job.exception()}")
        return bool(done())

    try:
        wait_for(check, timeout_s, what, 0.1)
    except AssertionError as exc:
        if explain is None:
            raise
        raise AssertionError(f"{exc}; {explain()}") from exc
