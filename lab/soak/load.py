"""The soak's audited load as its own process: N producers (threads) over M topics.

``python -m soak.load SPEC_JSON`` runs :class:`LoadSpec`: producer i sends ``rate`` messages/s to topic
``i % M`` through its own :class:`~audit_producer.producer.AuditedProducer` (``run_load``) until
``duration_s`` or SIGTERM, then prints one JSON line per producer (``LoadResult`` fields) and exits.
One process for all producers keeps the 2-core machine's budget for the components under test; the
soak samples its RSS and CPU as component ``producers``.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class LoadSpec(BaseModel):
    """What the load process sends.

    Attributes:
        bootstrap_servers: Kafka ``bootstrap.servers``.
        topics: The audited topics.
        producers: Producer count N.
        rate: Messages/s per producer.
        message_bytes: Fixed message size, bytes.
        duration_s: Seconds to send.
        window_ms: Audit window, ms.
        config: librdkafka properties of every producer (``acks``, ``message.timeout.ms`` ...).
    """

    model_config = ConfigDict(extra="forbid")

    bootstrap_servers: str
    topics: list[str]
    producers: int = Field(ge=1)
    rate: float = Field(gt=0)
    message_bytes: int = Field(gt=0)
    duration_s: float = Field(gt=0)
    window_ms: int = Field(gt=0)
    config: dict[str, Any] = Field(default_factory=dict)


def run(spec: LoadSpec, stop: threading.Event) -> list[dict[str, Any]]:
    """Run every producer until ``duration_s`` or ``stop``; return what each did (one dict each)."""
    from audit_producer.load import run_load
    from audit_producer.settings import ProducerAuditSettings

    # delivery_reports "all", the product's default: every window is accounted for, so final by proof
    audit = ProducerAuditSettings(
        window_ms=spec.window_ms,
        snapshot_interval_ms=min(5_000, max(500, spec.window_ms // 2)),
    )
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        topic = spec.topics[i % len(spec.topics)]
        config = {"bootstrap.servers": spec.bootstrap_servers, "client.id": f"soak-{i}", **spec.config}
        try:
            r = run_load(
                config,
                topic,
                "weblog",
                rate=spec.rate,
                duration_s=spec.duration_s,
                audit=audit,
                message_bytes=spec.message_bytes,
                seed=i,
                stop=stop,
            )
            out: dict[str, Any] = {
                "producer": i,
                "topic": topic,
                "produced": r.produced,
                "seconds": r.seconds,
                "producer_id": r.producer_id,
                "snapshots": r.snapshots,
                "not_handed_over": r.not_handed_over,
            }
        except Exception as exc:  # reported to the parent, which fails the soak
            out = {"producer": i, "topic": topic, "error": repr(exc)}
        with lock:
            results.append(out)

    threads = [threading.Thread(target=one, args=(i,), name=f"producer-{i}") for i in range(spec.producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(results, key=lambda r: r["producer"])


def main() -> None:
    """Entry point: the spec as one JSON argument; one JSON line per producer on stdout."""
    spec = LoadSpec.model_validate_json(sys.argv[1])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    for result in run(spec, stop):
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
