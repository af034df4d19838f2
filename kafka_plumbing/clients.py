"""Closing librdkafka clients so that none outlives the cluster it talks to.

A ``confluent_kafka`` client that is flushed but never closed keeps its broker threads until it is
garbage collected: when its brokers stop first, librdkafka prints ``%3|...|FAIL|... Connection refused``
to stderr about once a second until the process ends. :func:`close_producer` flushes with a deadline,
purges what is left (``Producer.close`` would otherwise wait for it without one) and destroys the client.
"""

from __future__ import annotations

from typing import Any


def close_producer(producer: Any, flush_timeout_s: float = 0.0) -> int:
    """Flush ``producer`` for up to ``flush_timeout_s``, purge what is left, then close it.

    Args:
        producer: A ``confluent_kafka.Producer`` (or an object with its ``flush``, ``purge``, ``poll``
            and ``close``; a test double without ``purge`` or ``close`` is only flushed).
        flush_timeout_s: Deadline of the flush, seconds (0: no flush, only purge and close).

    Returns:
        How many messages were still queued or in flight after the flush (purged, never delivered).

    Raises:
        KafkaException: from ``close`` (e.g. a fatal producer); the client is destroyed all the same
            when it is garbage collected.
    """
    remaining = producer.flush(flush_timeout_s) if flush_timeout_s > 0 else len(producer)
    if remaining and hasattr(producer, "purge"):
        producer.purge(in_queue=True, in_flight=True, blocking=False)
        producer.poll(0)
    if hasattr(producer, "close"):
        producer.close()
    return int(remaining)


__all__ = ["close_producer"]
