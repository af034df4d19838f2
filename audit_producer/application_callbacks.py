"""The application's callbacks in an audited producer's config, taken out so the audit's own go there.

The audited producer's inner producers report deliveries to
:class:`~audit_producer.delivery_reports.DeliveryReports` and statistics to
:class:`~audit_producer.client_statistics.ClientStatistics`, which count them and then call the application's
callbacks. :func:`take_application_callbacks` takes those out of the application's librdkafka config and sets
what the audit's callbacks need: failures-only delivery reports in ``delivery_reports="errors"`` mode,
and a statistics interval.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from audit_producer.window_counts import DeliveryCallback
from kafka_plumbing.errors import ConfigError

DELIVERY_CALLBACK_KEYS = ("on_delivery", "delivery.report.cb", "dr_cb", "dr_msg_cb")
"""The config keys under which confluent-kafka takes a delivery callback (the first one given counts)."""
STATISTICS_INTERVAL_MS = 5_000
"""``statistics.interval.ms`` unless the application's config sets it, ms (network and leaders need it)."""


@dataclass(frozen=True, slots=True)
class ApplicationCallbacks:
    """The callbacks of the application's config, called after the audit's own have counted.

    Attributes:
        on_delivery: The delivery callback (``on_delivery(err, msg)``), None if none was given.
        stats_cb: The statistics callback (``stats_cb(json_text)``), None if none was given.
        statistics_interval_ms: ``statistics.interval.ms`` of the config, ms (0: no statistics).
    """

    on_delivery: DeliveryCallback | None
    stats_cb: Callable[[str], None] | None
    statistics_interval_ms: int


def take_application_callbacks(cfg: dict[str, Any], delivery_reports: str) -> ApplicationCallbacks:
    """Take the application's delivery and statistics callbacks out of ``cfg`` (in place); return them.

    Also sets, in ``cfg``, ``delivery.report.only.error`` in ``delivery_reports="errors"`` mode and
    ``statistics.interval.ms`` (:data:`STATISTICS_INTERVAL_MS`) unless the application set it.

    Args:
        cfg: The application's librdkafka producer config (a copy the audited producer owns).
        delivery_reports: The audit's delivery-report mode, ``"all"`` or ``"errors"``.

    Raises:
        ConfigError: if ``delivery_reports="errors"`` is combined with a delivery callback in ``cfg``.
    """
    stats_cb: Callable[[str], None] | None = cfg.pop("stats_cb", None)
    on_delivery = next((cfg.pop(k) for k in DELIVERY_CALLBACK_KEYS if k in cfg), None)
    if delivery_reports == "errors":
        if on_delivery is not None:
            raise ConfigError(
                "delivery_reports='errors' cannot be combined with a delivery callback in the config "
                "(allowed: delivery_reports='all' when you pass on_delivery)"
            )
        cfg["delivery.report.only.error"] = True
    cfg.setdefault("statistics.interval.ms", STATISTICS_INTERVAL_MS)
    return ApplicationCallbacks(on_delivery, stats_cb, int(cfg.get("statistics.interval.ms") or 0))
