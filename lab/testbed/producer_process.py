"""One audited producer run as its own process (started inside the producer's network namespace).

``python -m testbed.producer_process SPEC_JSON`` sends the load :class:`ProducerRun` describes through an
:class:`~audit_producer.producer.AuditedProducer` and prints one JSON line with what it did
(:class:`~audit_producer.load.LoadResult` fields). The parent (scenario runner, grid) reads that line.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ProducerRun(BaseModel):
    """What one producer process sends.

    Attributes:
        bootstrap_servers: Kafka ``bootstrap.servers``.
        topic: Target topic.
        config: librdkafka producer properties (``acks``, ``batch.num.messages``, ``message.timeout.ms``...).
        profile: Workload profile (paper Table II): ``social``, ``weblog`` or ``game``.
        message_bytes: Fixed message size M, bytes (None: the profile's sizes).
        poll_interval_ms: Polling interval delta between source reads, ms; arrival rate lambda = 1/delta.
            0 sends as fast as possible (the paper's grids).
        count: Messages to send (None: until ``duration_s``).
        duration_s: Seconds to send (None: until ``count``).
        window_ms: Audit window, ms.
        client_id: librdkafka ``client.id``.
        seed: Message pool seed.
        autotune: Follow the control topic and apply its configurations (docs/DESIGN.md, "Autotuned
            producer").
        group: Producer group on the control topic (None: ``client_id``).
        follow_hints: Follow the polling-interval hint (changes the offered load; off for comparisons).
        producers: Audited producers the load is handed to round-robin, N_p (a ``producers`` hint of an
            autotuned group replaces it while it stands).
        start_at: Wall-clock time (s since the Unix epoch) at which the load starts; the process starts,
            creates and checks its producer before it and waits (a testbed stage begins on time, with a
            producer that is already up). None: as soon as the producer is checked.
    """

    model_config = ConfigDict(extra="forbid")

    bootstrap_servers: str
    topic: str
    config: dict[str, Any] = Field(default_factory=dict)
    profile: str = "weblog"
    message_bytes: int | None = None
    poll_interval_ms: float = Field(0.0, ge=0.0)
    count: int | None = Field(None, gt=0)
    duration_s: float | None = Field(None, gt=0)
    window_ms: int = 10_000
    client_id: str = "kafka-audit-testbed"
    seed: int = 0
    autotune: bool = False
    group: str | None = None
    follow_hints: bool = False
    producers: int = Field(1, ge=1)
    start_at: float | None = None

    @property
    def rate(self) -> float:
        """Target rate, messages/s (0 = as fast as possible)."""
        return 1000.0 / self.poll_interval_ms if self.poll_interval_ms > 0 else 0.0


def run(spec: ProducerRun) -> dict[str, Any]:
    """Send the load; return what it did (:class:`~audit_producer.load.LoadResult`) as a dict.

    Keys: ``produced``, ``seconds``, ``producer_id``, ``snapshots``, ``not_handed_over``,
    ``config_events`` (a list of the autotuned producer's event dicts), ``control_version``,
    ``producer_ids`` (every producer that sent: more than one after a ``producers`` hint), ``max_producers``.
    """
    from audit_producer.load import run_load
    from audit_producer.settings import ProducerAuditSettings

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    audit = ProducerAuditSettings(
        window_ms=spec.window_ms,
        snapshot_interval_ms=min(5_000, max(500, spec.window_ms // 2)),
        delivery_reports="all",  # the offsets acknowledged: windows final by proof (docs/DESIGN.md, inv. 8)
        poll_interval_ms=spec.poll_interval_ms,  # reported with the config: the model's delta
        autotune=spec.autotune,
        group=spec.group,
    )
    config = {"bootstrap.servers": spec.bootstrap_servers, "client.id": spec.client_id, **spec.config}
    result = run_load(
        config,
        spec.topic,
        spec.profile,  # type: ignore[arg-type]
        rate=spec.rate,
        duration_s=spec.duration_s,
        count=spec.count,
        audit=audit,
        message_bytes=spec.message_bytes,
        seed=spec.seed,
        stop=stop,
        follow_hints=spec.follow_hints,
        producers=spec.producers,
        start_at=spec.start_at,
    )
    return {
        "produced": result.produced,
        "seconds": result.seconds,
        "producer_id": result.producer_id,
        "snapshots": result.snapshots,
        "not_handed_over": result.not_handed_over,
        "config_events": result.config_events,
        "control_version": result.control_version,
        "producer_ids": result.producer_ids,
        "max_producers": result.max_producers,
    }


def main() -> None:
    """Entry point: the spec as one JSON argument; prints the result as one JSON line."""
    spec = ProducerRun.model_validate_json(sys.argv[1])
    print(json.dumps(run(spec)), flush=True)


if __name__ == "__main__":
    main()
