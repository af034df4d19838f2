"""Generic JSON webhook sink: one ``POST`` per dispatch with the new events.

Body::

    {"source": "kafka-audit", "version": 1,
     "alerts": [{<alert.avsc fields>, "event_id": "...", "labels": {...}, "annotations": {...}}, ...]}

Events are sent once each, oldest first; a receiver deduplicates retried ones by ``event_id``
(``fingerprint:starts_at_ms:status``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alerts.event import AlertEvent
from alerts.exceptions import AlertSinkError
from alerts.sinks._http import post_json, safe_url

WEBHOOK_VERSION = 1


def webhook_alert(event: AlertEvent) -> dict[str, Any]:
    """Return one event as the webhook's JSON object."""
    return {
        **event.to_dict(),
        "event_id": event.event_id,
        "labels": event.labels(),
        "annotations": event.annotations(),
    }


class WebhookSink:
    """Posts new events to one URL.

    Args:
        url: Receiver URL (http or https).
        timeout_s: HTTP timeout, s.
        bearer_token: Sent as ``Authorization: Bearer <token>`` when given (never logged).
    """

    name = "webhook"

    def __init__(self, url: str, timeout_s: float = 5.0, bearer_token: str | None = None) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {bearer_token}"} if bearer_token else {}

    def __repr__(self) -> str:
        return f"WebhookSink(url={safe_url(self.url)!r})"

    def send(self, events: Sequence[AlertEvent], now_ms: int) -> None:
        """POST ``events`` (nothing when empty).

        Raises:
            AlertSinkError: receiver unreachable or non-2xx (``failed`` = ``events``).
        """
        if not events:
            return
        body = {
            "source": "kafka-audit",
            "version": WEBHOOK_VERSION,
            "alerts": [webhook_alert(e) for e in events],
        }
        try:
            post_json(self.name, self.url, body, self.timeout_s, self._headers)
        except AlertSinkError as exc:
            exc.failed = list(events)
            raise

    def close(self) -> None:
        """Nothing to release."""
