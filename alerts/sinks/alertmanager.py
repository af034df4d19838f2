"""Prometheus Alertmanager sink: ``POST /api/v2/alerts`` (Alertmanager OpenAPI v2, ``postableAlerts``).

Each alert is ``{labels, annotations, startsAt, endsAt, generatorURL}``. Alertmanager identifies an
alert by its label set, so posting the same alert again only refreshes it (idempotent). Like
Prometheus does, this sink:

* posts a firing alert with ``endsAt = now + ttl`` and re-posts it every ``resend_ms`` while it fires,
  so Alertmanager keeps it active; if the job dies, Alertmanager resolves it by itself after ``ttl``;
* posts a resolved alert once with ``endsAt`` = the resolution time (Alertmanager marks it resolved
  and notifies its receivers);
* sends only the newest event per alert of a batch (a retried firing event followed by its resolution
  becomes one resolved post).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alerts.event import AlertEvent, rfc3339
from alerts.exceptions import AlertSinkError
from alerts.sinks._http import post_json


class AlertmanagerSink:
    """Posts alert events to one Alertmanager.

    Args:
        url: Base URL, e.g. ``http://127.0.0.1:9093`` (``/api/v2/alerts`` is appended).
        resend_ms: Re-post interval of firing alerts, ms.
        ttl_ms: ``endsAt`` of a firing alert = now + ``ttl_ms``; must exceed ``resend_ms``.
        timeout_s: HTTP timeout, s.

    Raises:
        ValueError: if ``ttl_ms <= resend_ms``.
    """

    name = "alertmanager"

    def __init__(
        self, url: str, resend_ms: int = 60_000, ttl_ms: int = 300_000, timeout_s: float = 5.0
    ) -> None:
        if ttl_ms <= resend_ms:
            raise ValueError(f"ttl_ms ({ttl_ms}) must exceed resend_ms ({resend_ms})")
        self.url = url.rstrip("/") + "/api/v2/alerts"
        self.resend_ms = resend_ms
        self.ttl_ms = ttl_ms
        self.timeout_s = timeout_s
        self._firing: dict[str, AlertEvent] = {}
        self._posted_ms: dict[str, int] = {}

    def payload(self, event: AlertEvent, now_ms: int) -> dict[str, Any]:
        """Return one ``postableAlert``: firing alerts end at now + ttl, resolved ones at ``ends_at_ms``."""
        ends_at = (
            event.ends_at_ms if not event.firing and event.ends_at_ms is not None else now_ms + self.ttl_ms
        )
        out: dict[str, Any] = {
            "labels": event.labels(),
            "annotations": event.annotations(),
            "startsAt": rfc3339(event.starts_at_ms),
            "endsAt": rfc3339(ends_at),
        }
        if event.generator_url:
            out["generatorURL"] = event.generator_url
        return out

    def send(self, events: Sequence[AlertEvent], now_ms: int) -> None:
        """Post the newest event per alert plus the firing alerts due for a re-post.

        Raises:
            AlertSinkError: Alertmanager unreachable or refusing (``failed`` = ``events``).
        """
        newest: dict[str, AlertEvent] = {}
        for event in events:
            newest.pop(event.fingerprint, None)
            newest[event.fingerprint] = event
        for fp, event in newest.items():
            if event.firing:
                self._firing[fp] = event
            else:
                self._firing.pop(fp, None)
        due = [
            e
            for fp, e in self._firing.items()
            if fp not in newest
            and now_ms - self._posted_ms.get(fp, now_ms - self.resend_ms) >= self.resend_ms
        ]
        batch = [*newest.values(), *due]
        if not batch:
            return
        try:
            post_json(self.name, self.url, [self.payload(e, now_ms) for e in batch], self.timeout_s)
        except AlertSinkError as exc:
            exc.failed = list(events)
            raise
        for event in batch:
            if event.firing:
                self._posted_ms[event.fingerprint] = now_ms
            else:
                self._posted_ms.pop(event.fingerprint, None)

    def close(self) -> None:
        """Nothing to release (one HTTP request per send)."""
