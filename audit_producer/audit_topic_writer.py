"""The audited producer's side of the audit topic: check the topic once, then send snapshots to it.

Snapshots go through an internal producer with ``acks=all`` and idempotence, so the audit trail does
not inherit an unreliable data configuration (``acks=0``) under test. Before the first snapshot the
audit topic is checked (created if missing): synchronously by :meth:`AuditTopicWriter.check`, or in a
background thread started by :meth:`AuditTopicWriter.start_check`, whose error is handed to the
caller's thread (:meth:`AuditTopicWriter.raise_check_error`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from audit_record import AuditRecord, encode, now_ms
from kafka_plumbing.clients import close_producer
from kafka_plumbing.topics import AUDIT_TOPIC_CONFIG, ensure_topic

log = logging.getLogger(__name__)

CHECK_RETRY_MS = 5_000
"""After a failed background check, start the next one this much later, ms."""


def close_client(producer: Any) -> None:
    """Close a librdkafka producer; purge first what the flushes before left (close() flushes forever).

    Args:
        producer: A ``confluent_kafka.Producer`` (or one with its ``purge``, ``poll``, ``close``).
    """
    close_producer(producer)


class AuditTopicWriter:
    """The audit topic of one audited producer: its check and the internal producer of its snapshots.

    Constructing it does no network I/O. Thread-safe as far as the check goes (:meth:`check` may run
    in the background thread and on the caller's at once); :meth:`send` belongs to the caller's thread.

    Args:
        conn: Connection config of the cluster (``bootstrap.servers`` and security), copied.
        client_id: ``client.id`` of the audited producer; the internal one is ``<client_id>.audit``.
        topic: Name of the audit topic.

    Attributes:
        producer: The internal producer (``acks=all``, idempotent); the autotune follower also sends
            its dead letters through it.
        checked: Whether the check has succeeded (no snapshot is sent before).
        check_error: The error of the last failed background check, not yet raised on the caller's thread.
        check_thread: The background check's thread, None before the first.
        snapshots_sent: Snapshots handed to the internal producer so far.
        delivery_failures: Snapshots whose delivery failed so far (the next snapshot of the window heals it).
    """

    def __init__(self, conn: Mapping[str, Any], client_id: str, topic: str) -> None:
        self.topic = topic
        self._conn = dict(conn)
        self._client_id = client_id
        self.producer: Any = Producer(
            {
                **self._conn,
                "client.id": f"{client_id}.audit",
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 20,
                "message.timeout.ms": 120_000,
            }
        )
        self.checked = False
        self.check_error: BaseException | None = None
        self.check_thread: threading.Thread | None = None
        self._check_lock = threading.Lock()
        self._retry_at_ms = 0
        self.snapshots_sent = 0
        self.delivery_failures = 0

    # ------------------------------------------------------------------ the check
    def check(self, timeout_s: float = 30.0) -> None:
        """Check the cluster and the audit topic now: create the topic if missing (network I/O).

        Idempotent: once it has succeeded it returns at once. If a background check runs, this waits
        for it.

        Args:
            timeout_s: Deadline of each admin request, s.

        Raises:
            KafkaAuthenticationError: if the broker rejects the SASL credentials.
            KafkaTlsError: if the TLS handshake fails (certificate not trusted).
            KafkaConnectionError: if no broker answers within ``timeout_s``.
            TopicError: if the audit topic is missing and cannot be created.
        """
        with self._check_lock:
            if self.checked:
                return
            ensure_topic(
                self._conn, self.topic, partitions=3, topic_config=AUDIT_TOPIC_CONFIG, timeout_s=timeout_s
            )
            self.checked = True
            self.check_error = None

    def start_check(self, now: int, run: Callable[[], None]) -> None:
        """Start ``run`` in a background thread unless a check runs, failed unreported, or failed lately.

        Args:
            now: The caller's clock, ms since the epoch UTC.
            run: The check to run (the audited producer's, which also starts what else it needs).
        """
        running = self.check_thread is not None and self.check_thread.is_alive()
        if running or self.check_error is not None or now < self._retry_at_ms:
            return
        self.check_thread = threading.Thread(
            target=self._background_check,
            args=(run,),
            name=f"{self._client_id}.audit-topic-check",
            daemon=True,
        )
        self.check_thread.start()

    def _background_check(self, run: Callable[[], None]) -> None:
        try:
            run()
        except Exception as exc:  # handed to the caller's thread by raise_check_error
            self._retry_at_ms = now_ms() + CHECK_RETRY_MS
            self.check_error = exc
            log.warning("audit topic %r not ready: %s", self.topic, exc)

    def join_check(self, timeout_s: float | None) -> None:
        """Wait for the background check, if one was started, at most ``timeout_s`` s (None: no limit)."""
        if self.check_thread is not None:
            self.check_thread.join(timeout_s)

    def raise_check_error(self) -> None:
        """Raise the error of the last failed background check, once (the check is tried again later).

        Raises:
            KafkaAuditError: that error, if there is one not raised yet.
        """
        exc, self.check_error = self.check_error, None
        if exc is not None:
            raise exc

    # ------------------------------------------------------------------ snapshots
    def send(self, record: AuditRecord) -> None:
        """Hand one snapshot to the internal producer (asynchronous; its failure is logged and counted)."""
        self.producer.produce(
            self.topic,
            encode(record),
            record.key().encode(),
            timestamp=record.emitted_at_ms,
            on_delivery=self._on_delivery,
        )
        self.snapshots_sent += 1

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.delivery_failures += 1
            log.warning(
                "audit snapshot for %s not delivered: %s (the next snapshot heals it)", msg.key(), err
            )

    def poll(self) -> None:
        """Serve the internal producer's delivery reports without waiting."""
        self.producer.poll(0)

    def flush(self, timeout_s: float) -> None:
        """Wait at most ``timeout_s`` s for the snapshots handed over to be delivered."""
        self.producer.flush(timeout_s)

    def close(self) -> None:
        """Close the internal producer; what it still holds is purged first."""
        close_client(self.producer)


__all__ = ["CHECK_RETRY_MS", "AuditTopicWriter", "close_client"]
