"""The stateful step: per (topic, window), newest snapshots, provisional results, one final result.

Runs inside Spark as ``applyInPandasWithState`` with an event-time timeout. A window's state holds
the newest snapshot per key; every micro-batch that changes it emits a *provisional* result; when the
watermark passes ``window_end + grace`` the timeout emits the *final* result once and leaves a small
tombstone (for ``retention_ms``) so snapshots arriving later are reported as late, never re-opening a
final window (DESIGN.md, invariant 5). Dead letters pass straight through; heartbeats only move the
watermark.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from spark_streaming.decode import DEAD_LETTER_GROUP, HEARTBEAT_GROUP
from spark_streaming.reconcile import FINAL, PROVISIONAL, merge, reconcile

RESULT_COLUMNS: list[tuple[str, str]] = [
    ("topic", "string"),
    ("window_start_ms", "long"),
    ("window_end_ms", "long"),
    ("tier", "string"),
    ("state", "string"),
    ("sent", "long"),
    ("acknowledged", "long"),
    ("failed", "long"),
    ("received", "long"),
    ("unique", "long"),
    ("duplicated", "long"),
    ("late", "long"),
    ("stale", "long"),
    ("unaudited", "long"),
    ("producers", "int"),
    ("unaudited_producers", "int"),
    ("loss_rate", "double"),
    ("duplicate_rate", "double"),
    ("completeness", "double"),
    ("latency_p99_ms", "double"),
    ("latency_max_ms", "double"),
    ("acks", "string"),
    ("enable_idempotence", "boolean"),
    ("batch_num_messages", "int"),
    ("linger_ms", "double"),
    ("message_timeout_ms", "int"),
    ("poll_interval_ms", "double"),
    ("rtt_avg_ms", "double"),
    ("tx_retries", "long"),
    ("request_timeouts", "long"),
    ("result_at_ms", "long"),
]
EXTRA_COLUMNS: list[tuple[str, str]] = [
    ("kind", "string"),
    ("raw_key", "binary"),
    ("raw_value", "binary"),
    ("reason", "string"),
    ("detail", "string"),
    ("src_partition", "int"),
    ("src_offset", "long"),
]
OUTPUT_SCHEMA = ", ".join(f"{n} {t}" for n, t in RESULT_COLUMNS + EXTRA_COLUMNS)
STATE_SCHEMA = "snapshots string, window_end_ms long, final boolean"
_COLUMNS = [n for n, _ in RESULT_COLUMNS + EXTRA_COLUMNS]


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([{c: r.get(c) for c in _COLUMNS} for r in rows], columns=_COLUMNS)


def make_reconciler(
    clusters: list[str],
    grace_ms: int,
    retention_ms: int = 3_600_000,
) -> Callable[[tuple[Any, ...], Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """Return the ``applyInPandasWithState`` function for these clusters and grace (ms)."""

    def reconcile_window(
        key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any
    ) -> Iterator[pd.DataFrame]:
        topic, window_start = str(key[0]), int(key[1])
        if topic == HEARTBEAT_GROUP:
            for _ in pdfs:
                pass
            return
        if topic == DEAD_LETTER_GROUP:
            for pdf in pdfs:
                yield _frame([{**r, "kind": "dead_letter"} for r in pdf.to_dict("records")])
            return
        if state.hasTimedOut:
            snaps_json, end, final = state.get
            if final:
                state.remove()
                return
            rows = reconcile(topic, window_start, int(end), json.loads(snaps_json).values(), clusters, FINAL)
            state.update(("{}", int(end), True))
            state.setTimeoutTimestamp(int(end) + grace_ms + retention_ms)
            yield _frame([{**r, "kind": "result"} for r in rows])
            return
        snaps: dict[str, Any] = {}
        end = None
        if state.exists:
            snaps_json, end, final = state.get
            if final:  # the window is final: later snapshots are reported, never applied
                late = sum(len(pdf) for pdf in pdfs)
                yield _frame(
                    [
                        {
                            "kind": "late",
                            "topic": topic,
                            "window_start_ms": window_start,
                            "window_end_ms": int(end),
                            "late": late,
                        }
                    ]
                )
                return
            snaps = json.loads(snaps_json)
        changed = False
        for pdf in pdfs:
            for snap_key, payload, w_end in zip(
                pdf["snap_key"], pdf["payload"], pdf["g_window_end"], strict=True
            ):
                end = int(w_end)
                changed |= merge(snaps, snap_key, json.loads(payload))
        assert end is not None
        state.update((json.dumps(snaps), end, False))
        state.setTimeoutTimestamp(max(end + grace_ms, state.getCurrentWatermarkMs() + 1))
        if changed:
            rows = reconcile(topic, window_start, end, snaps.values(), clusters, PROVISIONAL)
            yield _frame([{**r, "kind": "result"} for r in rows])

    return reconcile_window
