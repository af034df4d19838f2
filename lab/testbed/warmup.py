"""Warm the cluster up before a scenario's first stage: unaudited load at the stage's rate and configuration.

A testbed run starts a fresh cluster. Its brokers' JVMs have not compiled the produce path yet, so for
the first tens of seconds they append more slowly: measured on 2026-11-24 (weblog, 4,000 messages/s,
``batch.num.messages`` = 1, 90-s stages, without the Spark job), the unimpaired first stage lost 0.33,
0.33 and 0.13 of its first three windows and nothing after them, while the same network in the last
stage lost nothing (``lab/experiments/predictor-learning/warm-up/``). That loss is the testbed's, not
the network's or
the configuration's, and a learning experiment's labels should not carry it. :func:`warm_up` offers
load to a separate topic through a plain (unaudited: no audit snapshots, so no window, result or
training row) ``confluent_kafka.Producer`` before the first stage, like a benchmark's warm-up iterations.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

TICK_S = 0.01
"""The pace's step: every 10 ms the messages that fell due are offered."""


@dataclass(frozen=True)
class WarmupResult:
    """What a warm-up sent.

    Attributes:
        offered: Messages offered to the producer.
        delivered: Messages the brokers acknowledged (for ``acks`` = 0: handed to the socket).
        failed: Messages with a delivery error (timed out, or refused with a full queue).
        seconds: Wall time of the load and the flush, s.
    """

    offered: int
    delivered: int
    failed: int
    seconds: float


def warm_up(
    kconfig: Mapping[str, Any],
    topic: str,
    config: Mapping[str, Any],
    *,
    rate: float,
    seconds: float,
    message_bytes: int = 200,
    flush_timeout_s: float = 30.0,
) -> WarmupResult:
    """Offer ``rate`` messages/s of ``message_bytes`` bytes to ``topic`` for ``seconds`` s, then flush.

    Args:
        kconfig: Connection properties (``bootstrap.servers``...).
        topic: The warm-up topic (not the scenario's: its windows would be audited and verified).
        config: librdkafka producer properties of the first stage (``acks``, ``batch.num.messages``,
            ``linger.ms``, ``message.timeout.ms``...), so the brokers warm the same request path.
        rate: Offered rate, messages/s; 0 or less: 10,000 messages/s.
        seconds: Length of the load, s (> 0).
        message_bytes: Value size, bytes.
        flush_timeout_s: Longest wait for outstanding deliveries after the load, s.

    Raises:
        ValueError: if ``seconds`` is not positive.
        confluent_kafka.KafkaException: if ``config`` holds an unknown or invalid property.
    """
    if seconds <= 0:
        raise ValueError(f"seconds={seconds}: a warm-up needs a positive length")
    rate = rate if rate > 0 else 10_000.0
    counts = {"delivered": 0, "failed": 0}

    def report(err: KafkaError | None, _msg: Message) -> None:
        counts["failed" if err is not None else "delivered"] += 1

    producer = Producer({**kconfig, **config, "client.id": "testbed-warmup"})
    value = b"w" * message_bytes
    offered = 0
    t0 = time.monotonic()
    while (now := time.monotonic()) < t0 + seconds:
        due = int((now - t0) * rate)
        while offered < due:
            try:
                producer.produce(topic, value, on_delivery=report)
            except BufferError:
                counts["failed"] += 1
            offered += 1
        producer.poll(0)
        time.sleep(TICK_S)
    producer.flush(flush_timeout_s)
    return WarmupResult(offered, counts["delivered"], counts["failed"], time.monotonic() - t0)
