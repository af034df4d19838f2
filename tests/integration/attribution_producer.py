"""The audited producer of ``test_attribution.py``, run as its own process (``python -m``).

The test runs it with its own group id, so an iptables rule matching that group (``-m owner
--gid-owner``) cuts this process, and only it, off from one broker. It produces ``rate`` messages/s with
``acks=1`` and a short ``message.timeout.ms`` until the test creates ``<out>.stop`` (at most
``max_duration_s``); message ``seq`` (the producer's sequence number) goes to partition
``seq % partitions`` with key ``seq``, so a missing sequence number says which partition it was meant
for. First one message per partition, flushed (a connection to every leader before the load). Its own
delivery callback records every failed report (sequence, partition, librdkafka error name, time),
independently of the audit's counting. At the start it writes ``<out>.started``; at the end ``<out>``
(JSON): ``producer_id``, ``last_sequence``, ``delivered``, ``delivered_at`` ({seq: report time, s}),
``failed`` ([[seq, partition, error, report time], ...]) and ``windows`` ({window start: [first seq,
last seq]}).

Usage: ``python -m tests.integration.attribution_producer '<json arguments>'`` with ``bootstrap``,
``topic``, ``partitions``, ``audit_topic``, ``window_ms``, ``rate``, ``max_duration_s``,
``message_timeout_ms``, ``out``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message

from audit_producer import AuditedProducer, ProducerAuditSettings


def main(args: dict[str, Any]) -> None:
    """Produce as the module docstring says and write the record of what failed."""
    failed: list[list[Any]] = []
    delivered_at: dict[int, float] = {}  # seq -> when its successful report came (s since the epoch)

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            delivered_at[int(msg.key())] = time.time()
        else:
            failed.append([int(msg.key()), msg.partition(), err.name(), time.time()])

    window_ms = int(args["window_ms"])
    producer = AuditedProducer(
        {
            "bootstrap.servers": args["bootstrap"],
            "client.id": "attribution",
            "acks": "1",
            "linger.ms": 5,
            "message.timeout.ms": int(args["message_timeout_ms"]),
            "statistics.interval.ms": 1_000,  # the partition leaders come with the statistics
            "reconnect.backoff.max.ms": 1_000,  # back to the broker within a second once it is reachable
            "on_delivery": on_delivery,
            "log_level": 0,
        },
        ProducerAuditSettings(
            audit_topic=args["audit_topic"],
            window_ms=window_ms,
            grace_ms=1_000,
            snapshot_interval_ms=1_000,
        ),
    )
    producer.check()
    out = Path(args["out"])
    windows: dict[int, list[int]] = {}
    partitions, rate = int(args["partitions"]), float(args["rate"])

    def send() -> None:
        """Produce the next message (BufferError: nothing was produced); note its window's sequences."""
        seq = producer.last_sequence + 1
        now_ms = time.time_ns() // 1_000_000
        producer.produce(args["topic"], b"x" * 100, str(seq).encode(), seq % partitions, timestamp=now_ms)
        assert producer.last_sequence == seq
        window = windows.setdefault(now_ms - now_ms % window_ms, [seq, seq])
        window[1] = seq

    for _ in range(partitions):  # warm-up: a connection to every leader before the load starts
        send()
    producer.flush(60)
    start = time.monotonic()
    Path(f"{out}.started").write_text(str(time.time()))
    n = 0
    stop = Path(f"{out}.stop")  # the test says when (a safety bound: max_duration_s)
    while (elapsed := time.monotonic() - start) < float(args["max_duration_s"]) and not (
        n % 50 == 0 and stop.exists()
    ):
        if n >= elapsed * rate:
            producer.poll(0.005)
            continue
        try:
            send()
        except BufferError:
            producer.poll(0.05)
            continue
        n += 1
        producer.poll(0)
    producer.flush(30)
    producer.close()
    out.write_text(
        json.dumps(
            {
                "producer_id": producer.producer_id,
                "last_sequence": producer.last_sequence,
                "delivered": len(delivered_at),
                "delivered_at": delivered_at,
                "failed": failed,
                "windows": windows,
            }
        )
    )


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
