"""Control-loop decisions as events: in the alerts topic and as info alerts in Alertmanager.

The control loop (:mod:`control_loop.loop`) hands every decision
(``control_loop.decide.ControlDecision.to_json()``) to ``ReconciliationJob.control_listeners``;
:func:`alerts.batch_listener.attach_to_job` adds :meth:`alerts.batch_listener.AlertPipeline.on_control`, which
turns it into one :class:`~alerts.event.AlertEvent` (:func:`control_event`) of the unchanged
``alert.avsc``:

=================  ==============================================================================
field              value
=================  ==============================================================================
``alertname``      by kind: ``change`` :data:`~alerts.event.CONFIG_CHANGED`, ``rollback``
                   :data:`~alerts.event.CONFIG_ROLLED_BACK`, ``kept`` :data:`~alerts.event.CONFIG_KEPT`,
                   ``advice`` :data:`~alerts.event.CONFIG_ADVICE`, ``held`` with reason ``not_applied``
                   :data:`~alerts.event.CONFIG_NOT_APPLIED`; the other ``held`` decisions (a guardrail
                   held a suggestion back: bounds, margin, dwell, ...) are no event, only counted
                   (``kafka_audit_control_decisions_total``)
``topic``          the topic of the deciding window result (``""`` if none)
``tier``           ``control:<group>``
``severity``       ``info``
``status``         ``resolved``: ``starts_at_ms`` = ``ends_at_ms`` = ``event_at_ms`` = ``decided_at_ms``
``value``          gamma after (0-1): predicted for ``change`` / ``advice``, measured over the k windows
                   after the change for ``rollback`` / ``kept`` / not applied
``threshold``      gamma before, of the same kind (what "after" is compared with)
``numbers``        ``predicted_gamma_before``, ``predicted_gamma_after``, ``measured_gamma_before``,
                   ``measured_gamma_after``, ``gamma_target`` (0-1), ``packet_loss_pct`` (L, percent),
                   ``delay_ms`` (D, ms), ``version``, and ``from_<property>`` / ``to_<property>`` of the
                   numeric properties (``acks`` as 0, 1, -1 for all); for a change or advice how sure the
                   suggestion is (issue 39): ``suggestion_loco_mae_p_loss`` (the model's counterfactual
                   MAE(P_l)) and ``suggestion_calibrated`` (1, or 0: uncalibrated)
``suggestion``     the change in words, e.g. ``batch.num.messages 1→4``; for a change or advice with how
                   sure it is, e.g. ``batch.num.messages 1→4 (uncalibrated: no counterfactual score)``
``summary``        one line: group, what, gamma before → after
``description``    the decision's detail with L and D
=================  ==============================================================================

A re-sent decision is the same event (same fingerprint and ``starts_at_ms``), deduplicated by
``event_id``. For Alertmanager the event is posted with ``endsAt`` = decision time +
``AlertSettings.control_alert_ttl_ms`` (:func:`alertmanager_copy`), so it shows as an active ``info``
alert for that long and then resolves by itself; never re-posted. The webhook gets none.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from typing import Any

from alerts.event import (
    CONFIG_ADVICE,
    CONFIG_CHANGED,
    CONFIG_KEPT,
    CONFIG_NOT_APPLIED,
    CONFIG_ROLLED_BACK,
    AlertEvent,
)
from control_loop.decide import confidence_words

CONTROL_TIER_PREFIX = "control:"
"""``tier`` of a control-loop event: ``control:<group>``."""

_NAMES = {
    "change": CONFIG_CHANGED,
    "rollback": CONFIG_ROLLED_BACK,
    "kept": CONFIG_KEPT,
    "advice": CONFIG_ADVICE,
}
_PROPERTY_NUMBERS = (
    "acks",
    "batch.num.messages",
    "linger.ms",
    "message.timeout.ms",
    "poll_interval_ms",
    "producers",
)


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(-1 if value == "all" else value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "?" if value is None else format(value, spec)


def alertname_of(decision: Mapping[str, Any]) -> str | None:
    """Return the event's alertname of a decision (``to_json()``), None if it is no event."""
    kind = decision.get("kind")
    if kind == "held":
        return CONFIG_NOT_APPLIED if decision.get("reason") == "not_applied" else None
    return _NAMES.get(str(kind))


def _changes(decision: Mapping[str, Any]) -> str:
    before, after = decision.get("from_config") or {}, decision.get("to_config") or {}
    changed = decision.get("changes")
    if changed is None:
        changed = {p: v for p, v in after.items() if v is not None and v != before.get(p)}
    return ", ".join(f"{p} {before.get(p)}→{v}" for p, v in changed.items())


def control_event(decision: Mapping[str, Any], generator_url: str | None = None) -> AlertEvent | None:
    """Return the alerts-topic event of one control-loop decision, None for a decision that is no event.

    Args:
        decision: ``ControlDecision.to_json()``: ``group``, ``kind``, ``reason``, ``detail``,
            ``decided_at_ms`` (ms since the Unix epoch; default now), ``version``, ``from_config`` /
            ``to_config`` (librdkafka property -> value), ``changes``, the gammas (0-1),
            ``packet_loss_pct`` (L, percent), ``delay_ms`` (D, ms), ``topic``, ``window_start_ms``,
            ``window_end_ms``. Missing numbers show as ``?``.
        generator_url: Link back (e.g. the dashboard), if configured.

    Returns:
        A resolved ``info`` event (see the module docstring), or None.
    """
    name = alertname_of(decision)
    if name is None:
        return None
    at_ms = int(decision.get("decided_at_ms") or time.time() * 1000)
    kind = str(decision.get("kind"))
    group = str(decision.get("group") or "?")
    numbers: dict[str, float] = {}
    for key in (
        "predicted_gamma_before",
        "predicted_gamma_after",
        "measured_gamma_before",
        "measured_gamma_after",
        "gamma_target",
        "packet_loss_pct",
        "delay_ms",
        "version",
        "suggestion_loco_mae_p_loss",
    ):
        if (n := _number(decision.get(key))) is not None:
            numbers[key] = n
    for side in ("from", "to"):
        config = decision.get(f"{side}_config") or {}
        for prop in _PROPERTY_NUMBERS:
            if (n := _number(config.get(prop))) is not None:
                numbers[f"{side}_{prop.replace('.', '_')}"] = n
    predicted = kind in ("change", "advice")
    which = "predicted" if predicted else "measured"
    before, after = numbers.get(f"{which}_gamma_before"), numbers.get(f"{which}_gamma_after")
    changes = _changes(decision)
    suggestion = changes
    if predicted and decision.get("suggestion_calibrated") is not None:  # a decision on a suggestion
        numbers["suggestion_calibrated"] = 1.0 if decision["suggestion_calibrated"] else 0.0
        suggestion = f"{changes} ({confidence_words(decision)})" if changes else changes
    version = decision.get("version")
    what = {
        "change": f"configuration v{version} written",
        "rollback": f"rolled back to the previous configuration (v{version})",
        "kept": f"change v{version} kept",
        "advice": "change advised, not written",
    }.get(kind, f"configuration v{version} not applied by the producers")
    summary = f"group {group}: {what}" + (f" ({changes})" if changes else "")
    summary += f"; {which} gamma {_fmt(before)} → {_fmt(after)}"
    description = (
        f"{decision.get('detail') or summary}. Network when decided: "
        f"L {_fmt(numbers.get('packet_loss_pct'), '.2f')}% "
        f"packet loss, D {_fmt(numbers.get('delay_ms'), '.1f')} ms delay. Measured gamma before "
        f"{_fmt(numbers.get('measured_gamma_before'))}, after {_fmt(numbers.get('measured_gamma_after'))}; "
        f"mode {decision.get('mode') or '?'}."
    )
    return AlertEvent.decision(
        name,
        f"{CONTROL_TIER_PREFIX}{group}",
        at_ms,
        topic=str(decision.get("topic") or ""),
        summary=summary,
        description=description,
        window_start_ms=decision.get("window_start_ms"),
        window_end_ms=decision.get("window_end_ms"),
        value=after,
        threshold=before,
        numbers=numbers,
        suggestion=suggestion or None,
        generator_url=generator_url,
    )


def alertmanager_copy(event: AlertEvent, ttl_ms: int) -> AlertEvent:
    """Return the Alertmanager form of a control event: active until ``starts_at_ms + ttl_ms`` (ms).

    Alertmanager shows an alert whose ``endsAt`` lies ahead as active and resolves it by itself then;
    :class:`~alerts.sinks.alertmanager.AlertmanagerSink` posts a resolved event once with ``endsAt`` =
    its ``ends_at_ms`` and never re-posts it.
    """
    return dataclasses.replace(event, ends_at_ms=event.starts_at_ms + ttl_ms)


__all__ = ["CONTROL_TIER_PREFIX", "alertmanager_copy", "alertname_of", "control_event"]
