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


def _audit_consumer():
    from audit_consumer.consumer import AuditConsumer
    from audit_consumer.settings import AuditConsumerSettings

    settings = AuditConsumerSettings(
        bootstrap_servers="127.0.0.1:9",
        topics=["t"],
        instance_id="rewind",
        window_ms=1_000,
        grace_ms=500,
        max_final_wait_ms=0,
    )
    return AuditConsumer(settings)


class _Input:
    """The input consumer's calls the rewind and the end check make: one partition, end offset ``end``."""

    def __init__(self, end: int | KafkaException) -> None:
        self.end, self.asked, self.sought = end, 0, []

    def assignment(self):
        return [TopicPartition("t", 0)]

    def committed(self, partitions, timeout):
        return [TopicPartition(p.topic, p.partition, 40) for p in partitions]

    def seek(self, tp):
        self.sought.append((tp.topic, tp.partition, tp.offset))

    def offsets_for_times(self, partitions, timeout):
        self.asked += 1
        if isinstance(self.end, KafkaException):
            raise self.end
        return [TopicPartition(p.topic, p.partition, self.end) for p in partitions]


def _with_input(end):
    c = _audit_consumer()
    real = c._consumer
    c._consumer = _Input(end)
    return c, real


def test_a_rewind_leaves_no_partition_at_its_end(monkeypatch):
    """A rewind seeks back to the committed offset: the EOF of the position it gave up no longer holds,
    so the wall clock must not close the partition's windows until the messages are read again."""
    c, real = _with_input(100)
    monkeypatch.setattr(c, "_load_states", lambda keys: {})
    c._at_end[("t", 0)] = 100
    c._rewind()
    assert c._consumer.sought == [("t", 0, 40)]
    assert ("t", 0) not in c._at_end
    real.close()
    c._producer.close()


def _state_at(next_offset: int):
    from audit_consumer.counts import PartitionCounts

    st = PartitionCounts("t", 0, 1_000, 500)
    st.next_offset = next_offset
    return st


def test_a_rewind_resumes_where_the_loaded_state_ends_not_at_a_later_committed_offset(monkeypatch):
    """The 5-minute soak: the state topic, read read_committed, stops at an open transaction's first offset,
    so the newest state found (next_offset 12) can be older than the committed offsets (40). Seeking to 40
    with it lost messages 12-39 (a window counted 111 of 338); from 12 they are counted again, once."""
    c, real = _with_input(100)
    monkeypatch.setattr(c, "_load_states", lambda keys: {("t", 0): _state_at(12)})
    c._rewind()
    assert c._consumer.sought == [("t", 0, 12)]
    assert c._parts[("t", 0)].next_offset == 12
    real.close()
    c._producer.close()


class _Assignee:
    """The input consumer as the assignment callback sees it: records what it is assigned."""

    def __init__(self) -> None:
        self.assigned: list[tuple[str, int, int]] = []

    def assign(self, partitions):
        self.assigned = [(p.topic, p.partition, p.offset) for p in partitions]


def test_an_assignment_reads_from_each_states_end_and_elsewhere_from_the_committed_offset(monkeypatch):
    from confluent_kafka import OFFSET_STORED

    c = _audit_consumer()
    monkeypatch.setattr(c, "_load_states", lambda keys: {("t", 0): _state_at(12)})
    assignee = _Assignee()
    c._on_assign(assignee, [TopicPartition("t", 0), TopicPartition("t", 1)])
    assert assignee.assigned == [("t", 0, 12), ("t", 1, OFFSET_STORED)]
    assert c._parts[("t", 1)].next_offset == -1  # a partition without a state starts with no counts
    c._consumer.close()
    c._producer.close()


def test_a_rewind_whose_committed_offsets_cannot_be_read_replaces_the_input_consumer(monkeypatch):
    """The 5-minute soak: a rewind after a hung transaction met NOT_COORDINATOR (the coordinator's broker
    killed, the consumer fenced as a static member) and the instance exited. Now the input consumer counts
    as failed: the counts are dropped and the poll loop replaces it (its assignment loads the state)."""
    from audit_consumer.counts import PartitionCounts

    c, real = _with_input(100)
    not_coordinator = KafkaError(KafkaError.NOT_COORDINATOR, "Failed to get committed offsets")

    def fails(partitions, timeout):
        raise KafkaException(not_coordinator)

    c._consumer.committed = fails
    monkeypatch.setattr(c, "_load_states", lambda keys: {})
    c._parts[("t", 0)] = PartitionCounts("t", 0, 1_000, 500)
    c._at_end[("t", 0)] = 100
    c._rewind()  # no AuditConsumerError
    assert c._consumer_failed is not None and c._consumer_failed.code() == KafkaError.NOT_COORDINATOR
    assert c._parts == {} and c._at_end == {} and c._consumer.sought == []
    real.close()
    c._producer.close()


def test_the_wall_clock_closes_windows_only_where_the_partitions_end_is_confirmed():
    """The 5-minute soak's short window: the consumer's fetch from a leader cut off hung without an event,
    so the partition stayed "at its end" while messages were appended, and the wall clock closed them."""
    from audit_consumer.counts import PartitionCounts

    key = ("t", 0)
    for end, caught_up in (
        (100, True),
        (130, False),
        (KafkaException(KafkaError(KafkaError._TIMED_OUT)), False),
    ):
        c, real = _with_input(end)
        st = c._parts[key] = PartitionCounts("t", 0, 1_000, 500)
        st.observe(1_100, b"p", 1, 1, 0)
        c._at_end[key] = 100  # its last EOF: offset 100
        assert (key in c._caught_up(2_600)) is caught_up, end  # the wall clock would close window 1000
        assert c._consumer.asked == 1
        st.advance(2_600 if caught_up else None, 60_000)
        real.close()
        c._producer.close()
    c, real = _with_input(130)
    c._parts[key] = PartitionCounts("t", 0, 1_000, 500)
    c._parts[key].observe(1_100, b"p", 1, 1, 0)
    c._parts[key].advance(1_200, 60_000)  # the horizon is set: window 1000 open
    c._at_end[key] = 100
    assert c._caught_up(1_400) == set() and c._consumer.asked == 0  # nothing to close: nothing asked
    real.close()
    c._producer.close()
