"""librdkafka statistics (``statistics.interval.ms`` JSON, ``STATISTICS.md``) reduced to NetworkStats."""

from __future__ import annotations

import json
from typing import Any

from audit_record import NetworkStats


def parse_statistics(stats_json: str) -> NetworkStats:
    """Reduce one librdkafka statistics document to what the audit record carries.

    Only real brokers count (``nodeid >= 0``; bootstrap placeholders are skipped). RTTs in the
    document are microseconds; the result is in ms. Malformed JSON yields an empty NetworkStats.
    """
    try:
        doc: dict[str, Any] = json.loads(stats_json)
    except ValueError:
        return NetworkStats()
    avgs: list[float] = []
    p99s: list[float] = []
    retries = timeouts = errors = 0
    for broker in (doc.get("brokers") or {}).values():
        if broker.get("nodeid", -1) < 0:
            continue
        rtt = broker.get("rtt") or {}
        if rtt.get("cnt", 0) > 0:
            avgs.append(rtt.get("avg", 0) / 1000.0)
            p99s.append(rtt.get("p99", 0) / 1000.0)
        retries += int(broker.get("txretries", 0))
        timeouts += int(broker.get("req_timeouts", 0))
        errors += int(broker.get("txerrs", 0))
    return NetworkStats(
        rtt_avg_ms=sum(avgs) / len(avgs) if avgs else None,
        rtt_p99_ms=max(p99s) if p99s else None,
        tx_retries=retries,
        request_timeouts=timeouts,
        tx_errors=errors,
    )
