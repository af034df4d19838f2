"""The tiers of the audit and their order: producer -> cluster(s) -> application consumers.

A message passes the tiers in order, as in LinkedIn's audit: the producers (tier ``producer``) send it,
the cluster it is produced to holds it (``cluster:A``), MirrorMaker 2 copies it to another cluster
(``cluster:B``, the replication tier), and applications consume it (``consumer:<group>``,
:class:`audit_consumer.audited.AuditedConsumer`). Reconciliation compares each tier with the producer
tier and with *the tier before it* (``docs/DESIGN.md``, "Tiers"), so a loss or a duplicate is charged to
the hop that caused it.

:class:`TierOrder` is that order as a list of *levels*, each an ``fnmatch`` pattern of tier names
(``cluster:B``, ``consumer:*``). Tiers matching the same level are parallel (two consumer groups): each
one's previous tier is the nearest lower level present in the window, never each other. Tiers matching
no level come after every level. The default is derived from the names: ``producer``, then the cluster
tiers of the configured clusters in their order, then any other ``cluster:*``, then ``consumer:*``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from audit_record.record import CLUSTER_TIER_PREFIX, CONSUMER_TIER_PREFIX, PRODUCER_TIER, cluster_tier


@dataclass(frozen=True)
class TierOrder:
    """The order of the tiers, as levels of ``fnmatch`` patterns (see the module docstring).

    Attributes:
        levels: Patterns in order, ``producer`` first (added when missing).
    """

    levels: tuple[str, ...] = (PRODUCER_TIER, f"{CLUSTER_TIER_PREFIX}*", f"{CONSUMER_TIER_PREFIX}*")

    def __post_init__(self) -> None:
        if not self.levels or self.levels[0] != PRODUCER_TIER:
            object.__setattr__(
                self, "levels", (PRODUCER_TIER, *(x for x in self.levels if x != PRODUCER_TIER))
            )

    @classmethod
    def derive(cls, clusters: Sequence[str] = (), order: Sequence[str] = ()) -> TierOrder:
        """Return ``order`` if given (patterns or tier names), else the order derived from the names.

        Args:
            clusters: Cluster names in data-flow order (the reconciliation's ``clusters`` setting), e.g.
                ``["A", "B"]`` when MirrorMaker 2 copies A to B.
            order: An explicit order, e.g. ``["producer", "cluster:A", "cluster:B", "consumer:*"]``.
        """
        if order:
            return cls(tuple(order))
        return cls(
            (
                PRODUCER_TIER,
                *(cluster_tier(c) for c in clusters),
                f"{CLUSTER_TIER_PREFIX}*",
                f"{CONSUMER_TIER_PREFIX}*",
            )
        )

    def level(self, tier: str) -> int:
        """Return the index of the first level ``tier`` matches (``len(levels)`` when none does)."""
        for i, pattern in enumerate(self.levels):
            if tier == pattern or fnmatch.fnmatchcase(tier, pattern):
                return i
        return len(self.levels)

    def sort(self, tiers: Iterable[str]) -> list[str]:
        """Return ``tiers`` in flow order (by level, then by name); duplicates removed."""
        return sorted(set(tiers), key=lambda t: (self.level(t), t))

    def previous(self, tier: str, present: Iterable[str]) -> str | None:
        """Return the tier before ``tier`` among ``present`` (the tiers of one window), or None.

        The previous tier is one of the nearest lower level present; when several share that level the
        last by name is taken (list them in the order to say otherwise). ``producer`` has none.
        """
        mine = self.level(tier)
        lower = [(self.level(t), t) for t in set(present) if t != tier and self.level(t) < mine]
        return max(lower)[1] if lower else None
