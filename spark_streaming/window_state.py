"""The stateful step: per (topic, window), newest snapshots, provisional results, one final result.

Runs inside Spark as ``applyInPandasWithState`` with an event-time timeout. A window's state holds
the newest snapshot per key; every micro-batch that changes it emits a *provisional* result; when the
watermark passes ``window_end`` + its wait (the grace, or longer while the window's producers may still
deliver: :class:`audit_record.finality.Finality`, docs/DESIGN.md invariant 8; each result says how long
in ``final_wait_ms``) the timeout emits the *final* result once and leaves a small
tombstone (for ``retention_ms``) so snapshots arriving later are reported as late, never re-opening a
final window (docs/DESIGN.md, invariant 5). Dead letters pass straight through; heartbeats only move the
watermark. Every producer-tier snapshot a micro-batch brings in (the newest per producer) also leaves
as a ``producer`` row (configuration in effect, RTT, retries) for the per-producer metrics.

Result rows carry the live-comparison columns (``window_result.LIVE_COMPARISON_FIELDS``) empty; the next
step of the query (:mod:`spark_streaming.predict`) fills them for final windows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from audit_record import PRODUCER_TIER, window_result
from audit_record.finality import Finality
from audit_record.record import CLUSTER_TIER_PREFIX
from audit_record.tiers import TierOrder
from spark_streaming.decode import DEAD_LETTER_GROUP, HEARTBEAT_GROUP
from spark_streaming.finality_proof import PROOF, Verdict, judge
from spark_streaming.reconcile import (
    merge,
    message_timeout_ms,
    reconcile,
    snapshot_config,
    snapshot_network,
)

RESULT_COLUMNS: list[tuple[str, str]] = [
    (name, window_result.SPARK_TYPES[name]) for name in window_result.FIELDS
]
"""The window-result columns (name, Spark type) of the output rows, from ``window_result.avsc``."""
EXTRA_COLUMNS: list[tuple[str, str]] = [
    ("kind", "string"),
    ("raw_key", "binary"),
    ("raw_value", "binary"),
    ("reason", "string"),
    ("detail", "string"),
    ("src_partition", "int"),
    ("src_offset", "long"),
    ("producer_id", "string"),  # producer rows
    ("producer_name", "string"),  # producer rows: <client.id>@<host>.<pid>, None when the id is the name
    ("predict_stage", "string"),  # result rows whose prediction failed: the stage (counted, not written)
    ("predict_error", "string"),  # ... and why (logged)
]
OUTPUT_SCHEMA = ", ".join(f"{n} {t}" for n, t in RESULT_COLUMNS + EXTRA_COLUMNS)
STATE_SCHEMA = "snapshots string, window_end_ms long, final boolean"
OUTPUT_COLUMNS: list[str] = [n for n, _ in RESULT_COLUMNS + EXTRA_COLUMNS]
"""Column order of the reconciler's (and the predict step's) output rows."""
_COLUMNS = OUTPUT_COLUMNS


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Output rows as a frame; result rows carry their structure as JSON text (``window_result.to_spark``).

    One 2-D object array, no per-column type inference: the frame goes straight to Arrow, which converts
    each column to its Spark type (:data:`OUTPUT_SCHEMA`; Python ints stay exact, None is null).
    Inferring 74 columns cost about 20 ms per frame, and the stateful step yields a frame per (topic,
    window) and micro-batch (issue 17: 3,000 topics per minute). ``dtype=object`` also skips pandas'
    datetime probe of every object column (0.2 of the 0.25 ms a one-row frame cost; the cells hold no
    datetimes, so the columns were object either way).
    """
    rows = [window_result.to_spark(r) if r.get("kind") == "result" else r for r in rows]
    data = np.empty((len(rows), len(_COLUMNS)), dtype=object)
    # Every cell is a scalar (structure is JSON text by now); a sequence would fail the shape, not hide.
    if rows:
        data[:] = [[r.get(c) for c in _COLUMNS] for r in rows]
    return pd.DataFrame(data, columns=_COLUMNS, copy=False, dtype=object)


def producer_row(
    topic: str, window_start_ms: int, window_end_ms: int, snap: dict[str, Any]
) -> dict[str, Any]:
    """Return the ``producer`` row of one producer-tier snapshot (:func:`~spark_streaming.reconcile.compact`).

    Carries the producer's readable name (``producer_name``, from ``producer_identity``; None for a v1
    id, which is its own name), the configuration in effect (``acks``, ``batch_num_messages``, ...),
    librdkafka's mean broker RTT (ms) and cumulative ``txretries``; ``result_at_ms`` is the snapshot's
    emission time (ms).
    """
    return {
        "kind": "producer",
        "topic": topic,
        "window_start_ms": window_start_ms,
        "window_end_ms": window_end_ms,
        "producer_id": snap["producer_id"],
        "producer_name": snap.get("producer_name"),
        **snapshot_config(snap),
        **snapshot_network(snap),
        "result_at_ms": snap["emitted_at_ms"],
    }


def make_reconciler(
    clusters: list[str],
    grace_ms: int,
    retention_ms: int = 3_600_000,
    finality: Finality | None = None,
    tier_order: Sequence[str] = (),
    tier_final_wait_ms: int = 0,
) -> Callable[[tuple[Any, ...], Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """Return the ``applyInPandasWithState`` function for these clusters and grace (ms).

    Args:
        clusters: Cluster names expected to audit every topic.
        grace_ms: Fixed wait after a window's end before it is final, ms (``finality`` None).
        retention_ms: A final window's tombstone is kept this long to report late snapshots, ms.
        finality: The adaptive rule (its ``grace_ms`` replaces ``grace_ms``); None: the grace alone.
        tier_order: The tier order (patterns, ``docs/DESIGN.md``, "Tiers"); empty: derived from
            ``clusters`` (:meth:`audit_record.tiers.TierOrder.derive`).
        tier_final_wait_ms: When the wait is over, how much longer a window waits while a producer or a
            cluster tier has not closed it (a snapshot of the ``producer`` or a ``cluster:*`` tier whose
            ``final`` is false: a producer still waiting for delivery reports, an audit consumer
            restarting or catching up), ms; the window is final as soon as every such snapshot is
            final, or at ``end + wait + tier_final_wait_ms`` (docs/DESIGN.md, invariant 8). 0: final
            when the wait is over.
    """
    rule = finality or Finality(grace_ms, max_wait_ms=0)
    order = TierOrder.derive(clusters, tier_order)

    def wait_of(snaps: dict[str, Any]) -> int:
        return rule.wait_ms(message_timeout_ms(snaps.values()))

    def final_rows(
        topic: str, start: int, end: int, snaps: dict[str, Any], wait: int, verdict: Verdict, by_proof: bool
    ) -> pd.DataFrame:
        """Return the final result of a window: by proof (after ``wait`` ms of event time) or its fallback."""
        rows = reconcile(topic, start, end, snaps.values(), clusters, window_result.FINAL, wait, order)
        said = (
            {"final_rule": PROOF, "waiting_for": None}
            if by_proof
            else {
                "final_rule": verdict.fallback,
                "waiting_for": verdict.waiting_for,
            }
        )
        return _frame([{**r, **said, "kind": "result"} for r in rows])

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
            snaps = json.loads(snaps_json)
            wait = wait_of(snaps)
            watermark = state.getCurrentWatermarkMs()
            verdict = judge(snaps.values(), clusters, order)
            # Armed early (below) by a proof that held in an earlier micro-batch and still holds: final now.
            by_proof = verdict.proven and watermark > int(end)
            if not by_proof:
                if watermark < int(end) + wait:  # armed by a proof that no longer holds: the timeout rule
                    state.setTimeoutTimestamp(int(end) + wait)
                    return
                deadline = int(end) + wait + tier_final_wait_ms
                pending = tier_final_wait_ms > 0 and unclosed_tier(snaps.values())
                if pending and watermark < deadline:
                    state.setTimeoutTimestamp(deadline)  # or earlier: a new snapshot re-arms it (below)
                    return
            waited = watermark - int(end) if by_proof else wait
            state.update(("{}", int(end), True))
            state.setTimeoutTimestamp(int(end) + wait + retention_ms)
            yield final_rows(topic, window_start, int(end), snaps, waited, verdict, by_proof)
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
        proven_before = bool(snaps) and judge(snaps.values(), clusters, order).proven
        changed = False
        producers: dict[str, dict[str, Any]] = {}
        for pdf in pdfs:
            for snap_key, payload, w_end in zip(
                pdf["snap_key"], pdf["payload"], pdf["g_window_end"], strict=True
            ):
                end = int(w_end)
                snap = json.loads(payload)
                if merge(snaps, snap_key, snap):
                    changed = True
                    if snap["tier"] == PRODUCER_TIER and snap["producer_id"]:
                        held = producers.get(snap["producer_id"])
                        if held is None or held["emitted_at_ms"] <= snap["emitted_at_ms"]:
                            producers[snap["producer_id"]] = snap
        assert end is not None
        wait = wait_of(snaps)
        watermark = state.getCurrentWatermarkMs()
        verdict = judge(snaps.values(), clusters, order)
        out = [producer_row(topic, window_start, end, p) for p in producers.values()]
        if verdict.proven and proven_before and watermark > end:  # held at the last micro-batch too
            state.update(("{}", end, True))
            state.setTimeoutTimestamp(end + wait + retention_ms)
            if out:
                yield _frame(out)
            yield final_rows(topic, window_start, end, snaps, watermark - end, verdict, True)
            return
        state.update((json.dumps(snaps), end, False))
        # Proven: final at the first micro-batch after this one whose watermark is past the window's end.
        state.setTimeoutTimestamp(max(end if verdict.proven else end + wait, watermark + 1))
        if changed:
            rows = reconcile(
                topic, window_start, end, snaps.values(), clusters, window_result.PROVISIONAL, wait, order
            )
            said = {"final_rule": verdict.rule, "waiting_for": verdict.waiting_for}
            out += [{**r, **said, "kind": "result"} for r in rows]
        if out:
            yield _frame(out)

    return reconcile_window


def unclosed_tier(snapshots: Iterable[Mapping[str, Any]]) -> bool:
    """Return True if a producer or a cluster tier has not closed the window (a snapshot of it not final).

    A producer closes a window with its final snapshot once every message of it has a delivery report
    (``audit_producer``); one that is retiring or starved of CPU may send it after the window's wait,
    and its provisional counts would then make the final result (found on the closed-loop testbed: a
    window's ``sent`` short by 7,230 of 40,000). Snapshots kept before ``final`` was (older checkpoints)
    count as closed. Application consumer tiers (``consumer:*``) are not waited for: an application
    may stop reading at any time.
    """
    waited = (s for s in snapshots if s["tier"] == PRODUCER_TIER or s["tier"].startswith(CLUSTER_TIER_PREFIX))
    return any(s.get("final", True) is False for s in waited)
