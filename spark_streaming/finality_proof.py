"""Finality by proof: a window is final as soon as every tier provably holds every message it ever will.

docs/DESIGN.md, invariant 8. The timeout rule (:class:`audit_record.finality.Finality`) waits until no
message of the window can still be appended: its producers' largest ``message.timeout.ms`` + a margin
after its end (about 305 s with librdkafka's default). On a healthy network every message was
acknowledged within milliseconds, and a window can be proven complete much earlier:

1. Every producer of the window reported it *accounted for* (``AuditRecord.accounted``,
   :mod:`audit_producer.accounting`: every message it stamped has a delivery report and its TCP
   connections hold nothing more of the window), with no failed message (a failed message may still
   land: librdkafka gives up on the request, not on the bytes already sent) and ``acks`` != 0 (whose
   reports carry no offset). The highest offset acknowledged per partition
   (``PartitionDelivery.last_offset``, the maximum over the producers) bounds where the window's
   messages are.
2. Every tier of the window has read each of those partitions past that offset: a snapshot of the
   window from the tier says its position (``read_offsets``, the next offset to read) exceeds it, so its
   counts include every message at a lower offset. A tier whose offsets are not the producers' (a
   MirrorMaker 2 copy: the reader reports none) is proven instead when the tier before it is, and it
   holds at least as many of each producer's messages, distinct and in all, as that tier.

A window with a failed message, a producer that does not say it is accounted for (crashed, an older
client, ``delivery_reports="errors"``, TCP not watched), acks=0, stamps of producer ids that reported
nothing, or a tier without read offsets right after the producers keeps the timeout rule (or the grace
when no producer reported a configuration). :func:`judge` returns which rule applies and, while the
window is provisional, what it waits for.

The job (:mod:`spark_streaming.window_state`) makes a window final by proof in a micro-batch only if the
proof already held at the end of the one before: an audit consumer writes a commit's snapshots in one
Kafka transaction, and a micro-batch may see the transaction's records on one audit-topic partition
before its commit marker reached another; by the next one every record of it is visible.

Application consumer tiers (``consumer:<group>``) are proven like clusters when they report the window;
one that has reported nothing of the window when the others are proven is not waited for (as with the
timeout rule: an application may stop reading at any time); its later snapshots count as late.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from audit_record import PRODUCER_TIER, cluster_tier
from audit_record.tiers import TierOrder
from spark_streaming.reconcile import message_timeout_ms, snapshot_config

PROOF = "proof"
"""``final_rule``: final as soon as every producer accounted for the window and every tier read past it."""
TIMEOUT = "timeout"
"""``final_rule``: final once the producers' largest ``message.timeout.ms`` + the delivery margin passed."""
GRACE = "grace"
"""``final_rule``: no producer reported a configuration; final after the job's grace."""

MAX_REASONS = 3
"""At most this many reasons are spelled out in ``waiting_for`` (then ``+N more``)."""


@dataclass(frozen=True)
class Verdict:
    """Whether a window is proven final now, and otherwise which rule it waits for and why.

    Attributes:
        proven: Every producer accounted for the window and every tier read past it (module docstring).
        rule: The rule that makes the window final: :data:`PROOF` while nothing rules the proof out
            (it may hold later), else :attr:`fallback`.
        fallback: The rule when the proof does not hold in time: :data:`TIMEOUT` or :data:`GRACE`.
        waiting_for: What is missing, in words (None when proven).
    """

    proven: bool
    rule: str
    fallback: str
    waiting_for: str | None


def _spell(reasons: list[str]) -> str | None:
    if not reasons:
        return None
    more = len(reasons) - MAX_REASONS
    return "; ".join(reasons[:MAX_REASONS]) + (f"; +{more} more" if more > 0 else "")


def _by_producer(snaps: Iterable[Mapping[str, Any]], tier: str) -> dict[str, tuple[int, int]]:
    """Return producer id -> (unique, received) summed over ``tier``'s snapshots (audited messages)."""
    out: dict[str, tuple[int, int]] = {}
    for s in snaps:
        if s["tier"] == tier and s.get("producer_id"):
            u, r = out.get(s["producer_id"], (0, 0))
            out[s["producer_id"]] = (u + int(s["unique"]), r + int(s["received"]))
    return out


def judge(
    snapshots: Iterable[Mapping[str, Any]], clusters: Iterable[str], order: TierOrder, adaptive: bool = True
) -> Verdict:
    """Return whether one (topic, window) is proven final by its snapshots (see the module docstring).

    Args:
        snapshots: The window's newest snapshot of every key (:func:`spark_streaming.reconcile.compact`).
        clusters: Cluster names expected to audit the topic (their tiers must prove it too).
        order: The tier order (:class:`audit_record.tiers.TierOrder`): a tier without read offsets is
            compared with the one before it.
        adaptive: Whether the job's wait adapts to the producers' ``message.timeout.ms``
            (:attr:`audit_record.finality.Finality.adaptive`); if not, the fallback is the grace.
    """
    snaps = list(snapshots)
    fallback = TIMEOUT if adaptive and message_timeout_ms(snaps) is not None else GRACE
    producers: dict[str, list[Mapping[str, Any]]] = {}
    for s in snaps:
        if s["tier"] == PRODUCER_TIER and s.get("producer_id"):
            producers.setdefault(s["producer_id"], []).append(s)
    if not producers:
        return Verdict(False, fallback, fallback, "no producer reported the window")
    ruled_out: list[str] = []
    pending: list[str] = []
    targets: dict[int, int] = {}  # partition -> highest acknowledged offset of the window
    for pid, mine in producers.items():
        name = next((s["producer_name"] for s in mine if s.get("producer_name")), pid)
        sent, acked, failed = (sum(int(s[k]) for s in mine) for k in ("sent", "acknowledged", "failed"))
        if failed:
            ruled_out.append(f"producer {name}: {failed} failed messages (they may still land)")
        if any(snapshot_config(s)["acks"] == "0" for s in mine if s.get("config")):
            ruled_out.append(f"producer {name}: acks=0 (no offsets acknowledged)")
        if not any(s.get("accounted") for s in mine):
            pending.append(f"producer {name}: not accounted for yet ({acked + failed} of {sent} reported)")
            continue
        for s in mine:
            for p in s.get("partitions") or ():
                if int(p.get("acknowledged") or 0) == 0:
                    continue
                if p.get("last_offset") is None:
                    ruled_out.append(
                        f"producer {name}: no acknowledged offset for partition {p['partition']}"
                    )
                    continue
                part = int(p["partition"])
                targets[part] = max(targets.get(part, -1), int(p["last_offset"]))
    tiers = order.sort({cluster_tier(c) for c in clusters} | {s["tier"] for s in snaps} - {PRODUCER_TIER})
    present = [PRODUCER_TIER, *(t for t in tiers if any(s["tier"] == t for s in snaps))]
    proven_tiers: set[str] = set()
    for tier in tiers:
        mine = [s for s in snaps if s["tier"] == tier]
        strangers = {
            s["producer_id"] for s in mine if s.get("producer_id") and s["producer_id"] not in producers
        }
        if strangers:
            ruled_out.append(f"{tier}: stamps of {len(strangers)} producer id(s) that reported nothing")
            continue
        if not targets:  # nothing was acknowledged: nothing to read
            proven_tiers.add(tier)
            continue
        if not mine:
            pending.append(f"{tier}: no snapshot of the window yet")
            continue
        position: dict[int, int] = {}
        for s in mine:
            for part, offset in s.get("read_offsets") or ():
                position[int(part)] = max(position.get(int(part), -1), int(offset))
        if position:
            behind = [(p, position.get(p), t) for p, t in sorted(targets.items()) if position.get(p, -1) <= t]
            pending += [
                f"{tier}: partition {p} "
                + (f"read to offset {at}" if at is not None else "not read")
                + f", needs past {t}"
                for p, at, t in behind
            ]
            if not behind:
                proven_tiers.add(tier)
            continue
        previous = order.previous(tier, present)
        if previous is None or previous == PRODUCER_TIER:
            ruled_out.append(f"{tier}: reports no read offsets")
            continue
        if previous not in proven_tiers:
            pending.append(f"{tier}: waits for {previous}")
            continue
        held, before = _by_producer(mine, tier), _by_producer(snaps, previous)
        short = [
            (pid, held.get(pid, (0, 0)), counts)
            for pid, counts in sorted(before.items())
            if held.get(pid, (0, 0))[0] < counts[0] or held.get(pid, (0, 0))[1] < counts[1]
        ]
        pending += [f"{tier}: holds {h[1]} of {previous}'s {c[1]} messages of {pid}" for pid, h, c in short]
        if not short:
            proven_tiers.add(tier)
    if ruled_out:
        return Verdict(False, fallback, fallback, _spell(ruled_out + pending))
    return Verdict(not pending, PROOF, fallback, _spell(pending))


__all__ = ["GRACE", "MAX_REASONS", "PROOF", "TIMEOUT", "Verdict", "judge"]
