"""Records whose CreateTime lies in a window the producer interceptor has already closed.

Frameworks forward timestamps they did not make: Kafka Streams gives an output record its input's
timestamp, a Connect source connector the source's (MirrorSourceConnector the copied record's), a catch-up
copies hours of old windows. A plain Java producer (``java/PlainProducer.java``) sends 100 records with one
old CreateTime (a window that ended a minute ago), waits until the interceptor has sent that window's final
snapshot (every record acknowledged, end + grace long past), then sends 100 more with the same CreateTime.

The window's producer snapshot must then say 200 sent, not 100: a window removed once its final snapshot
was acknowledged would start again from zero under the same snapshot key
(``producer|<client.id>|<id>|<topic>|-1|<start>``), and that new final would replace the first one in the
audit log (newest per key), so the verifier and the job would take 100 for ``sent`` while the topic holds
200. ``ProducerAuditor`` keeps a closed window's counts for its late records.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from audit_consumer.ground_truth import verify_topic
from audit_record import PRODUCER_TIER, codec
from audit_record.reader import read_audit_log
from kafka_plumbing.interceptor_jar import PRODUCER_INTERCEPTOR
from kafka_plumbing.topics import read_to_end

from .helpers import wait_for
from .jvm_clients import compile_plain_producer, last_json_line, plain_producer

pytestmark = [pytest.mark.integration]
WINDOW_MS = 5_000


def test_a_closed_windows_late_records_add_to_its_sent(kconfig, bootstrap, topic, audit_topics, tmp_path):
    old = (int(time.time() * 1000) // WINDOW_MS - 12) * WINDOW_MS + 1_000  # a window that ended ~55 s ago
    props = {
        "bootstrap.servers": bootstrap,
        "client.id": "late-app",
        "interceptor.classes": PRODUCER_INTERCEPTOR,
        "kafka.audit.topic": audit_topics["audit_topic"],
        "kafka.audit.window.ms": str(WINDOW_MS),
        "kafka.audit.grace.ms": "1000",
        "kafka.audit.snapshot.interval.ms": "500",
        "app.timestamp.ms": str(old),
        "app.pause.after": "100",
        "app.pause.ms": "4000",  # the interceptor closes the window meanwhile (its timer runs every 500 ms)
    }
    classes = compile_plain_producer(tmp_path / "classes")
    done = subprocess.run(
        plain_producer(classes, topic, 200, 1000.0, WINDOW_MS, props),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = last_json_line(done.stdout)
    assert result["acknowledged"] == 200 and result["windows"] == {str(old - old % WINDOW_MS): 200}

    def final() -> list:
        log = read_audit_log(kconfig, audit_topics["audit_topic"])
        snaps = [r for r in log.tier(PRODUCER_TIER) if r.topic == topic]
        return snaps if snaps and all(r.final for r in snaps) else []

    wait_for(final, 30, "the producer's final snapshot")
    v = verify_topic(kconfig, topic, WINDOW_MS, audit_topic=audit_topics["audit_topic"])
    [(_key, row)] = v.rows.items()
    assert row.unique == 200
    assert row.sent == 200, f"the window's snapshot says {row.sent} sent; the topic holds {row.unique}"
    # The scenario happened: a final snapshot of the first 100 before the late 100 (every snapshot, in order).
    messages = read_to_end(kconfig, audit_topics["audit_topic"], group_id="all")
    every = [codec.decode(m.value()) for m in messages]
    finals = [r.sent for r in every if r.tier == PRODUCER_TIER and r.topic == topic and r.final]
    assert finals[0] == 100 and finals[-1] == 200, finals
