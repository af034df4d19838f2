"""Alert rules, their state machine, and sinks (alerts topic, Alertmanager, webhook).

Public surface::

    from alerts import AlertPipeline, AlertSettings
    pipeline = AlertPipeline(AlertSettings(), registry)       # engine + dispatcher + metrics
    events = pipeline.process(window_results, now_ms)          # once per micro-batch, on the driver

or the parts: :class:`AlertEngine` (``observe(results, now_ms) -> list[AlertEvent]``),
:class:`Dispatcher` (``dispatch(events, now_ms)``), :class:`AlertMetrics` (``update_firing(...)``).
"""

from alerts.dispatch import Dispatcher, sinks_from_settings
from alerts.engine import AlertEngine
from alerts.event import ALERT_NAMES, AlertEvent, AlertStatus
from alerts.metrics import AlertMetrics
from alerts.pipeline import AlertPipeline
from alerts.settings import AlertSettings
from alerts.state import AlertState, AlertStateMachine

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
    "sinks_from_settings",
]
