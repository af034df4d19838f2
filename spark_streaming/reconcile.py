"""Reconciling one (topic, window): newest snapshot per key, producer tier vs each cluster tier.

Pure Python, no Spark: the Spark job calls it from its stateful operator, the tests call it directly.
A snapshot is the dict :func:`compact` makes of an :class:`~audit_record.AuditRecord`, plus its place
in the audit topic (``order = (partition, offset)``); all snapshots of one key share a partition, so
the higher offset is the newer one (docs/DESIGN.md, invariant 2).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from audit_record import PRODUCER_TIER, AuditRecord, cluster_tier, window_result
from audit_record.record import COUNT_FIELDS
from spark_streaming.rates import completeness, duplicate_rate, loss_rate

_KEEP = ("tier", "producer_id", *COUNT_FIELDS, "latency_p99_ms", "latency_max_ms", "emitted_at_ms")
"""What a snapshot keeps of an :class:`~audit_record.AuditRecord` (its counters and what orders it)."""
_NETWORK_KEPT = ("rtt_avg_ms", "tx_retries", "request_timeouts", "tcp_retransmit_pct")
"""What a snapshot keeps of the producer's :class:`~audit_record.NetworkStats`."""


def compact(record: AuditRecord, partition: int, offset: int) -> dict[str, Any]:
    """Keep what reconciliation needs of a snapshot (a JSON-able dict), with its audit-topic position.

    ``config`` holds the producer configuration by name (``window_result.CONFIG_FIELDS``) and
    ``network`` the network statistics by name, when the record has them.
    """
    out: dict[str, Any] = {k: getattr(record, k) for k in _KEEP}
    out["order"] = [partition, offset]
    if record.producer_config is not None:
        out["config"] = {k: getattr(record.producer_config, k) for k in window_result.CONFIG_FIELDS}
    if record.network is not None:
        out["network"] = {k: getattr(record.network, k) for k in _NETWORK_KEPT}
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


def merge(state: dict[str, dict[str, Any]], key: str, snapshot: dict[str, Any]) -> bool:
    """Keep ``snapshot`` under ``key`` if it is newer than the one held; return True if it was kept."""
    held = state.get(key)
    if held is not None and tuple(held["order"]) >= tuple(snapshot["order"]):
        return False
    state[key] = snapshot
    return True


def reconcile(
    topic: str,
    window_start_ms: int,
    window_end_ms: int,
    snapshots: Iterable[dict[str, Any]],
    clusters: Iterable[str],
    state: str,
) -> list[dict[str, Any]]:
    """Return one result row (every :mod:`audit_record.window_result` field) per cluster tier for this window.

    Args:
        topic: The audited topic.
        window_start_ms: Window start, ms since epoch UTC.
        window_end_ms: Window end (exclusive), ms since epoch UTC.
        snapshots: The newest snapshot of every key in the window (see :func:`compact`).
        clusters: Cluster names expected to audit this topic; a tier seen in the snapshots is added.
        state: ``window_result.PROVISIONAL`` or ``window_result.FINAL``.

    R_l, R_d and completeness follow Eq. 3 over the window (:mod:`spark_streaming.rates`); unique and
    duplicated count only producers that reported (the rest are ``unaudited_producers``). The network
    estimates of the predictor's inputs (Eq. 1): ``delay_ms_est`` D = mean librdkafka broker RTT / 2 (ms),
    ``packet_loss_pct_est`` L = the producers' TCP retransmission ratio (percent, weighted by sent),
    ``message_size_bytes`` M = value bytes / messages sent (producers reporting bytes).
    """
    snaps = list(snapshots)
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
    # L estimate: the producers' TCP retransmission ratios, weighted by what each sent (state written
    # before the field existed lacks it).
    losses = [
        (n["tcp_retransmit_pct"], s["sent"]) for s, n in networks if n.get("tcp_retransmit_pct") is not None
    ]
    loss_weight = sum(w for _, w in losses)
    size_sent = sum(s["sent"] for s in producers if s.get("bytes"))
    result_at = max((s["emitted_at_ms"] for s in snaps), default=window_end_ms)
    rows = []
    for tier in sorted(tiers):
        mine = [s for s in snaps if s["tier"] == tier]
        audited = [s for s in mine if s["producer_id"] in sent_by]
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
                unaudited_producers=len({s["producer_id"] for s in mine if s["producer_id"]} - set(sent_by)),
                loss_rate=loss_rate(sent, unique),
                duplicate_rate=duplicate_rate(sent, duplicated),
                completeness=completeness(sent, unique),
                latency_p99_ms=max(p99) if p99 else None,
                latency_max_ms=max(lmax) if lmax else None,
                **config,
                producer_configs=len(configs),
                rtt_avg_ms=sum(rtts) / len(rtts) if rtts else None,
                delay_ms_est=sum(rtts) / len(rtts) / 2 if rtts else None,
                packet_loss_pct_est=(
                    sum(x * w for x, w in losses) / loss_weight
                    if loss_weight
                    else (sum(x for x, _ in losses) / len(losses) if losses else None)
                ),
                message_size_bytes=(
                    sum(s.get("bytes") or 0 for s in producers) / size_sent if size_sent else None
                ),
                tx_retries=sum(n.get("tx_retries") or 0 for _, n in networks),
                request_timeouts=sum(n.get("request_timeouts") or 0 for _, n in networks),
                result_at_ms=result_at,
            )
        )
    return rows
