"""Shared test helpers: run an audit consumer in a thread, wait for final windows, compare with truth."""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from audit_consumer.consumer import AuditConsumer
from audit_consumer.settings import AuditConsumerSettings
from audit_record import PRODUCER_TIER, cluster_tier, now_ms
from audit_record.control_record import ControlRecord, encode_control
from audit_record.reader import read_audit_log

CLUSTER = "test"


PINNED_LOSS_PCT = 15.0


class PinnedLoss:
    """Stands in for TcpRetransmitMeter: the producer's link 'loses' PINNED_LOSS_PCT percent of its packets.

    ``monkeypatch.setattr(audit_producer.producer, "TcpRetransmitMeter", PinnedLoss)`` before the
    producers start: their L estimate (paper Eq. 1) then reads 15% without a network namespace.
    """

    timeout_pct: float | None = None  # no retransmission-timeout rate measured

    def sample(self) -> float:
        return PINNED_LOSS_PCT


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.5) -> Any:
    """Poll ``predicate`` until it returns something truthy, or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


def consumer_settings(
    bootstrap: str, topics: list[str], audit_topics: dict[str, str], **kw: Any
) -> AuditConsumerSettings:
    base: dict[str, Any] = {
        "cluster": CLUSTER,
        "topics": topics,
        "bootstrap_servers": bootstrap,
        "window_ms": 5_000,
        "grace_ms": 2_000,
        "commit_interval_ms": 500,
        "instance_id": "t0",
        "transaction_timeout_ms": 5_000,
        "group_id": f"g.{audit_topics['state_topic']}",
        **audit_topics,
    }
    base.update(kw)
    return AuditConsumerSettings(**base)


@contextmanager
def running_consumer(settings: AuditConsumerSettings) -> Iterator[AuditConsumer]:
    consumer = AuditConsumer(settings)
    stop = threading.Event()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            consumer.run(stop)
        except BaseException as exc:
            errors.append(exc)

    th = threading.Thread(target=target, daemon=True)
    th.start()
    try:
        yield consumer
    finally:
        stop.set()
        th.join(60)
    if th.is_alive():
        frame = sys._current_frames().get(th.ident or 0)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "?"
        raise AssertionError(f"audit consumer did not stop; it is at:\n{stack}")
    if errors:
        raise errors[0]


def all_windows_final(config: dict[str, str], topic: str, audit_topic: str) -> bool:
    """True when every producer window of ``topic`` has final cluster-tier snapshots only.

    A window whose producers' finals acknowledged nothing (every record failed, e.g. through a lossy link)
    needs none: the audit consumer reports only what it reads, and such a window may hold nothing (the
    product shows it as 100% loss, ``spark_streaming.settings`` ``clusters``); if it does hold a record (a
    failed send the broker appended), that window's cluster snapshots must be final too.
    """
    log = read_audit_log(config, audit_topic)
    producers = [r for r in log.tier(PRODUCER_TIER) if r.topic == topic]
    produced = {r.window_start_ms for r in producers}
    acknowledged = {r.window_start_ms for r in producers if r.acknowledged > 0}
    cluster = [r for r in log.tier(cluster_tier(CLUSTER)) if r.topic == topic]
    final = {r.window_start_ms for r in cluster if r.final}
    open_ = {r.window_start_ms for r in cluster if not r.final}
    producers_final = all(r.final for r in producers)
    return bool(produced) and acknowledged <= final and not open_ and producers_final


def windows_state(config: dict[str, str], topic: str, audit_topic: str) -> dict[int, list[tuple[Any, ...]]]:
    """Window start -> the newest snapshots of ``topic`` (tier, final, sent, acknowledged, failed, unique)."""
    log = read_audit_log(config, audit_topic)
    state: dict[int, list[tuple[Any, ...]]] = {}
    for tier in (PRODUCER_TIER, cluster_tier(CLUSTER)):
        for r in log.tier(tier):
            if r.topic == topic:
                state.setdefault(r.window_start_ms, []).append(
                    (tier, r.final, r.sent, r.acknowledged, r.failed, r.unique)
                )
    return dict(sorted(state.items()))


def wait_for_final_windows(config: dict[str, str], topic: str, audit_topic: str, timeout_s: float) -> None:
    """Wait for :func:`all_windows_final`; a timeout says what each window's snapshots hold."""
    try:
        wait_for(lambda: all_windows_final(config, topic, audit_topic), timeout_s, "final windows")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}; (tier, final, sent, acknowledged, failed, unique) per window: "
            f"{windows_state(config, topic, audit_topic)}"
        ) from exc


def produce_through_changes(
    producer: Any,
    topic: str,
    writer: Any,
    control_topic: str,
    group: str,
    versions: Sequence[Any],
    timeout_s: float = 60.0,
) -> int:
    """Produce ``topic`` from this thread while the control records ``versions`` are published one by one.

    Each record (a ``ControlRecord`` of ``group``) goes to ``control_topic`` through ``writer`` (a
    ``confluent_kafka.Producer``); the next one waits until ``producer`` (an ``AuditedProducer``) applied it
    and produced 100 more messages with it, so every configuration has messages of its own. Production goes
    on to a multiple of 1,000 messages after the last change, then ``producer`` is closed.

    Returns:
        The number of messages produced (``b"message <n>"``, n from 0).

    Raises:
        AssertionError: the changes took longer than ``timeout_s``, or the change thread's failure.
    """
    done = threading.Event()
    failures: list[BaseException] = []

    def change_configuration() -> None:
        try:
            for record in versions:
                writer.produce(control_topic, encode_control(record), group.encode())
                assert writer.flush(10) == 0
                v = record.version
                wait_for(lambda v=v: producer.active_control_version == v, 20, f"version {v}", 0.02)
                seq = producer.last_sequence  # every configuration gets messages of its own
                wait_for(lambda s=seq: producer.last_sequence >= s + 100, 20, "messages", 0.02)
        except BaseException as exc:
            failures.append(exc)
        finally:
            done.set()

    changer = threading.Thread(target=change_configuration, daemon=True)
    changer.start()
    n = 0
    deadline = time.monotonic() + timeout_s
    try:
        while not done.is_set() or n % 1000:  # go on a little after the last change
            assert time.monotonic() < deadline, "the configuration changes took too long"
            for _ in range(20):
                while True:
                    try:
                        producer.produce(topic, b"message %d" % n)
                        break
                    except BufferError:
                        producer.poll(0.05)
                n += 1
            producer.poll(0)
            time.sleep(0.002)
    finally:
        changer.join(30)
        producer.close()
    assert not failures, failures[0]
    return n


def forced(group: str, version: int) -> ControlRecord:
    """Version v: every controlled property changes (batch.num.messages = 100 + v names the version)."""
    odd = version % 2 == 1
    return ControlRecord(
        group=group,
        version=version,
        acks="1" if odd else "all",
        batch_num_messages=100 + version,
        linger_ms=50.0 if odd else 1.0,
        message_timeout_ms=60_000 if odd else 30_000,
        reason="forced",
        issued_at_ms=now_ms(),
    )
