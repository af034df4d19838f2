"""Errors of the alerts package."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kafka_plumbing.errors import KafkaAuditError

if TYPE_CHECKING:
    from alerts.event import AlertEvent


class AlertSinkError(KafkaAuditError):
    """A sink could not deliver some events; the dispatcher keeps ``failed`` and retries them next time.

    Args:
        sink: Sink name (``kafka``, ``alertmanager``, ``webhook``).
        message: What went wrong (URL, HTTP status, Kafka error), never a secret.
        failed: The events not delivered (empty: none known yet, e.g. a keep-alive re-post failed).
    """

    def __init__(self, sink: str, message: str, failed: Sequence[AlertEvent] = ()) -> None:
        super().__init__(f"alert sink {sink}: {message}")
        self.sink = sink
        self.failed = list(failed)
