"""Comparing the audit consumer's counts with the verifier's ground truth, and showing both."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

from rich.table import Table

from audit_consumer.ground_truth import Verification
from audit_record import PRODUCER_TIER, AuditRecord, cluster_tier
from audit_record.rates import duplicate_rate, loss_rate
from audit_record.reader import SnapshotTable

COMPARED = ("received", "unique", "duplicated")


@dataclass(frozen=True)
class Mismatch:
    """One (window, producer) where the audit consumer and the verifier disagree."""

    window_start_ms: int
    producer_id: str | None
    field: str
    audited: int
    truth: int


def cluster_counts(
    table: SnapshotTable, cluster: str, topic: str
) -> dict[tuple[int, str | None], dict[str, int]]:
    """Sum the newest cluster-tier snapshots over partitions, per (window, producer id)."""
    out: dict[tuple[int, str | None], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    rec: AuditRecord
    for rec in table.tier(cluster_tier(cluster)):
        if rec.topic != topic:
            continue
        c = out[(rec.window_start_ms, rec.producer_id)]
        for name in (*COMPARED, "late", "stale", "unaudited"):
            c[name] += getattr(rec, name)
        c["final_partitions"] += int(rec.final)
        c["partitions"] += 1
    return out


def producer_names(table: SnapshotTable | None) -> dict[str, str]:
    """Return ``<client.id>@<host>.<pid>`` of every producer id whose snapshots say who it is.

    A v2 stamp carries only a random id (:mod:`audit_record.stamp`); the producer's snapshots carry its
    :class:`~audit_record.ProducerIdentity`. Ids without one (v1 producers, whose id is its name, or
    snapshots written before the field existed) are left out.
    """
    names: dict[str, str] = {}
    for rec in table.tier(PRODUCER_TIER) if table is not None else ():
        if rec.producer_id is not None and rec.producer_identity is not None:
            names[rec.producer_id] = rec.producer_identity.name()
    return names


def _names_cell(pids: list[str], names: dict[str, str], most: int = 3) -> str:
    """Return a window's producers by readable name (else id), at most ``most`` then ``+N``."""
    shown = sorted(names.get(p, p) for p in pids)
    more = f" +{len(shown) - most}" if len(shown) > most else ""
    return ", ".join(shown[:most]) + more


def compare_with_cluster(v: Verification, cluster: str) -> list[Mismatch]:
    """Every difference between the verifier's rows and the audit consumer's snapshots (empty = exact)."""
    assert v.audit_log is not None
    audited = cluster_counts(v.audit_log, cluster, v.topic)
    out = []
    for key in sorted(
        set(audited) | {k for k, r in v.rows.items() if r.received}, key=lambda k: (k[0], k[1] or "")
    ):
        truth = v.rows.get(key)
        got = audited.get(key, {})
        for name in COMPARED:
            t = getattr(truth, name) if truth is not None else 0
            if name in ("unique", "duplicated") and key[1] is None:
                continue
            if got.get(name, 0) != t:
                out.append(Mismatch(key[0], key[1], name, got.get(name, 0), t))
    return out


def _fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def verification_table(v: Verification, mismatches: list[Mismatch] | None = None) -> Table:
    """Build a rich table of the verifier's per-window totals (and whether the audit consumer agrees).

    With the audit log read (``v.audit_log``), a ``producer names`` column names each window's producers
    by their snapshots' identity (:func:`producer_names`), else by id.
    """
    bad = {(m.window_start_ms) for m in mismatches or []}
    names = producer_names(v.audit_log)
    table = Table(title=f"{v.topic}: ground truth per window ({v.window_ms // 1000} s windows)")
    for col in (
        "window (UTC)",
        "producers",
        "sent",
        "received",
        "unique",
        "duplicated",
        "lost",
        "R_l",
        "R_d",
    ):
        table.add_column(col, justify="right")
    if v.audit_log is not None:
        table.add_column("producer names", justify="left")
    if mismatches is not None:
        table.add_column("audit consumer", justify="center")
    by_window: dict[int, list] = defaultdict(list)
    for (start, pid), row in v.rows.items():
        if pid is not None:
            by_window[start].append(row)
    for start in sorted(by_window):
        rows = by_window[start]
        sent = sum(r.sent for r in rows)
        unique = sum(r.unique for r in rows)
        dup = sum(r.duplicated for r in rows)
        cells = [
            datetime.fromtimestamp(start / 1000, UTC).strftime("%H:%M:%S"),
            str(len(rows)),
            f"{sent:,}",
            f"{sum(r.received for r in rows):,}",
            f"{unique:,}",
            f"{dup:,}",
            f"{sum(r.lost for r in rows):,}",
            _fmt_rate(loss_rate(sent, unique)),
            _fmt_rate(duplicate_rate(sent, dup)),
        ]
        if v.audit_log is not None:
            cells.append(_names_cell([r.producer_id for r in rows], names))
        if mismatches is not None:
            cells.append("[red]differs[/]" if start in bad else "[green]exact[/]")
        table.add_row(*cells)
    return table
