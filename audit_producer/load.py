"""Audited load generation: N messages/s of a workload profile through an :class:`AuditedProducer`."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from audit_producer.producer import AuditedProducer
from audit_producer.settings import ProducerAuditSettings
from audit_producer.workloads import Profile, message_pool


@dataclass
class LoadResult:
    """What one load run did: messages produced, seconds taken, the producer instance id."""

    produced: int
    seconds: float
    producer_id: str
    snapshots: int

    @property
    def rate(self) -> float:
        """Achieved produce rate, messages/s."""
        return self.produced / self.seconds if self.seconds > 0 else 0.0


def run_load(
    config: Mapping[str, Any],
    topic: str,
    profile: Profile = "weblog",
    *,
    rate: float = 1000.0,
    duration_s: float | None = 60.0,
    count: int | None = None,
    audit: ProducerAuditSettings | None = None,
    message_bytes: int | None = None,
    seed: int = 0,
    stop: threading.Event | None = None,
    progress: Callable[[int], None] | None = None,
) -> LoadResult:
    """Produce audited load until ``count`` messages or ``duration_s`` seconds, whichever comes first.

    Args:
        config: librdkafka producer config (copied).
        topic: Target topic.
        profile: Workload profile (``social``, ``weblog``, ``game``).
        rate: Target rate, messages/s; 0 or less means as fast as possible.
        duration_s: Stop after this many seconds (None: only ``count`` stops it).
        count: Stop after this many messages (None: only ``duration_s`` stops it).
        audit: Audit settings for the producer.
        message_bytes: Fixed message size M in bytes (None: the profile's natural sizes).
        seed: Seed of the message pool.
        stop: Set it to stop early.
        progress: Called with the running count about 10 times a second.

    Raises:
        ValueError: if neither ``duration_s`` nor ``count`` is given.
        KafkaAuthenticationError, KafkaTlsError, KafkaConnectionError, TopicError: before the first
            message, from :meth:`AuditedProducer.check` (bad credentials or certificate, no broker, the
            audit topic cannot be created).
    """
    if duration_s is None and count is None:
        raise ValueError("give duration_s or count")
    pool = message_pool(profile, seed=seed, message_bytes=message_bytes)
    producer = AuditedProducer(config, audit)
    try:
        producer.check()  # fail fast, before the clock starts
    except BaseException:
        producer.close()
        raise
    values = itertools.cycle(pool)
    sent = 0
    t0 = time.monotonic()
    end = t0 + duration_s if duration_s is not None else float("inf")
    limit = count if count is not None else 1 << 62
    next_report = t0
    step = max(1, int(rate / 100)) if rate > 0 else 1000
    try:
        while sent < limit and not (stop is not None and stop.is_set()):
            now = time.monotonic()
            if now >= end:
                break
            if rate > 0:
                due = (now - t0) * rate
                if sent >= due:
                    time.sleep(min(0.01, (sent - due) / rate + 0.0005))
                    producer.poll(0)
                    continue
            for _ in range(min(step, limit - sent)):
                value = next(values)
                while True:
                    try:
                        producer.produce(topic, value)
                        break
                    except BufferError:
                        producer.poll(0.05)
                sent += 1
            producer.poll(0)
            if progress is not None and now >= next_report:
                progress(sent)
                next_report = now + 0.1
    finally:
        producer.close()
    if progress is not None:
        progress(sent)
    return LoadResult(sent, time.monotonic() - t0, producer.producer_id, producer.snapshots_sent)
