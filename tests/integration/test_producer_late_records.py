"""Python ``AuditedProducer``: a message whose CreateTime lies in a window the producer has already closed.

Applications forward timestamps they did not make (a copy keeps its source's CreateTime, a catch-up
replays old windows). Once a window's final snapshot is out the producer forgets the window; a later
message of it must continue the window's counts, never start them again from zero under the same snapshot
key (``producer|<client.id>|<id>|<topic>|-1|<start>``): the newest snapshot per key is the one the
verifier and the Spark job read, so a restart from zero would turn the window's ``sent`` into the late
messages alone. The JVM interceptors and the librdkafka plugin keep closed windows for an hour for this
(``test_jvm_late_records``, ``test_rdkafka_plugin``); so does the Python producer.
"""

from __future__ import annotations

import time

import pytest

from audit_consumer.ground_truth import verify_topic
from audit_producer import AuditedProducer, ProducerAuditSettings
from audit_record import PRODUCER_TIER, AuditRecord
from audit_record.reader import read_audit_log

from .helpers import wait_for

pytestmark = pytest.mark.integration
WINDOW_MS = 5_000


@pytest.mark.parametrize(
    ("delivery_reports", "counting"), [("all", "python"), ("errors", "python"), ("all", "plugin")]
)
def test_a_late_message_continues_its_closed_windows_counts(
    kconfig: dict[str, str], topic: str, audit_topics: dict[str, str], delivery_reports: str, counting: str
) -> None:
    audit_topic = audit_topics["audit_topic"]
    audit = ProducerAuditSettings(
        window_ms=WINDOW_MS,
        grace_ms=500,
        snapshot_interval_ms=200,
        delivery_reports=delivery_reports,
        counting=counting,
        audit_topic=audit_topic,
    )
    producer = AuditedProducer({**kconfig, "client.id": "late-py", "message.timeout.ms": 2_000}, audit)
    old = int(time.time() * 1000) - 60_000  # a window long over: it closes once its messages are settled
    start = old - old % WINDOW_MS

    def window_final() -> AuditRecord | None:
        log = read_audit_log(kconfig, audit_topic)
        mine = [s for s in log.tier(PRODUCER_TIER) if s.topic == topic and s.window_start_ms == start]
        return mine[0] if len(mine) == 1 and mine[0].final else None

    try:
        for i in range(100):
            producer.produce(topic, f"first {i}".encode(), timestamp=old)
        assert producer.flush(30) == 0
        # the producer's ticks run in its produce() and poll() calls
        first = wait_for(lambda: producer.poll(0.05) >= 0 and window_final(), 60, "its first final snapshot")
        assert first.sent == 100
        for i in range(20):
            producer.produce(topic, f"late {i}".encode(), timestamp=old + 1)
        assert producer.flush(30) == 0
    finally:
        producer.close(timeout_s=30)
    again = window_final()
    assert again is not None and again.record_id != first.record_id
    assert (again.sent, again.acknowledged, again.failed) == (120, 120, 0)
    assert again.first_sequence == first.first_sequence and again.last_sequence == 120
    [row] = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topic).rows.values()
    assert (row.sent, row.unique) == (120, 120)
