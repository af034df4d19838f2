"""What every alert sink implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from alerts.event import AlertEvent


class AlertSink(Protocol):
    """A destination of alert events.

    ``send`` is called on every dispatch, also with no events (a sink may have keep-alive work, like
    re-posting firing alerts to Alertmanager). It raises
    :class:`alerts.exceptions.AlertSinkError` naming the events it could not deliver; it never blocks
    longer than its configured timeouts.
    """

    name: str

    def send(self, events: Sequence[AlertEvent], now_ms: int) -> None:
        """Deliver ``events`` (oldest first) at wall clock ``now_ms`` (ms since the epoch)."""
        ...

    def close(self) -> None:
        """Release connections; deliver what is in flight within the sink's timeout."""
        ...
