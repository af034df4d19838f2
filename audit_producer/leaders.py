"""Which broker led each partition, and when: from the producer's librdkafka statistics.

librdkafka refreshes topic metadata on its own (``topic.metadata.refresh.interval.ms``, and at once when
a broker answers NOT_LEADER) and reports each partition's current leader in every statistics document
(``topics.<topic>.partitions.<partition>.leader``, a broker node id; librdkafka ``STATISTICS.md``). The
audited producer hands every document to :meth:`LeaderHistory.observe`, which keeps a change log per
partition; a window's snapshot asks :meth:`LeaderHistory.during` who led the partition during the
window (docs/DESIGN.md, "Attribution"). The resolution is the statistics interval
(``statistics.interval.ms``, 5 s unless configured): a leader change is seen at the first document
after it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

PartitionKey = tuple[str, int]
"""(topic, partition)."""


def partition_leaders(stats_json: str) -> dict[PartitionKey, int]:
    """Return the leader broker (node id) of every partition a statistics document names.

    Partitions without a leader (``leader`` -1: an election is under way, or the topic is unknown) and
    librdkafka's internal unassigned partition (-1) are left out; malformed JSON yields ``{}``.

    Args:
        stats_json: The document librdkafka passes to ``stats_cb``.
    """
    try:
        doc: dict[str, Any] = json.loads(stats_json)
    except ValueError:
        return {}
    out: dict[PartitionKey, int] = {}
    for topic, t in (doc.get("topics") or {}).items():
        for key, p in ((t or {}).get("partitions") or {}).items():
            try:
                partition, leader = int(p.get("partition", key)), int(p.get("leader", -1))
            except (TypeError, ValueError, AttributeError):
                continue
            if partition >= 0 and leader >= 0:
                out[(topic, partition)] = leader
    return out


class LeaderHistory:
    """Leader changes per (topic, partition): ``[(since_ms, broker), ...]`` in the order observed.

    Times are ms since the Unix epoch UTC (the producer's clock, the one its CreateTimes come from).
    """

    __slots__ = ("_changes",)

    def __init__(self) -> None:
        self._changes: dict[PartitionKey, list[tuple[int, int]]] = {}

    def observe(self, leaders: Mapping[PartitionKey, int], at_ms: int) -> None:
        """Record the leaders one statistics document reported at ``at_ms`` (a change adds an entry)."""
        for key, broker in leaders.items():
            history = self._changes.setdefault(key, [])
            if not history or history[-1][1] != broker:
                history.append((at_ms, broker))

    def during(self, topic: str, partition: int, start_ms: int, end_ms: int) -> tuple[int | None, list[int]]:
        """Return who led ``partition`` in ``[start_ms, end_ms)``: (longest leader, every leader in order).

        A leader holds from its observation to the next change (the newest one until now). Before the
        first observation the partition's leader is unknown; a window that no observation covers (it
        ended before the first statistics document) takes the leader observed first after it, as
        librdkafka refreshes metadata on a leader change, so an unchanged first observation is the
        leader the window had. ``(None, [])`` when the partition was never observed.
        """
        history = self._changes.get((topic, partition))
        if not history:
            return None, []
        led: dict[int, int] = {}
        order: list[int] = []
        for i, (since, broker) in enumerate(history):
            until = history[i + 1][0] if i + 1 < len(history) else max(end_ms, since)
            overlap = min(until, end_ms) - max(since, start_ms)
            if overlap > 0:
                led[broker] = led.get(broker, 0) + overlap
                if broker not in order:
                    order.append(broker)
        if not order:
            after = [b for since, b in history if since >= end_ms]
            broker = after[0] if after else history[-1][1]
            return broker, [broker]
        longest = max(order, key=lambda b: (led[b], -order.index(b)))
        return longest, order

    def forget_before(self, ms: int) -> None:
        """Drop changes no window from ``ms`` on needs (each partition keeps the one in effect at ``ms``)."""
        for key, history in self._changes.items():
            keep = 0
            for i, (since, _) in enumerate(history):
                if since <= ms:
                    keep = i
            if keep:
                self._changes[key] = history[keep:]
