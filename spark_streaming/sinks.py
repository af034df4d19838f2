"""Exactly-once sinks for the reconciliation job, called from ``foreachBatch``.

Spark's own Kafka sink is at-least-once, so the job writes its micro-batch output itself:

* **Kafka**: results (Avro WindowResult, keyed ``topic|window|tier``) and dead letters go in one
  transaction together with a marker ``query name -> batch id`` in a compacted commits topic. A batch
  whose id is not above the last committed marker (a batch Spark re-runs after a crash) is skipped.
* **Parquet**: one file per (batch id, date), written to a temporary name and renamed, so a re-run
  batch overwrites its own file with the same rows. Partitioned by ``date=YYYY-MM-DD`` (window start, UTC).
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import KafkaError, KafkaException, Producer

from audit_record import window_result
from audit_record.codec import encode_object
from audit_record.dead_letter import DeadLetter
from kafka_plumbing.errors import KafkaAuditError
from kafka_plumbing.topics import AUDIT_TOPIC_CONFIG, STATE_TOPIC_CONFIG, ensure_topic, read_to_end

COMPONENT = "spark"
log = logging.getLogger(__name__)
_ARROW_TYPES = {
    "string": pa.string(),
    "long": pa.int64(),
    "int": pa.int32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
}
_PARTITION_TYPE = pa.list_(
    pa.struct(
        [
            ("partition", pa.int32()),
            ("leader", pa.int32()),
            ("leaders", pa.list_(pa.int32())),
            ("sent", pa.int64()),
            ("acknowledged", pa.int64()),
            ("failed", pa.int64()),
            ("failed_by_error", pa.map_(pa.string(), pa.int64())),
            ("unique", pa.int64()),
            ("duplicated", pa.int64()),
            ("lost", pa.int64()),
        ]
    )
)
"""Arrow type of ``partitions`` (``PartitionResult`` of ``window_result.avsc``; a map stays a map)."""
if tuple(_PARTITION_TYPE.value_type.names) != window_result.PARTITION_FIELDS:  # pragma: no cover
    raise ImportError("the Parquet type of 'partitions' must follow window_result.avsc's PartitionResult")
_STRUCTURE_TYPES = {"partitions": _PARTITION_TYPE, "freshness_counts": pa.list_(pa.int64())}
"""Arrow type of each of ``window_result.STRUCTURED_FIELDS``."""
PARQUET_SCHEMA = pa.schema(
    [
        (n, _STRUCTURE_TYPES[n] if n in window_result.STRUCTURED_FIELDS else _ARROW_TYPES[t])
        for n, t in window_result.SPARK_TYPES.items()
    ]
)
"""Arrow schema of the Parquet results: every window-result field, nullable; ``partitions`` and
``freshness_counts`` as structure."""


class SinkError(KafkaAuditError):
    """A sink could not write a micro-batch (the batch fails and Spark retries it)."""


class KafkaResultSink:
    """Transactional writer of results and dead letters, idempotent per micro-batch id.

    Args:
        config: librdkafka connection config.
        results_topic, dlq_topic, commits_topic: Topics (created if missing; results and commits compacted).
        query_name: Names the ``transactional.id`` and the marker key.
        retry_s: How long a failing transaction is retried (broker outage) before the batch fails, s.
    """

    def __init__(
        self,
        config: dict[str, Any],
        results_topic: str,
        dlq_topic: str,
        commits_topic: str,
        query_name: str,
        retry_s: float = 120.0,
    ) -> None:
        self.config = config
        self.results_topic, self.dlq_topic, self.commits_topic = results_topic, dlq_topic, commits_topic
        self.query_name = query_name
        self.retry_s = retry_s
        ensure_topic(config, results_topic, 3, topic_config=AUDIT_TOPIC_CONFIG)
        ensure_topic(config, commits_topic, 1, topic_config=STATE_TOPIC_CONFIG)
        ensure_topic(config, dlq_topic, 1)
        self._producer_config: dict[str, Any] = {
            **config,
            "transactional.id": f"kafka-audit.spark.{query_name}",
            "transaction.timeout.ms": 60_000,
            "linger.ms": 10,
        }
        self._producer = Producer(self._producer_config)
        self._producer.init_transactions(60)  # also aborts a transaction a killed driver left open
        self.last_batch = self._read_marker()

    def _read_marker(self) -> int:
        """Return the last micro-batch id committed to the commits topic (-1 if none)."""
        last = -1
        for m in read_to_end(
            self.config, self.commits_topic, group_id=f"{self.query_name}.marker", missing_ok=True
        ):
            if m.key() == self.query_name.encode():
                last = int(m.value())
        return last

    def write(self, batch_id: int, results: list[dict[str, Any]], dead: list[dict[str, Any]]) -> bool:
        """Write one micro-batch in one transaction; return False if it was already written.

        Raises:
            SinkError: if the transaction fails (Spark then fails the batch and retries it).
        """
        if batch_id <= self.last_batch:
            return False
        deadline = time.monotonic() + self.retry_s
        while True:
            try:
                self._write_once(batch_id, results, dead)
                break
            except SinkError:
                if time.monotonic() > deadline:
                    raise
                log.warning("batch %d: transaction failed, retrying", batch_id, exc_info=True)
                time.sleep(1.0)
        self.last_batch = batch_id
        return True

    def _write_once(self, batch_id: int, results: list[dict[str, Any]], dead: list[dict[str, Any]]) -> None:
        p = self._producer
        try:
            p.begin_transaction()
            for row in results:
                value = encode_object(window_result.SCHEMA, window_result.only_fields(row))
                p.produce(
                    self.results_topic,
                    value,
                    window_result.key(row).encode(),
                    timestamp=int(row["result_at_ms"]),
                )
            for d in dead:
                dl = DeadLetter(
                    COMPONENT,
                    d["reason"],
                    d["detail"] or "",
                    "audit",
                    int(d["src_partition"]),
                    int(d["src_offset"]),
                    bytes(d["raw_key"]) if d["raw_key"] is not None else None,
                    bytes(d["raw_value"]) if d["raw_value"] is not None else None,
                )
                p.produce(self.dlq_topic, dl.value, dl.key, headers=dl.headers())
            p.produce(self.commits_topic, str(batch_id).encode(), self.query_name.encode())
            p.commit_transaction(60)
        except KafkaException as exc:
            err = exc.args[0]
            detail = err.str() if isinstance(err, KafkaError) else str(err)
            self._recover(fatal=isinstance(err, KafkaError) and err.fatal())
            raise SinkError(f"writing batch {batch_id} failed: {detail}") from None

    def _recover(self, fatal: bool) -> None:
        """After a failed transaction: abort it, or start a new transactional producer if it is fatal."""
        if not fatal:
            try:
                self._producer.abort_transaction(30)
                return
            except KafkaException:
                log.warning("abort failed; recreating the transactional producer", exc_info=True)
        self._producer = Producer(self._producer_config)
        self._producer.init_transactions(60)

    def close(self) -> None:
        """Close the transactional producer; an error here (fenced after a broker restart) is only logged."""
        try:
            self._producer.close()
        except KafkaException:
            log.warning("closing the results producer failed", exc_info=True)


def _arrow_row(row: dict[str, Any]) -> dict[str, Any]:
    """Return a result row as pyarrow takes it: a map (``failed_by_error``) as (key, value) pairs."""
    out = dict(row)
    out["partitions"] = [
        {**p, "failed_by_error": list((p.get("failed_by_error") or {}).items())} for p in row["partitions"]
    ]
    return out


class ParquetResultSink:
    """Writes result rows to ``<root>/date=YYYY-MM-DD/batch-<id>.parquet`` (atomic rename, idempotent)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def write(self, batch_id: int, results: list[dict[str, Any]]) -> list[Path]:
        """Write the batch's rows, one file per date; return the files written."""
        by_date: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in results:
            day = datetime.fromtimestamp(row["window_start_ms"] / 1000, UTC).strftime("%Y-%m-%d")
            by_date[day].append(row)
        written = []
        for day, rows in by_date.items():
            folder = self.root / f"date={day}"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"batch-{batch_id:012d}.parquet"
            tmp = folder / f".batch-{batch_id:012d}.parquet.tmp"
            table = pa.Table.from_pylist(
                [_arrow_row(window_result.only_fields(r)) for r in rows], schema=PARQUET_SCHEMA
            )
            pq.write_table(table, tmp)
            os.replace(tmp, path)
            written.append(path)
        return written
