"""Which window results the controller decides from: final ones, and provisional ones whose counts settled.

Issue 39 item 4: deciding from final windows only put the first change about 20 s after the window that
asked for it on the testbed (10-s windows, ``message.timeout.ms`` 3-7 s): a window that lost messages
cannot be proven final (a failed message may still land, ``spark_streaming.finality_proof``), so it
waits for the timeout rule, ``message.timeout.ms`` + the delivery margin past its end, plus the
watermark. Its counts stop moving much earlier, and the window result says when:

A provisional result is **settled** (:func:`settled`) when

1. every audited producer of the window reported it accounted for (``producers_accounted`` =
   ``producers``, window result v9; audit record v8 ``accounted``, ``audit_producer.accounting``): the
   window has ended on the producer's clock, every message it stamped in it has a delivery report and
   its TCP connections hold nothing more of it. So ``sent``, ``acknowledged`` and ``failed`` are final
   (``acknowledged + failed >= sent`` is checked too);
2. the tier holds at least every acknowledged message (``unique >= acknowledged``): an acknowledged
   message is in the partition's log, and the tier has read that many distinct ones.

What can still change is the tier's count of failed messages that land anyway (librdkafka gives up on a
request, not on the bytes already sent): ``unique`` can only grow, by at most ``failed``, so a settled
window's R_l is at most ``failed / sent`` above its final one and never below it (the frozen-broker test
of issue 37: 2 of 60-98 failed messages landed). A producer that never says accounted (delivery reports
for errors only, no ``sock_diag``, an older client), acks=0 whose bytes TCP lost after librdkafka reported
them sent, or a tier that lost an acknowledged message (an unclean leader election) keep the window
unsettled, and the controller takes it from its final result, as before.

Only results of the first tier after the producers count (``previous_tier`` ``producer`` or null): the
live comparison predicts only those (``spark_streaming.predict.predictable``). A window end of a group
with such a provisional result that has not settled is *pending* (:func:`windows_by_group`): its other
rows wait with it, so the worst served tier still decides once all have settled.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from audit_record import PRODUCER_TIER, window_result


def _count(row: Mapping[str, Any], name: str) -> int | None:
    value = row.get(name)
    return None if value is None or isinstance(value, bool) else int(value)


def _gamma(row: Mapping[str, Any]) -> float | None:
    """Return the row's measured gamma as a finite float, None if it has none."""
    value = row.get("gamma_actual")
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def first_tier(row: Mapping[str, Any]) -> bool:
    """Return True for a result of the first tier after the producers (``previous_tier`` producer or null)."""
    return row.get("previous_tier") in (None, PRODUCER_TIER)


def settled(row: Mapping[str, Any]) -> bool:
    """Return True if ``row`` is a provisional first-tier result whose counts settled (module docstring)."""
    if row.get("state") != window_result.PROVISIONAL or not first_tier(row):
        return False
    sent, acked, failed, unique = (_count(row, n) for n in ("sent", "acknowledged", "failed", "unique"))
    producers, accounted = _count(row, "producers"), _count(row, "producers_accounted")
    if None in (sent, acked, failed, unique, producers, accounted):
        return False
    assert sent is not None and acked is not None and failed is not None and unique is not None
    return (
        sent > 0
        and producers is not None
        and producers >= 1
        and accounted == producers
        and acked + failed >= sent
        and unique >= acked
    )


def usable(row: Mapping[str, Any]) -> bool:
    """Return True for a final result or a settled provisional one (the rows the controller takes)."""
    return row.get("state") == window_result.FINAL or settled(row)


def windows_by_group(
    rows: Iterable[Mapping[str, Any]], group_of: Callable[[str], str]
) -> dict[str, dict[int, Mapping[str, Any]]]:
    """Return, per group and window end, the row that stands for the window (lowest measured gamma).

    Rows taken: final or settled results with a measured gamma (``gamma_actual``), a topic and an end. A
    window end with a first-tier provisional result that has not settled is left out whole (pending:
    taken when its results settle or are final). Ties of gamma go to the smaller (topic, tier).
    """
    out: dict[str, dict[int, Mapping[str, Any]]] = {}
    pending: set[tuple[str, int]] = set()
    for row in rows:
        if row.get("window_end_ms") is None or not row.get("topic"):
            continue
        group, end = group_of(row["topic"]), int(row["window_end_ms"])
        if row.get("state") == window_result.PROVISIONAL and first_tier(row) and not settled(row):
            pending.add((group, end))
            continue
        gamma = _gamma(row)
        if gamma is None or not usable(row):
            continue
        windows = out.setdefault(group, {})
        held = windows.get(end)
        if held is None or (gamma, row["topic"], row.get("tier") or "") < (
            float(held["gamma_actual"]),
            held["topic"],
            held.get("tier") or "",
        ):
            windows[end] = row
    for group, end in pending:
        out.get(group, {}).pop(end, None)
    return {g: w for g, w in out.items() if w}


__all__ = ["first_tier", "settled", "usable", "windows_by_group"]
