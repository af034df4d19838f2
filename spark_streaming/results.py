"""Reading the results topic back (for ``kafka-audit verify``, reports and tests)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from audit_record import window_result
from audit_record.codec import decode_object
from kafka_plumbing.topics import read_to_end


def read_results(config: Mapping[str, Any], topic: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Return every committed WindowResult in ``topic``, in offset order per partition.

    Raises:
        TopicError: if the topic is not read to its end within ``timeout_s``.
    """
    return [
        decode_object(window_result.SCHEMA, m.value())
        for m in read_to_end(
            config, topic, group_id="kafka-audit.results-reader", timeout_s=timeout_s, missing_ok=True
        )
    ]


def final_results(rows: list[dict[str, Any]]) -> dict[tuple[str, int, str], list[dict[str, Any]]]:
    """Group the final results by (topic, window_start_ms, tier): each list should hold exactly one."""
    out: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r["state"] == window_result.FINAL:
            out.setdefault((r["topic"], r["window_start_ms"], r["tier"]), []).append(r)
    return out
