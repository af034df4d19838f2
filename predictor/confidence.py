"""How sure a suggestion is: the counterfactual score of the model that made it (issue 39 item 5).

A suggestion asks the model about a configuration the deployment has not run. How well a model does
there is what its leave-one-configuration-out score measured (:mod:`predictor.counterfactual`): at its
promotion, each fold was retrained as the model was, without one producer configuration's windows, and
scored on them. The card keeps it (``metrics.loco``: the folds, each with its held-out configuration,
and ``loco_mae_p_loss_challenger``, the mean MAE(P_l) over folds of the model's retraining).

:func:`confidence` returns, for a suggested configuration, that score and whether the model was scored
on *such* a configuration: every model input the configuration sets (:data:`CONFIGURATION_FEATURES`:
acks, ``batch.num.messages``, ``message.timeout.ms``, the polling interval) takes a value its folds held
out (acks: one of them; the others: within their smallest and largest). Outside, the suggestion is
*uncalibrated*: the score is the model's on other configurations, the suggestion an extrapolation. A
model without a score (the shipped model, a promotion without folds or with a single configuration in
the store) is uncalibrated everywhere. The number of producers is not a model input (it sizes the
stream's arrival rate on the producers' throughput), so it does not enter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from predictor.counterfactual import CONFIGURATION_FEATURES


@dataclass(frozen=True)
class Confidence:
    """A suggestion's counterfactual score.

    Attributes:
        loco_mae_p_loss: The model's leave-one-configuration-out MAE(P_l), fraction (None: no score).
        calibrated: The suggested configuration lies within the configurations its folds held out.
        folds: The folds the score rests on (0: none).
    """

    loco_mae_p_loss: float | None
    calibrated: bool
    folds: int

    def words(self) -> str:
        """Return it in words: ``counterfactual MAE(P_l) 0.031`` or ``uncalibrated: ...``."""
        if self.loco_mae_p_loss is None:
            return "uncalibrated: no counterfactual score"
        score = f"counterfactual MAE(P_l) {self.loco_mae_p_loss:.3f}"
        return score if self.calibrated else f"uncalibrated: {score} on other configurations"


NO_SCORE = Confidence(None, False, 0)
"""A model without a counterfactual score: uncalibrated everywhere."""


def scored_configurations(card: Mapping[str, Any] | None) -> list[dict[str, float]]:
    """Return the held-out configurations of a card's folds as ``{feature: value}`` (empty: none)."""
    loco = ((card or {}).get("metrics") or {}).get("loco") or {}
    out = []
    for fold in loco.get("folds") or ():
        parts = dict(p.split("=", 1) for p in str(fold.get("configuration", "")).split(",") if "=" in p)
        try:
            values = {name: float(parts[name]) for name in CONFIGURATION_FEATURES}
        except (KeyError, ValueError):  # a card from another layout: not evidence
            continue
        out.append(values)
    return out


def confidence(card: Mapping[str, Any] | None, configuration: Mapping[str, float]) -> Confidence:
    """Return the counterfactual score of a model (its ``card``) for a suggested ``configuration``.

    Args:
        card: The model's card (``Predictor.card``); None: no score.
        configuration: The suggested configuration's model inputs by feature name
            (:data:`CONFIGURATION_FEATURES`; acks as 0/1), e.g. ``{"acks": 1, "batch_num_messages": 4,
            "message_timeout_ms": 3000, "poll_interval_ms": 0}``.
    """
    loco = ((card or {}).get("metrics") or {}).get("loco") or {}
    raw = loco.get("loco_mae_p_loss_challenger")
    score = float(raw) if isinstance(raw, int | float) and math.isfinite(raw) else None
    scored = scored_configurations(card)
    if score is None or not scored:
        return Confidence(score, False, len(scored))

    def within(name: str) -> bool:
        value, seen = float(configuration[name]), [c[name] for c in scored]
        return value in seen if name == "acks" else min(seen) <= value <= max(seen)

    return Confidence(score, all(within(n) for n in CONFIGURATION_FEATURES), len(scored))


__all__ = ["NO_SCORE", "Confidence", "confidence", "scored_configurations"]
