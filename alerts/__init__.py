"""Alert rules, their state machine, and sinks (alerts topic, Alertmanager, webhook).

Public surface::

    from alerts import AlertPipeline, AlertSettings
    pipeline = AlertPipeline(AlertSettings(), registry)       # engine + dispatcher + metrics
    events = pipeline.process(window_results, now_ms)          # once per micro-batch, on the driver

or the parts: :class:`AlertEngine` (``observe(results, now_ms) -> list[AlertEvent]``),
:class:`Dispatcher` (``dispatch(events, now_ms)``), :class:`AlertMetrics` (``update_firing(...)``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alerts.batch_listener import AlertPipeline, attach_to_job
    from alerts.dispatch import Dispatcher, sinks_from_settings
    from alerts.engine import AlertEngine
    from alerts.event import ALERT_NAMES, AlertEvent, AlertStatus
    from alerts.metrics import AlertMetrics
    from alerts.settings import AlertSettings
    from alerts.state_machine import AlertState, AlertStateMachine

_EXPORTS = {
    "ALERT_NAMES": "alerts.event",
    "AlertEngine": "alerts.engine",
    "AlertEvent": "alerts.event",
    "AlertMetrics": "alerts.metrics",
    "AlertPipeline": "alerts.batch_listener",
    "AlertSettings": "alerts.settings",
    "AlertState": "alerts.state_machine",
    "AlertStateMachine": "alerts.state_machine",
    "AlertStatus": "alerts.event",
    "Dispatcher": "alerts.dispatch",
    "attach_to_job": "alerts.batch_listener",
    "sinks_from_settings": "alerts.dispatch",
}
__all__ = [
    "ALERT_NAMES",
    "AlertEngine",
    "AlertEvent",
    "AlertMetrics",
    "AlertPipeline",
    "AlertSettings",
    "AlertState",
    "AlertStateMachine",
    "AlertStatus",
    "Dispatcher",
    "attach_to_job",
    "sinks_from_settings",
]


def __getattr__(name: str) -> Any:
    """Import the public names on first use, so ``kafka-audit --help`` does not load the sinks."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'alerts' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
