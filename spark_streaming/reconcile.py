"""Reconciling one (topic, window): newest snapshot per key, each tier vs the producers and the tier before.

Pure Python, no Spark: the Spark job calls it from its stateful operator, the tests call it directly.
A snapshot is the dict :func:`compact` makes of an :class:`~audit_record.AuditRecord`, plus its place
in the audit topic (``order = (partition, offset)``); all snapshots of one key share a partition, so
the higher offset is the newer one (docs/DESIGN.md, invariant 2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from audit_record import PRODUCER_TIER, AuditRecord, cluster_tier, freshness, window_result
from audit_record.rates import completeness, duplicate_rate, loss_rate
from audit_record.record import COUNT_FIELDS
from audit_record.tiers import TierOrder

_KEEP = (
    "tier",
    "producer_id",
    "partition",
    *COUNT_FIELDS,
    "latency_p99_ms",
    "latency_max_ms",
    "emitted_at_ms",
    "final",
    "accounted",
)
"""What a snapshot keeps of an :class:`~audit_record.AuditRecord` (its counters, what orders it, whether
its tier had closed the window, and whether its producer had accounted for every message of it)."""
_NETWORK_KEPT = (
    "rtt_avg_ms",
    "tx_retries",
    "request_timeouts",
    "tcp_retransmit_pct",
    "rtt_min_ms",
    "tcp_timeout_pct",
)
"""What a snapshot keeps of the producer's :class:`~audit_record.NetworkStats`."""


def sent_weighted_mean(networks: list[tuple[dict[str, Any], dict[str, Any]]], field: str) -> float | None:
    """Return the mean of a producer network estimate over a window's producers, weighted by ``sent``.

    Args:
        networks: (producer snapshot, its ``network``) pairs of the window.
        field: A ``network`` field (``tcp_retransmit_pct``: L; ``tcp_timeout_pct``), percent.

    Returns:
        The weighted mean; the plain mean when the producers sent nothing; None when no producer knows
        the field (state written before the field existed lacks it).
    """
    known = [(n[field], s["sent"]) for s, n in networks if n.get(field) is not None]
    weight = sum(w for _, w in known)
    if weight:
        return sum(x * w for x, w in known) / weight
    return sum(x for x, _ in known) / len(known) if known else None


def compact(record: AuditRecord, partition: int, offset: int) -> dict[str, Any]:
    """Keep what reconciliation needs of a snapshot (a JSON-able dict), with its audit-topic position.

    ``config`` holds the producer configuration by name (``window_result.CONFIG_FIELDS``),
    ``network`` the network statistics by name and ``partitions`` a producer's delivery reports per
    partition (``audit_record.PartitionDelivery`` as dicts), when the record has them; ``producer_name``
    the producer's ``<client.id>@<host>.<pid>`` when its snapshot says who it is (``producer_identity``);
    ``read_offsets`` a reading tier's ``[partition, position]`` pairs when it reports them (the job's
    finality by proof, :mod:`spark_streaming.finality_proof`); ``freshness_counts`` a reading tier's
    freshness histogram when it measured one (:mod:`audit_record.freshness`).
    """
    out: dict[str, Any] = {k: getattr(record, k) for k in _KEEP}
    out["order"] = [partition, offset]
    if record.producer_config is not None:
        out["config"] = {k: getattr(record.producer_config, k) for k in window_result.CONFIG_FIELDS}
    if record.network is not None:
        out["network"] = {k: getattr(record.network, k) for k in _NETWORK_KEPT}
    if record.partitions:
        out["partitions"] = [dataclasses.asdict(p) for p in record.partitions]
    if record.producer_identity is not None:
        out["producer_name"] = record.producer_identity.name()
    if record.read_offsets:
        out["read_offsets"] = [[r.partition, r.offset] for r in record.read_offsets]
    if record.freshness_counts:
        out["freshness_counts"] = list(record.freshness_counts)
    return out


def _named(value: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """Return a compacted part by name (state written before names were used holds positional lists)."""
    if isinstance(value, list):
        return dict(zip(names, value, strict=False))
    return dict(value or {})


def snapshot_config(snap: Mapping[str, Any]) -> dict[str, Any]:
    """Return the producer configuration of a compacted snapshot: every ``CONFIG_FIELDS`` (None: unknown)."""
    config = _named(snap.get("config"), window_result.CONFIG_FIELDS)
    return {k: config.get(k) for k in window_result.CONFIG_FIELDS}


def _network(snap: Mapping[str, Any]) -> dict[str, Any] | None:
    return _named(snap["network"], _NETWORK_KEPT) if snap.get("network") else None


def snapshot_network(snap: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``rtt_avg_ms`` (ms, None: unknown), ``tx_retries`` and ``request_timeouts`` of a snapshot."""
    network = _network(snap) or {}
    return {
        "rtt_avg_ms": network.get("rtt_avg_ms"),
        "tx_retries": network.get("tx_retries") or 0,
        "request_timeouts": network.get("request_timeouts") or 0,
    }


def message_timeout_ms(snapshots: Iterable[Mapping[str, Any]]) -> int | None:
    """Return the largest librdkafka ``message.timeout.ms`` of a window's producer snapshots, ms.

    0 (librdkafka: no timeout) wins over any number; None when no producer reported a configuration.
    The audit consumer and the job make a window final only once that long (plus a margin, bounded)
    has passed after its end (:class:`audit_record.finality.Finality`; docs/DESIGN.md, invariant 8).
    """
    timeouts = [
        t
        for s in snapshots
        if s["tier"] == PRODUCER_TIER and (t := snapshot_config(s)["message_timeout_ms"]) is not None
    ]
    if not timeouts:
        return None
    return 0 if 0 in timeouts else max(timeouts)


def delay_estimate_ms(network: Mapping[str, Any]) -> float | None:
    """Return one producer's estimate of D, the network delay of the paper's Eq. 1, ms (None: unknown).

    D is the delay the network adds to a round trip: the paper's testbed (Sec. V) sets it with NetEm on
    the producer's interface, so every round trip grows by D. librdkafka's mean request RTT
    (``rtt_avg_ms``) also holds the time a request waits behind the producer's own backlog, which grows
    with loss (measured: 140 ms mean RTT/2 where the link added 40 ms); the window's smallest RTT
    (``rtt_min_ms``) does not. Snapshots written before ``rtt_min_ms`` existed fall back to the mean
    RTT / 2 (the estimate used until then).
    """
    if network.get("rtt_min_ms") is not None:
        return float(network["rtt_min_ms"])
    if network.get("rtt_avg_ms") is not None:
        return float(network["rtt_avg_ms"]) / 2
    return None


_LAG_COUNTS = ("sent", "received", "unique", "duplicated", "unaudited")
"""The counters whose change moves a snapshot's ``changed_at_ms`` (a tier's lag; late messages do not)."""


def merge(state: dict[str, dict[str, Any]], key: str, snapshot: dict[str, Any]) -> bool:
    """Keep ``snapshot`` under ``key`` if it is newer than the one held; return True if it was kept.

    A kept snapshot whose counts (:data:`_LAG_COUNTS`) equal the held one's inherits its
    ``changed_at_ms`` (the emission time of the first snapshot with these counts; absent = its own
    ``emitted_at_ms``), so a tier's lag (:func:`add_tier_view`) is when it reached its counts, not when
    it last repeated them.
    """
    held = state.get(key)
    if held is not None and tuple(held["order"]) >= tuple(snapshot["order"]):
        return False
    if held is not None and all(held.get(k) == snapshot.get(k) for k in _LAG_COUNTS):
        snapshot["changed_at_ms"] = held.get("changed_at_ms", held["emitted_at_ms"])
    state[key] = snapshot
    return True


def add_tier_view(
    rows: list[dict[str, Any]],
    snapshots: Iterable[Mapping[str, Any]],
    order: TierOrder,
    sent: int,
    window_end_ms: int,
) -> None:
    """Fill the tier fields (``window_result.TIER_FIELDS``) of one window's result rows, in place.

    Each row is compared with the tier before it (:meth:`audit_record.tiers.TierOrder.previous` among
    ``producer`` and the rows' tiers): ``previous_unique`` (``sent`` when the producer tier is before it),
    ``completeness_vs_previous`` = unique / previous_unique (capped at 1), ``duplicates_added`` =
    duplicated - the previous tier's duplicated (floored at 0; the producer tier has none) and
    ``duplicate_rate_vs_previous`` = duplicates_added / previous_unique. ``tier_lag_ms`` is the newest
    ``changed_at_ms`` (else ``emitted_at_ms``) of the tier's snapshots minus ``window_end_ms``, floored
    at 0 (ms); None for a tier without snapshots.

    Args:
        rows: One result row per non-producer tier (:func:`reconcile`'s).
        snapshots: The window's newest snapshots (:func:`compact`, kept by :func:`merge`).
        order: The tier order.
        sent: Messages the window's producers sent.
        window_end_ms: Window end, ms since epoch UTC.
    """
    by_tier = {r["tier"]: r for r in rows}
    present = [PRODUCER_TIER, *by_tier]
    changed: dict[str, int] = {}
    for s in snapshots:
        at = int(s.get("changed_at_ms", s["emitted_at_ms"]))
        changed[s["tier"]] = max(changed.get(s["tier"], at), at)
    for row in rows:
        tier = row["tier"]
        previous = order.previous(tier, present) or PRODUCER_TIER
        if previous == PRODUCER_TIER:
            prev_unique, prev_dup = sent, 0
        else:
            prev_unique, prev_dup = by_tier[previous]["unique"], by_tier[previous]["duplicated"]
        added = max(0, row["duplicated"] - prev_dup)
        row.update(
            tier_rank=order.level(tier),
            previous_tier=previous,
            previous_unique=prev_unique,
            completeness_vs_previous=completeness(prev_unique, row["unique"]),
            duplicates_added=added,
            duplicate_rate_vs_previous=duplicate_rate(prev_unique, added),
            tier_lag_ms=max(0, changed[tier] - window_end_ms) if tier in changed else None,
        )


def partition_breakdown(
    producers: Iterable[Mapping[str, Any]],
    tier_snapshots: Iterable[Mapping[str, Any]],
    audited: set[str],
) -> list[dict[str, Any]]:
    """Return the ``partitions`` field of one tier's result: per partition, delivered vs held, and its leader.

    From the producers' delivery reports per partition (``audit_record.PartitionDelivery``): acknowledged,
    failed and failed by error add up over producers; ``leaders`` is every broker any producer saw lead
    the partition during the window, in order, and ``leader`` the one the producers that reported the
    most for the partition name (ties: the lower node id). From the tier's per-partition snapshots of
    audited producers (``audited``: their producer ids): unique and duplicated. ``sent`` = acknowledged
    + failed and ``lost`` = sent - unique (floored at 0) only when every producer's reports cover what
    it sent (acknowledged + failed = sent: settled, ``delivery_reports=all``); else both None, as a
    producer that reports failures only cannot say where its messages went (docs/DESIGN.md,
    "Attribution").

    Args:
        producers: The window's producer-tier snapshots (:func:`compact`).
        tier_snapshots: The tier's snapshots in the window.
        audited: Producer ids that reported for the window.

    Returns:
        One ``window_result.partition_entry`` per partition, by partition.
    """
    entries: dict[int, dict[str, Any]] = {}
    votes: dict[int, dict[int, int]] = {}
    covered = True

    def entry(partition: int) -> dict[str, Any]:
        if partition not in entries:
            entries[partition] = window_result.partition_entry(partition)
        return entries[partition]

    for s in producers:
        parts = s.get("partitions") or []
        if sum(int(p.get("acknowledged") or 0) + int(p.get("failed") or 0) for p in parts) != s["sent"]:
            covered = False
        for p in parts:
            e = entry(int(p["partition"]))
            acked, failed = int(p.get("acknowledged") or 0), int(p.get("failed") or 0)
            e["acknowledged"] += acked
            e["failed"] += failed
            for error, n in (p.get("failed_by_error") or {}).items():
                e["failed_by_error"][error] = e["failed_by_error"].get(error, 0) + int(n)
            for broker in p.get("leaders") or []:
                if broker not in e["leaders"]:
                    e["leaders"].append(int(broker))
            if p.get("leader") is not None:
                tally = votes.setdefault(e["partition"], {})
                tally[int(p["leader"])] = tally.get(int(p["leader"]), 0) + acked + failed
    for s in tier_snapshots:
        if s.get("producer_id") in audited and int(s.get("partition", -1)) >= 0:
            e = entry(int(s["partition"]))
            e["unique"] += int(s["unique"])
            e["duplicated"] += int(s["duplicated"])
    for partition, e in entries.items():
        tally = votes.get(partition)
        if tally:
            e["leader"] = min(tally, key=lambda b: (-tally[b], b))
        if covered:
            e["sent"] = e["acknowledged"] + e["failed"]
            e["lost"] = max(0, e["sent"] - e["unique"])
    return [entries[k] for k in sorted(entries)]


def reconcile(
    topic: str,
    window_start_ms: int,
    window_end_ms: int,
    snapshots: Iterable[dict[str, Any]],
    clusters: Iterable[str],
    state: str,
    final_wait_ms: int | None = None,
    tier_order: TierOrder | None = None,
) -> list[dict[str, Any]]:
    """Return one result row (every :mod:`audit_record.window_result` field) per tier for this window.

    Args:
        topic: The audited topic.
        window_start_ms: Window start, ms since epoch UTC.
        window_end_ms: Window end (exclusive), ms since epoch UTC.
        snapshots: The newest snapshot of every key in the window (see :func:`compact`).
        clusters: Cluster names expected to audit this topic; a tier seen in the snapshots is added.
        state: ``window_result.PROVISIONAL`` or ``window_result.FINAL``.
        final_wait_ms: How long after its end the job waits before the window is final, ms (the
            ``final_wait_ms`` field; None: not said).
        tier_order: The order of the tiers (None: derived from ``clusters``,
            :meth:`audit_record.tiers.TierOrder.derive`); rows come in that order, with the tier fields
            of :func:`add_tier_view`.

    R_l, R_d and completeness follow Eq. 3 over the window (:mod:`audit_record.rates`); unique and
    duplicated count only producers that reported. Messages whose stamp names a producer id without a
    producer snapshot of this topic and window (``unaudited_producers`` ids: a crashed producer whose
    snapshots were lost, a client that copies headers, a garbled or forged stamp) are ``unaccounted``
    (messages; ``unaccounted_unique``: their distinct stamps per partition, summed): in ``received``
    (every message the tier consumed = unique + duplicated + unaudited + unaccounted), never in sent,
    unique, duplicated or lost (issue 36). ``producers_accounted``: the producers of which a snapshot says
    the window is accounted for (the control loop's rule for deciding from a provisional result). The network
    estimates of the predictor's inputs (Eq. 1): ``delay_ms_est`` D = the producers' mean smallest
    broker RTT of the window (``rtt_min_ms``, ms: the delay the network adds to a round trip, as NetEm's
    delay on the producer's interface adds it in the paper's Sec. V; :func:`delay_estimate_ms`),
    ``packet_loss_pct_est`` L = the producers' TCP retransmission ratio (percent, weighted by sent),
    ``tcp_timeout_pct_est`` = their TCP retransmission timeouts per 100 segments (percent, weighted the
    same way; :func:`sent_weighted_mean`), ``message_size_bytes`` M = value bytes / messages sent
    (producers reporting bytes). ``partitions``
    breaks each tier's result down by partition (:func:`partition_breakdown`). ``freshness_counts`` adds
    up the tier's snapshots' freshness histograms entry by entry (those that measured it; every message
    of the tier, audited or not: freshness is the tier's, whoever sent).
    """
    snaps = list(snapshots)
    clusters = list(clusters)
    order = tier_order or TierOrder.derive(clusters)
    producers = [s for s in snaps if s["tier"] == PRODUCER_TIER]
    sent_by: dict[str, int] = {}
    for s in producers:
        sent_by[s["producer_id"]] = sent_by.get(s["producer_id"], 0) + s["sent"]
    tiers = {cluster_tier(c) for c in clusters} | {s["tier"] for s in snaps if s["tier"] != PRODUCER_TIER}
    sent = sum(s["sent"] for s in producers)
    main = max(producers, key=lambda s: s["sent"], default=None)
    config = snapshot_config(main or {})
    configs = {tuple(snapshot_config(s).values()) for s in producers if s.get("config")}
    networks = [(s, n) for s in producers if (n := _network(s)) is not None]
    rtts = [n["rtt_avg_ms"] for _, n in networks if n.get("rtt_avg_ms") is not None]
    delays = [d for _, n in networks if (d := delay_estimate_ms(n)) is not None]
    size_sent = sum(s["sent"] for s in producers if s.get("bytes"))
    result_at = max((s["emitted_at_ms"] for s in snaps), default=window_end_ms)
    rows = []
    for tier in order.sort(tiers):
        mine = [s for s in snaps if s["tier"] == tier]
        audited = [s for s in mine if s["producer_id"] in sent_by]
        unaccounted = [s for s in mine if s["producer_id"] and s["producer_id"] not in sent_by]
        unique = sum(s["unique"] for s in audited)
        duplicated = sum(s["duplicated"] for s in audited)
        p99 = [s["latency_p99_ms"] for s in mine if s["latency_p99_ms"] is not None]
        lmax = [s["latency_max_ms"] for s in mine if s["latency_max_ms"] is not None]
        rows.append(
            window_result.blank(
                topic=topic,
                window_start_ms=window_start_ms,
                window_end_ms=window_end_ms,
                tier=tier,
                state=state,
                sent=sent,
                acknowledged=sum(s["acknowledged"] for s in producers),
                failed=sum(s["failed"] for s in producers),
                received=sum(s["received"] for s in mine),
                unique=unique,
                duplicated=duplicated,
                late=sum(s["late"] for s in mine),
                stale=sum(s["stale"] for s in mine),
                unaudited=sum(s["unaudited"] for s in mine),
                producers=len(sent_by),
                producers_accounted=len({s["producer_id"] for s in producers if s.get("accounted")}),
                unaudited_producers=len({s["producer_id"] for s in unaccounted}),
                unaccounted=sum(s["received"] for s in unaccounted),
                unaccounted_unique=sum(s["unique"] for s in unaccounted),
                loss_rate=loss_rate(sent, unique),
                duplicate_rate=duplicate_rate(sent, duplicated),
                completeness=completeness(sent, unique),
                latency_p99_ms=max(p99) if p99 else None,
                latency_max_ms=max(lmax) if lmax else None,
                **config,
                producer_configs=len(configs),
                rtt_avg_ms=sum(rtts) / len(rtts) if rtts else None,
                delay_ms_est=sum(delays) / len(delays) if delays else None,
                packet_loss_pct_est=sent_weighted_mean(networks, "tcp_retransmit_pct"),
                tcp_timeout_pct_est=sent_weighted_mean(networks, "tcp_timeout_pct"),
                message_size_bytes=(
                    sum(s.get("bytes") or 0 for s in producers) / size_sent if size_sent else None
                ),
                tx_retries=sum(n.get("tx_retries") or 0 for _, n in networks),
                request_timeouts=sum(n.get("request_timeouts") or 0 for _, n in networks),
                result_at_ms=result_at,
                final_wait_ms=final_wait_ms,
                partitions=partition_breakdown(producers, mine, set(sent_by)),
                freshness_counts=freshness.add_counts(s.get("freshness_counts") for s in mine),
            )
        )
    add_tier_view(rows, snaps, order, sent, window_end_ms)
    return rows
