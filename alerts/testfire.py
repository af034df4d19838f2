"""``kafka-audit alerts test-fire``: send one test alert through every sink, check it, then resolve it."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

from alerts.event import TEST_ALERT, AlertEvent, AlertStatus
from alerts.exceptions import AlertSinkError
from alerts.sinks._http import get_json
from alerts.sinks.base import AlertSink


@dataclass(frozen=True)
class Step:
    """One step of the test: which sink, what was done, whether it worked."""

    sink: str
    action: str
    ok: bool
    detail: str = ""


def make_test_alert(topic: str, tier: str, now_ms: int, generator_url: str | None = None) -> AlertEvent:
    """Return the firing test alert (alertname ``KafkaAuditTestAlert``, severity warning)."""
    return AlertEvent(
        alertname=TEST_ALERT,
        topic=topic,
        tier=tier,
        severity="warning",
        status=AlertStatus.FIRING,
        starts_at_ms=now_ms,
        event_at_ms=now_ms,
        summary=f"{topic} ({tier}): test alert from kafka-audit alerts test-fire",
        description="A test alert; it resolves by itself a moment later. Nothing is wrong.",
        window_start_ms=now_ms - now_ms % 60_000,
        window_end_ms=now_ms - now_ms % 60_000 + 60_000,
        value=1.0,
        threshold=0.0,
        suggestion="nothing to change: this is a test",
        generator_url=generator_url,
    )


def _in_alertmanager(url: str, event: AlertEvent, timeout_s: float) -> bool:
    query = urllib.parse.urlencode(
        [("filter", f'alertname="{event.alertname}"'), ("filter", f'topic="{event.topic}"')]
    )
    alerts = get_json("alertmanager", f"{url.rstrip('/')}/api/v2/alerts?{query}", timeout_s)
    return any(a.get("labels", {}).get("tier") == event.tier for a in alerts or [])


def _wait_alertmanager(url: str, event: AlertEvent, present: bool, timeout_s: float) -> Step:
    action = "visible in Alertmanager" if present else "gone from Alertmanager"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if _in_alertmanager(url, event, 5.0) == present:
                return Step("alertmanager", action, True)
        except AlertSinkError as exc:
            return Step("alertmanager", action, False, str(exc))
        if time.monotonic() > deadline:
            return Step("alertmanager", action, False, f"not within {timeout_s:.0f} s")
        time.sleep(0.25)


def fire_test_alert(
    sinks: Sequence[AlertSink],
    topic: str = "kafka-audit.test",
    tier: str = "cluster:test",
    alertmanager_url: str | None = None,
    hold_s: float = 0.0,
    verify_timeout_s: float = 15.0,
    generator_url: str | None = None,
) -> list[Step]:
    """Fire a test alert through ``sinks``, check Alertmanager shows it, resolve it, check it is gone.

    Args:
        sinks: Destinations (e.g. :func:`alerts.dispatch.sinks_from_settings`).
        topic: ``topic`` label of the test alert.
        tier: ``tier`` label of the test alert.
        alertmanager_url: Checked with ``GET /api/v2/alerts`` when given.
        hold_s: How long the alert stays firing before it is resolved, s.
        verify_timeout_s: Deadline of each Alertmanager check, s.
        generator_url: ``generatorURL`` of the test alert.

    Returns:
        The steps in order; every ``ok`` True means every sink works.
    """
    steps: list[Step] = []
    firing = make_test_alert(topic, tier, int(time.time() * 1000), generator_url)
    for phase, event in (("fire", firing), ("resolve", None)):
        if event is None:
            if hold_s > 0:
                time.sleep(hold_s)
            now = max(int(time.time() * 1000), firing.starts_at_ms)
            event = firing.resolved(now)
        for sink in sinks:
            try:
                sink.send([event], event.event_at_ms)
                steps.append(Step(sink.name, f"{phase}: sent", True))
            except AlertSinkError as exc:
                steps.append(Step(sink.name, f"{phase}: sent", False, str(exc)))
        if alertmanager_url and any(s.name == "alertmanager" for s in sinks):
            steps.append(_wait_alertmanager(alertmanager_url, event, event.firing, verify_timeout_s))
    return steps
