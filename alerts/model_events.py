"""Predictor model decisions as events of the alerts topic.

The live job's background retraining ends with a champion / challenger decision
(``predictor.promotion.Decision.to_json()``, recorded in the model registry's ``decisions.jsonl``);
the driver reads new decisions at a micro-batch boundary and hands each one, a dict, to the
``ReconciliationJob.decision_listeners``. :func:`alerts.batch_listener.attach_to_job` adds one that turns it
into one :class:`~alerts.event.AlertEvent` (:func:`decision_event`), so the decision lands in the
alerts topic beside the alerts, in the same Avro record (``alert.avsc``, unchanged) that every reader
of the topic already decodes:

=================  ==============================================================================
field              value
=================  ==============================================================================
``alertname``      ``KafkaAuditModelPromoted`` or ``KafkaAuditModelRejected``
``topic``          ``""`` (a model serves every topic)
``tier``           ``model:<challenger version>``, e.g. ``model:v0003``
``severity``       ``info``
``status``         ``resolved``: ``starts_at_ms`` = ``ends_at_ms`` = ``event_at_ms`` = ``decided_at_ms``
``value``          the challenger's MAE(P_l) on the held-back local windows (fraction)
``threshold``      the champion's MAE(P_l) there minus the margin: what the challenger had to beat
``numbers``        the decision's ``numbers`` (``mae_local_champion``, ``mae_local_challenger``,
                   ``mae_paper_champion``, ``mae_paper_challenger``, ``coverage_local_challenger``,
                   ``n_local_test``, ``margin``, ``tolerance``) and ``rows_<source>`` per training source
``summary``        one line: who won, the two MAEs
``description``    every number and the reasons, in words
=================  ==============================================================================

The event is an event, not an alert: it never fires, so it is sent to the alerts topic only (not to
Alertmanager, whose receivers would page on it, nor to the webhook). Re-sending a decision gives the
same event (same fingerprint over alertname / topic / tier / severity, same ``starts_at_ms``), so a
reader deduplicates it by ``event_id`` like any alert event.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from alerts.event import MODEL_PROMOTED, MODEL_REJECTED, AlertEvent

MODEL_TIER_PREFIX = "model:"
"""``tier`` of a model decision event: ``model:<challenger version>``."""


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _fmt(value: float | None, spec: str = ".4f") -> str:
    return "?" if value is None else format(value, spec)


def decision_event(decision: Mapping[str, Any], generator_url: str | None = None) -> AlertEvent:
    """Return the alerts-topic event of one champion / challenger decision.

    Args:
        decision: ``Decision.to_json()``: ``decided_at_ms`` (ms since the Unix epoch),
            ``challenger_version``, ``champion_version``, ``promoted`` (bool), ``reasons`` (list of
            text), ``numbers`` (name -> number: MAEs are fractions of messages, coverage a fraction,
            ``n_local_test`` a count), ``rows_by_source`` (source -> training rows). Missing entries
            show as ``?``; ``decided_at_ms`` defaults to now.
        generator_url: Link back (e.g. the model dashboard), if configured.

    Returns:
        A resolved ``info`` event (see the module docstring for its fields).
    """
    at_ms = int(decision.get("decided_at_ms") or time.time() * 1000)
    promoted = bool(decision.get("promoted"))
    challenger = str(decision.get("challenger_version") or "?")
    champion = str(decision.get("champion_version") or "?")
    raw_numbers = decision.get("numbers") or {}
    numbers = {str(k): v for k, raw in raw_numbers.items() if (v := _number(raw)) is not None}
    for source, rows in (decision.get("rows_by_source") or {}).items():
        if (n := _number(rows)) is not None:
            numbers[f"rows_{source}"] = n
    mae_new, mae_old = numbers.get("mae_local_challenger"), numbers.get("mae_local_champion")
    paper_new, paper_old = numbers.get("mae_paper_challenger"), numbers.get("mae_paper_champion")
    coverage, n_test = numbers.get("coverage_local_challenger"), numbers.get("n_local_test")
    margin, tolerance = numbers.get("margin"), numbers.get("tolerance")
    reasons = [str(r) for r in decision.get("reasons") or []]
    if promoted:
        summary = (
            f"model {challenger} promoted over {champion}: live MAE(P_l) {_fmt(mae_new)} vs {_fmt(mae_old)}"
        )
    else:
        summary = (
            f"model {challenger} rejected, {champion} keeps serving: live MAE(P_l) {_fmt(mae_new)} "
            f"vs {_fmt(mae_old)}"
        )
    rows = ", ".join(f"{s} {_fmt(n, ',.0f')}" for s, n in (decision.get("rows_by_source") or {}).items())
    description = (
        f"Challenger {challenger} against champion {champion} on the newest "
        f"{_fmt(n_test, '.0f')} local window(s), never trained on: MAE(P_l) {_fmt(mae_new)} vs "
        f"{_fmt(mae_old)} (must be lower by the margin {_fmt(margin)}); on the paper's held-back split "
        f"{_fmt(paper_new)} vs {_fmt(paper_old)} (may be worse by at most {_fmt(tolerance)}); 90% interval "
        f"coverage {_fmt(coverage, '.1%') if coverage is not None else '?'} (must lie in 80-97%). "
        f"{'Promoted' if promoted else 'Rejected'}: {'; '.join(reasons) or 'no reasons given'}."
        + (f" Training rows by source: {rows}." if rows else "")
    )
    threshold = mae_old - margin if mae_old is not None and margin is not None else mae_old
    return AlertEvent.decision(
        MODEL_PROMOTED if promoted else MODEL_REJECTED,
        f"{MODEL_TIER_PREFIX}{challenger}",
        at_ms,
        topic="",
        summary=summary,
        description=description,
        value=mae_new,
        threshold=threshold,
        numbers=numbers,
        generator_url=generator_url,
    )
