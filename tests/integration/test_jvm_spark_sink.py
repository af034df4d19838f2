"""Issue 38 acceptance: Spark Structured Streaming's Kafka sink audited by ``kafka.interceptor.classes``.

A streaming query (real Spark, ``local[2]``, the project's session settings) reads N plain records from a
topic and writes them with Spark's own Kafka sink (``spark-sql-kafka-0-10``, which brings kafka-clients
3.9, not the 4.3 the interceptors are built against) into a second topic; the only audit setting is the
sink's ``kafka.interceptor.classes`` (plus the audit topic and window, ``kafka.kafka.audit.*``) and the
interceptors' jar added to the session. The copy's producer tier must be exact against the verifier and
against N (counted without the interceptor: the query's input), every record stamped, and the audit
consumer's cluster tier equal to the verifier.

kafka-clients before 4.0 call only ``onAcknowledgement(RecordMetadata, Exception)``, which carries no
headers, so no stamp to find a record's window by: the interceptor puts a success in the window of its
timestamp (the CreateTime it set) and a failure in the topic's oldest window still waiting. Every window
must still be accounted for, every record acknowledged.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from audit_consumer.ground_truth import verify_topic
from audit_record import PRODUCER_TIER
from audit_record.reader import read_audit_log
from kafka_audit.verification_report import compare_with_cluster
from kafka_plumbing.interceptor_jar import PRODUCER_INTERCEPTOR, interceptor_jar
from kafka_plumbing.topics import ensure_topic
from spark_streaming.job import spark_session

from .helpers import CLUSTER, consumer_settings, running_consumer, wait_for_final_windows

pytestmark = [pytest.mark.integration, pytest.mark.slow]
WINDOW_MS = 5_000
RECORDS = 5_000
DELIVERY_TIMEOUT_MS = 8_000  # a short delivery bound: >= linger.ms + request.timeout.ms (Kafka's rule)


@pytest.fixture(scope="module")
def copied(request: pytest.FixtureRequest, kafka_cluster, tmp_path_factory) -> Iterator[dict[str, str]]:
    """Run the query once for the module; yield the topic names and the bootstrap."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    bootstrap = kafka_cluster.bootstrap_servers
    kconfig = {"bootstrap.servers": bootstrap}
    suffix = os.urandom(4).hex()
    source, copy = f"pytest_spark_sink_src_{suffix}", f"pytest_spark_sink_copy_{suffix}"
    audit = {
        "audit_topic": f"{copy}.audit",
        "state_topic": f"{copy}.state",
        "dlq_topic": f"{copy}.dlq",
    }
    ensure_topic(kconfig, source, partitions=3)
    ensure_topic(kconfig, copy, partitions=3)
    p = Producer({**kconfig, "linger.ms": 5})
    for i in range(RECORDS):
        p.produce(source, f"record {i}".encode(), partition=i % 3)
    assert p.flush(30) == 0

    spark = spark_session("local[2]", 2, app_name="kafka-audit-spark-sink")
    spark.sql(f"ADD JAR '{interceptor_jar()}'")  # tasks load interceptor.classes from the added jars
    checkpoint = tmp_path_factory.mktemp("spark-sink") / "checkpoint"
    with running_consumer(consumer_settings(bootstrap, [copy], audit)):
        query = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("key", "value")
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", copy)
            .option("kafka.interceptor.classes", PRODUCER_INTERCEPTOR)
            .option("kafka.kafka.audit.topic", audit["audit_topic"])
            .option("kafka.kafka.audit.window.ms", str(WINDOW_MS))
            .option("kafka.kafka.audit.grace.ms", "1000")
            .option("kafka.kafka.audit.snapshot.interval.ms", "1000")
            .option("kafka.kafka.audit.delivery.margin.ms", "1000")
            .option("kafka.request.timeout.ms", "5000")
            .option("kafka.delivery.timeout.ms", str(DELIVERY_TIMEOUT_MS))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        wait_for_final_windows(kconfig, copy, audit["audit_topic"], 90)
    yield {"bootstrap": bootstrap, "copy": copy, **audit}


def test_spark_kafka_sink_exact_against_verifier(copied):
    kconfig = {"bootstrap.servers": copied["bootstrap"]}
    v = verify_topic(kconfig, copied["copy"], WINDOW_MS, audit_topic=copied["audit_topic"])
    assert v.rows and all(pid is not None for _, pid in v.rows), "unaudited records in the copy"
    for (start, _pid), row in v.rows.items():
        assert row.final, f"window {start}: no final producer snapshot"
        assert row.sent == row.unique == row.received, (start, row)
    assert sum(r.sent for r in v.rows.values()) == RECORDS  # the query's input, not the interceptor's count
    assert compare_with_cluster(v, CLUSTER) == []
    snaps = [r for r in read_audit_log(kconfig, copied["audit_topic"]).tier(PRODUCER_TIER)]
    assert snaps and all(r.failed == 0 for r in snaps)
    assert all(
        r.producer_identity is not None and r.producer_identity.library == "kafka-audit-java" for r in snaps
    )


def test_spark_kafka_sink_acknowledgements_counted_on_kafka_clients_3(copied):
    kconfig = {"bootstrap.servers": copied["bootstrap"]}
    snaps = list(read_audit_log(kconfig, copied["audit_topic"]).tier(PRODUCER_TIER))
    assert snaps and all(r.final and r.acknowledged == r.sent and r.accounted for r in snaps), snaps
    assert sum(r.acknowledged for r in snaps) == RECORDS
