"""What an alert rule returns: its judgement of one window or evaluation, and its description.

A rule turns its input into an :class:`Observation` (bad / good / unknown, value, threshold, text) that
the engine feeds to the alert's state machine (:mod:`alerts.state_machine`), and describes itself as a
:class:`RuleInfo` (``kafka-audit alerts rules``). The readings of a final window result
(``audit_record/window_result.avsc``) that every window rule shares are here too: its numbers, its place
in words, its configuration suggestion, and the observation of it. Fractions are 0-1; times are ms
since the epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from alerts.event import Severity
from audit_record import window_result

NUMBER_FIELDS: tuple[str, ...] = window_result.SUMMARY_NUMBERS
"""Window-result fields copied into an alert's ``numbers`` when present."""


@dataclass(frozen=True)
class Observation:
    """One judgement of one rule.

    Attributes:
        bad: True if the alert condition holds, False if not, None if it cannot be judged.
        value: Measured value (rule's unit); threshold: what it was compared with.
        summary, description: Human text.
        window_start_ms, window_end_ms: The window judged, ms since the epoch (None: none).
        numbers: Window numbers (see :data:`NUMBER_FIELDS`).
        suggestion: The window's configuration suggestion, if any.
        attribution: The partitions that lost the most and their leader brokers, most first (dicts with
            ``partition``, ``leader``, ``lost``, ``failed``; ``window_result.partition_losses``).
    """

    bad: bool | None
    value: float | None = None
    threshold: float | None = None
    summary: str = ""
    description: str = ""
    window_start_ms: int | None = None
    window_end_ms: int | None = None
    numbers: dict[str, float] = field(default_factory=dict)
    suggestion: str | None = None
    attribution: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class RuleInfo:
    """What ``kafka-audit alerts rules`` prints for one rule."""

    alertname: str
    severity: Severity
    condition: str
    threshold: str
    fire_after: str
    resolve_after: str


def number_field(result: Mapping[str, Any], name: str) -> float | None:
    """Return ``result[name]`` as a float; None when missing, a bool, or not a number."""
    value = result.get(name)
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def window_numbers(result: Mapping[str, Any]) -> dict[str, float]:
    """Return the :data:`NUMBER_FIELDS` that ``result`` has, as floats."""
    return {k: v for k in NUMBER_FIELDS if (v := number_field(result, k)) is not None}


def utc_text(ms: int | None) -> str:
    """Return epoch milliseconds ``ms`` as ``YYYY-MM-DD HH:MM:SS UTC`` (``?`` for None)."""
    if ms is None:
        return "?"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def window_place(result: Mapping[str, Any]) -> str:
    """Return where a window result is, in words: ``topic (tier), window <start UTC>``."""
    return f"{result['topic']} ({result['tier']}), window {utc_text(result.get('window_start_ms'))}"


def window_suggestion(result: Mapping[str, Any]) -> str | None:
    """Return the window's configuration suggestion, or None if it has none (missing or empty)."""
    text = result.get("suggestion")
    return str(text) if text else None


def window_observation(result: Mapping[str, Any], **kw: Any) -> Observation:
    """Return an :class:`Observation` of the window ``result`` (its bounds, numbers and suggestion).

    Args:
        result: A window result.
        **kw: The other :class:`Observation` fields (``bad`` at least); ``suggestion`` defaults to the
            window's.
    """
    kw.setdefault("suggestion", window_suggestion(result))
    return Observation(
        window_start_ms=result.get("window_start_ms"),
        window_end_ms=result.get("window_end_ms"),
        numbers=window_numbers(result),
        **kw,
    )
