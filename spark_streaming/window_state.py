"""The stateful step: per (topic, window), newest snapshots, provisional results, one final result.

Runs inside Spark as ``applyInPandasWithState`` with an event-time timeout. A window's state holds
the newest snapshot per key; every micro-batch that changes it emits a *provisional* result; when the
watermark passes ``window_end`` + its wait (the grace, or longer while the window's producers may still
deliver: :class:`audit_record.finality.Finality`, docs/DESIGN.md invariant 8; each result says how long
in ``final_wait_ms``) the timeout emits the *final* result once and leaves a small
tombstone (for ``retention_ms``) so snapshots arriving later are reported as late, never re-opening a
final window (docs/DESIGN.md, invariant 5). A window proven complete earlier
(:mod:`spark_streaming.finality_proof`: every producer accounted for it, every tier read past it) is
final at the micro-batch after the one in which the proof first held, whatever the watermark; its
tombstone keeps each snapshot key's counts, so the tiers' closing snapshots that repeat them are not
late. Results say which rule makes the window final and what it waits for (``final_rule``,
``waiting_for``). Dead letters pass straight through; heartbeats only move the
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
from audit_record.record import CLUSTER_TIER_PREFIX, COUNT_FIELDS
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
    ) -> list[dict[str, Any]]:
        """Return the final result rows of a window: by proof, or by its fallback rule after ``wait`` ms.

        By proof, ``final_wait_ms`` is how long after its end the newest snapshot of the proof was
        emitted (ms, at least 0; deterministic on replay, as ``result_at_ms``).
        """
        if by_proof:
            newest = max((int(s["emitted_at_ms"]) for s in snaps.values()), default=end)
            wait = max(0, newest - end)
        rows = reconcile(topic, start, end, snaps.values(), clusters, window_result.FINAL, wait, order)
        said = {
            "final_rule": PROOF if by_proof else verdict.fallback,
            "waiting_for": None if by_proof else verdict.waiting_for,
        }
        return [{**r, **said, "kind": "result"} for r in rows]

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
            end = int(end)
            snaps = json.loads(snaps_json)
            wait = wait_of(snaps)
            watermark = state.getCurrentWatermarkMs()
            verdict = judge(snaps.values(), clusters, order, rule.adaptive)
            # Armed early (below) by a proof that held at the end of an earlier micro-batch: it still does.
            if not verdict.proven:
                if watermark < end + wait:  # armed by a proof that no longer holds: the timeout rule
                    state.setTimeoutTimestamp(end + wait)
                    return
                deadline = end + wait + tier_final_wait_ms
                pending = tier_final_wait_ms > 0 and unclosed_tier(snaps.values())
                if pending and watermark < deadline:
                    state.setTimeoutTimestamp(deadline)  # or earlier: a new snapshot re-arms it (below)
                    return
            state.update((tombstone(snaps, verdict.proven), end, True))
            state.setTimeoutTimestamp(max(end + wait, watermark) + retention_ms)
            yield _frame(final_rows(topic, window_start, end, snaps, wait, verdict, verdict.proven))
            return
        snaps: dict[str, Any] = {}
        end = None
        if state.exists:
            snaps_json, end, final = state.get
            if final:  # the window is final: later snapshots are reported, never applied
                late = late_snapshots(json.loads(snaps_json), pdfs)
                if late:
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
        proven_before = bool(snaps) and judge(snaps.values(), clusters, order, rule.adaptive).proven
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
        verdict = judge(snaps.values(), clusters, order, rule.adaptive)
        out = [producer_row(topic, window_start, end, p) for p in producers.values()]
        if verdict.proven and proven_before:  # the proof held at the end of the last micro-batch too
            state.update((tombstone(snaps, True), end, True))
            state.setTimeoutTimestamp(max(end + wait, watermark) + retention_ms)
            yield _frame(out + final_rows(topic, window_start, end, snaps, wait, verdict, True))
            return
        state.update((json.dumps(snaps), end, False))
        # Proven: final at the next micro-batch (finality_proof: a transaction's records all visible by then).
        state.setTimeoutTimestamp(watermark + 1 if verdict.proven else max(end + wait, watermark + 1))
        if changed:
            rows = reconcile(
                topic, window_start, end, snaps.values(), clusters, window_result.PROVISIONAL, wait, order
            )
            said = {"final_rule": verdict.rule, "waiting_for": verdict.waiting_for}
            out += [{**r, **said, "kind": "result"} for r in rows]
        if out:
            yield _frame(out)

    return reconcile_window


def tombstone(snapshots: Mapping[str, Mapping[str, Any]], by_proof: bool) -> str:
    """Return what a final window's state keeps (JSON text): by proof, each snapshot key's counts.

    A window final by proof is final before its tiers close it: their closing snapshots (a producer's
    ``final`` one, the audit consumer's after its own wait) still come, with the counts the result
    already has. :func:`late_snapshots` does not count those as late. A window final by its timeout
    keeps nothing: every snapshot after it is late, as before.
    """
    if not by_proof:
        return "{}"
    return json.dumps({k: [s.get(c) for c in COUNT_FIELDS] for k, s in snapshots.items()})


def late_snapshots(kept: Mapping[str, list[Any]], pdfs: Iterable[pd.DataFrame]) -> int:
    """Return how many snapshots arriving for a final window are late: all but repeats of kept counts.

    Args:
        kept: The final window's :func:`tombstone` (snapshot key -> counts; empty: every one is late).
        pdfs: The snapshots arriving (``snap_key``, ``payload`` columns).
    """
    late = 0
    for pdf in pdfs:
        for snap_key, payload in zip(pdf["snap_key"], pdf["payload"], strict=True):
            counts = kept.get(snap_key)
            if counts is None or counts != [json.loads(payload).get(c) for c in COUNT_FIELDS]:
                late += 1
    return late


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
