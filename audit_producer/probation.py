"""Probation of a newly applied producer configuration: does the cluster accept it.

A configuration librdkafka accepts and that reaches the cluster can still be refused by the brokers
(an ``acks`` value or a feature the broker does not support, a policy, a missing ACL for idempotent
writes). Its messages then fail with a broker-side rejection. While on probation, a new inner producer
fails when ``reports`` of its delivery reports are such rejections before any of its messages has
been delivered; the autotuned producer then rolls back to the previous configuration (docs/DESIGN.md,
"Autotuned producer"). Failures that say nothing about the configuration (message timeouts, a broker
down, a full partition) never fail it: the network is not the configuration's fault.
"""

from __future__ import annotations

from typing import Any, Literal

from confluent_kafka import KafkaError

REJECTION_CODES: frozenset[int] = frozenset(
    {
        KafkaError.INVALID_REQUIRED_ACKS,
        KafkaError.INVALID_CONFIG,
        KafkaError.UNSUPPORTED_VERSION,
        KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        KafkaError.UNSUPPORTED_COMPRESSION_TYPE,
        KafkaError.POLICY_VIOLATION,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError._UNSUPPORTED_FEATURE,
        KafkaError._INVALID_ARG,
        KafkaError._FATAL,
    }
)
"""Delivery-report error codes that mean the configuration itself is refused (Kafka protocol errors
and librdkafka's local ``_UNSUPPORTED_FEATURE``, ``_INVALID_ARG``, ``_FATAL``)."""

Verdict = Literal["pass", "fail"]


def is_rejection(err: Any) -> bool:
    """Return True if a delivery-report error (``confluent_kafka.KafkaError``) refuses the configuration."""
    try:
        return bool(err.fatal()) or err.code() in REJECTION_CODES
    except AttributeError:  # not a KafkaError
        return False


class Probation:
    """The first deliveries of the inner producer that took over at sequence number ``first_sequence``.

    Args:
        first_sequence: First sequence number produced with the new configuration.
        reports: Rejections (with nothing delivered) that fail the configuration, messages.
        deadline_ms: Without a verdict by then the configuration passes, ms since the epoch UTC.
    """

    def __init__(self, first_sequence: int, reports: int, deadline_ms: int) -> None:
        self.first_sequence = first_sequence
        self.reports = reports
        self.deadline_ms = deadline_ms
        self.failed = 0
        self.rejected = 0
        self.last_rejection: str | None = None

    def on_failure(self, sequence: int | None, err: Any) -> None:
        """Count a failed delivery report of sequence number ``sequence`` (None: unknown, ignored)."""
        if sequence is None or sequence < self.first_sequence:
            return  # a message of the replaced producer
        self.failed += 1
        if is_rejection(err):
            self.rejected += 1
            self.last_rejection = err.str() if hasattr(err, "str") else str(err)

    def verdict(self, handed: int, held: int, now_ms: int) -> Verdict | None:
        """Judge the configuration so far; None while undecided.

        Args:
            handed: Messages handed to the new inner producer.
            held: Messages it still holds (``len(producer)``: queued, in flight, or reports unserved).
            now_ms: Now, ms since the epoch UTC.

        Returns:
            ``pass`` once one message is delivered (``handed - held - failed`` > 0), after ``reports``
            failures that are not rejections, or at the deadline; ``fail`` after ``reports``
            rejections with nothing delivered.
        """
        if handed - held - self.failed > 0:
            return "pass"
        if self.rejected >= self.reports:
            return "fail"
        if self.failed - self.rejected >= self.reports or now_ms >= self.deadline_ms:
            return "pass"
        return None


__all__ = ["REJECTION_CODES", "Probation", "Verdict", "is_rejection"]
