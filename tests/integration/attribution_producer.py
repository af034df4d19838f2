"""The audited producer of ``test_attribution.py``, run as its own process (``python -m``).

The test runs it with its own group id, so an iptables rule matching that group (``-m owner
--gid-owner``) cuts this process, and only it, off from one broker. It produces ``rate`` messages/s for
``duration_s`` with ``acks=1`` and a short ``message.timeout.ms``; message ``seq`` (the producer's
sequence number) goes to partition ``seq % partitions`` with key ``seq``, so a missing sequence number
says which partition it was meant for. Its own delivery callback records every failed report
(sequence, partition, librdkafka error name), independently of the audit's counting. At the start it
writes ``<out>.started``; at the end ``<out>`` (JSON): ``producer_id``, ``last_sequence``,
``delivered``, ``failed`` ([[seq, partition, error], ...]) and ``windows`` ({window start: [first seq,
last seq]}).

Usage: ``python -m tests.integration.attribution_producer '<json arguments>'`` with ``bootstrap``,
``topic``, ``partitions``, ``audit_topic``, ``window_ms``, ``rate``, ``duration_s``,
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
    delivered = 0

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            failed.append([int(msg.key()), msg.partition(), err.name()])

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
    start = time.monotonic()
    Path(f"{out}.started").write_text(str(time.time()))
    n = 0
    while (elapsed := time.monotonic() - start) < float(args["duration_s"]):
        if n >= elapsed * rate:
            producer.poll(0.005)
            continue
        seq = producer.last_sequence + 1
        now_ms = time.time_ns() // 1_000_000
        try:
            producer.produce(args["topic"], b"x" * 100, str(seq).encode(), seq % partitions, timestamp=now_ms)
        except BufferError:
            producer.poll(0.05)
            continue
        assert producer.last_sequence == seq
        window = windows.setdefault(now_ms - now_ms % window_ms, [seq, seq])
        window[1] = seq
        n += 1
        producer.poll(0)
    producer.flush(30)
    producer.close()
    out.write_text(
        json.dumps(
            {
                "producer_id": producer.producer_id,
                "last_sequence": producer.last_sequence,
                "delivered": delivered,
                "failed": failed,
                "windows": windows,
            }
        )
    )


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
