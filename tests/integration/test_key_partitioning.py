"""Where librdkafka puts a keyed record: the shared vectors (``audit_record/partition_vectors.json``).

Python writers of the audit, state and dead-letter topics (``AuditedConsumer``, the cluster tier, the audited
producers) place keys with librdkafka's default partitioner; the JVM interceptors' own producer uses
``ConsistentRandomPartitioner``, checked against the same vectors by JUnit. A key written by both kinds of
client is then in one partition, where a reader's "newest record of the key" is the log's order.
"""

from __future__ import annotations

import json
import zlib
from collections import defaultdict
from collections.abc import Callable
from importlib import resources

import pytest
from confluent_kafka import Message, Producer

from kafka_plumbing.topics import ensure_topic
from tests.conftest import unique_name

VECTORS = json.loads(resources.files("audit_record").joinpath("partition_vectors.json").read_text("utf-8"))


def test_the_vectors_are_crc32_of_the_key_mod_partitions() -> None:
    vectors = VECTORS["vectors"]
    assert len(vectors) >= 50 and {v["partitions"] for v in vectors} >= {1, 3, 12}
    for v in vectors:
        assert v["partition"] == zlib.crc32(bytes.fromhex(v["key_hex"])) % v["partitions"], v


def test_librdkafka_places_every_vector_key_in_its_partition(
    request: pytest.FixtureRequest, kconfig: dict[str, str]
) -> None:
    by_count: dict[int, list[dict]] = defaultdict(list)
    for v in VECTORS["vectors"]:
        by_count[v["partitions"]].append(v)
    producer = Producer(dict(kconfig))  # the default partitioner, as every Python writer of the audit
    delivered: dict[tuple[str, int], int] = {}
    errors: list[object] = []

    def on_delivery(key: tuple[str, int]) -> Callable[[object, Message], None]:
        def done(err: object, msg: Message) -> None:
            if err is not None:
                errors.append(err)
            delivered[key] = msg.partition()

        return done

    expected: dict[tuple[str, int], int] = {}
    for n, vectors in by_count.items():
        topic = unique_name(request, f".p{n}")
        ensure_topic(kconfig, topic, n)
        producer.list_topics(topic, timeout=30)  # the partition count is known before the first produce
        for i, v in enumerate(vectors):
            producer.produce(topic, b"v", bytes.fromhex(v["key_hex"]), on_delivery=on_delivery((topic, i)))
            expected[(topic, i)] = v["partition"]
    assert producer.flush(30) == 0 and not errors
    assert delivered == expected
