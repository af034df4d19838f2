"""Fan alert events out to the sinks; a failing sink never breaks the caller or the other sinks.

Each sink has its own retry queue. On every :meth:`Dispatcher.dispatch` a sink gets its undelivered
events first, then the new ones (oldest first). When a sink fails, the error is logged, counted in
``kafka_audit_alert_sink_errors_total{sink}``, and the events it names stay queued for the next
dispatch (at most ``max_pending`` per sink; beyond that the oldest are dropped and logged).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence

from alerts.event import AlertEvent
from alerts.exceptions import AlertSinkError
from alerts.metrics import AlertMetrics
from alerts.settings import AlertSettings
from alerts.sinks.alertmanager import AlertmanagerSink
from alerts.sinks.base import AlertSink
from alerts.sinks.kafka import KafkaAlertSink
from alerts.sinks.webhook import WebhookSink

log = logging.getLogger(__name__)


def sinks_from_settings(settings: AlertSettings) -> list[AlertSink]:
    """Build the configured sinks (Kafka, Alertmanager, webhook; those whose address is set).

    Kafka needs ``bootstrap_servers``, Alertmanager ``alertmanager_url``, the webhook ``webhook_url``.
    """
    s = settings
    sinks: list[AlertSink] = []
    if s.bootstrap_servers:
        sinks.append(
            KafkaAlertSink(
                {"bootstrap.servers": s.bootstrap_servers, **s.extra_config},
                s.alerts_topic,
                message_timeout_ms=s.kafka_message_timeout_ms,
                flush_timeout_ms=s.kafka_flush_timeout_ms,
            )
        )
    if s.alertmanager_url:
        sinks.append(
            AlertmanagerSink(
                str(s.alertmanager_url), s.alertmanager_resend_ms, s.alertmanager_ttl_ms, s.http_timeout_s
            )
        )
    if s.webhook_url:
        token = s.webhook_bearer_token.get_secret_value() if s.webhook_bearer_token else None
        sinks.append(WebhookSink(str(s.webhook_url), s.http_timeout_s, token))
    return sinks


class Dispatcher:
    """Delivers events to every sink, with per-sink retry queues.

    Args:
        sinks: Destinations (see :mod:`alerts.sinks`); names must be unique.
        metrics: Where sink errors are counted (None: not counted).
        max_pending: Undelivered events kept per sink.

    Raises:
        ValueError: duplicate sink names.
    """

    def __init__(
        self, sinks: Sequence[AlertSink], metrics: AlertMetrics | None = None, max_pending: int = 1_000
    ) -> None:
        names = [s.name for s in sinks]
        if len(set(names)) != len(names):
            raise ValueError(f"sink names must be unique, got {names}")
        self.sinks = list(sinks)
        self.metrics = metrics
        self.max_pending = max_pending
        self._pending: dict[str, list[AlertEvent]] = {s.name: [] for s in sinks}

    @classmethod
    def from_settings(cls, settings: AlertSettings, metrics: AlertMetrics | None = None) -> Dispatcher:
        """Build the dispatcher of the sinks ``settings`` configure (possibly none)."""
        return cls(sinks_from_settings(settings), metrics, settings.max_pending_events)

    def pending(self) -> dict[str, int]:
        """Return the number of undelivered events per sink."""
        return {name: len(events) for name, events in self._pending.items()}

    def pending_events(self) -> dict[str, list[AlertEvent]]:
        """Return the undelivered events per sink, oldest first (copies of the retry queues)."""
        return {name: list(events) for name, events in self._pending.items()}

    def restore_pending(self, pending: Mapping[str, Sequence[AlertEvent]]) -> None:
        """Queue ``pending`` (:meth:`pending_events` of an earlier process) for retry.

        Events of sinks no longer configured are dropped with a warning; each queue stays bounded by
        ``max_pending``.
        """
        for name, events in pending.items():
            if name not in self._pending:
                log.warning("alert sink %s gone: %d undelivered event(s) dropped", name, len(events))
                continue
            self._pending[name] = self._bounded(name, _unique([*events, *self._pending[name]]))

    def dispatch(
        self, events: Sequence[AlertEvent], now_ms: int, sinks: Collection[str] | None = None
    ) -> dict[str, bool]:
        """Send queued and new ``events`` to every sink; never raises for a sink failure.

        Called on every evaluation, also with no events (retries and Alertmanager re-posts).

        Args:
            events: New events, oldest first.
            now_ms: Wall clock, ms since the epoch.
            sinks: Names of the only sinks to call (None: all), e.g. ``("kafka",)`` for model decision
                events (:mod:`alerts.model_events`); the others are not called and keep their queues.

        Returns:
            ``{sink name: True if everything queued for it is delivered}`` for the sinks called.
        """
        ok: dict[str, bool] = {}
        for sink in self.sinks:
            if sinks is not None and sink.name not in sinks:
                continue
            batch = _unique([*self._pending[sink.name], *events])
            try:
                sink.send(batch, now_ms)
            except AlertSinkError as exc:
                self._pending[sink.name] = self._bounded(sink.name, _unique(exc.failed))
                self._count_error(sink.name)
                log.warning("%s (%d event(s) queued for retry)", exc, len(self._pending[sink.name]))
                ok[sink.name] = False
                continue
            except Exception as exc:  # a sink bug must not stop the Spark job; keep the events for retry
                self._pending[sink.name] = self._bounded(sink.name, batch)
                self._count_error(sink.name)
                log.exception("alert sink %s failed unexpectedly: %s", sink.name, exc)
                ok[sink.name] = False
                continue
            self._pending[sink.name] = []
            ok[sink.name] = True
        return ok

    def close(self) -> None:
        """Close every sink (flushing what is in flight); errors are logged."""
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:  # closing must not mask the caller's own shutdown
                log.warning("closing alert sink %s: %s", sink.name, exc)

    def _count_error(self, sink: str) -> None:
        if self.metrics is not None:
            self.metrics.sink_errors.labels(sink=sink).inc()

    def _bounded(self, sink: str, events: list[AlertEvent]) -> list[AlertEvent]:
        if len(events) > self.max_pending:
            dropped = len(events) - self.max_pending
            log.error("alert sink %s: dropped the %d oldest undelivered event(s)", sink, dropped)
            events = events[dropped:]
        return events


def _unique(events: Sequence[AlertEvent]) -> list[AlertEvent]:
    """Drop repeated events (same ``event_id``), keeping the first, order preserved."""
    seen: set[str] = set()
    out: list[AlertEvent] = []
    for e in events:
        if e.event_id not in seen:
            seen.add(e.event_id)
            out.append(e)
    return out
