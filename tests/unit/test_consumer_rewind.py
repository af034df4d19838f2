"""The audit consumer's rewind after a failed transaction: reading the committed offsets."""

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from audit_consumer.transaction_recovery import AuditConsumerError, committed_offsets


class _SlowCoordinator:
    """A consumer whose OffsetFetch times out ``timeouts`` times, then answers (or fails otherwise)."""

    def __init__(self, timeouts: int, then: KafkaError | None = None) -> None:
        self.timeouts, self.then, self.calls = timeouts, then, 0

    def committed(self, partitions, timeout):
        self.calls += 1
        if self.calls <= self.timeouts:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get committed offsets"))
        if self.then is not None:
            raise KafkaException(self.then)
        return [TopicPartition(p.topic, p.partition, 42) for p in partitions]


def test_committed_offsets_retries_a_slow_coordinator_until_its_deadline():
    parts = [TopicPartition("t", 0), TopicPartition("t", 1)]
    slow = _SlowCoordinator(timeouts=2)
    assert [(p.partition, p.offset) for p in committed_offsets(slow, parts, timeout_s=60)] == [
        (0, 42),
        (1, 42),
    ]
    assert slow.calls == 3
    with pytest.raises(AuditConsumerError, match="committed offsets"):
        committed_offsets(_SlowCoordinator(timeouts=10**6), parts, timeout_s=0)  # deadline passed
    other = _SlowCoordinator(timeouts=0, then=KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))
    with pytest.raises(AuditConsumerError):
        committed_offsets(other, parts, timeout_s=60)
    assert other.calls == 1  # not retried
