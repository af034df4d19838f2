"""Is the serving model calibrated for this deployment? Rolling live MAE(P_l) and interval coverage.

The driver of the reconciliation job keeps, per model version, the last ``windows`` final windows it
predicted (P_l with its 90% interval, and the measured R_l). Before a final predicted window is
written it gets ``model_calibrated``: True iff its version has at least :data:`MIN_WINDOWS` windows
(or ``windows``, if fewer) in the rolling window and their MAE(P_l) = mean |P_l - R_l| is below
``max_mae``, judged *before* the window itself is added. A freshly promoted version therefore starts
"calibrating". The drift alert fires only on calibrated windows (``docs/DESIGN.md``, "Model
lifecycle").

Pure Python; the state is a JSON-able dict (:meth:`CalibrationMonitor.to_state`) that the job saves in
its checkpoint directory (:mod:`spark_streaming.live_model`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

from audit_record import window_result

MIN_WINDOWS = 10
"""Windows a model version needs in the rolling window before it can count as calibrated."""
MAX_VERSIONS = 8
"""Model versions remembered (the newest ones seen); older ones are forgotten."""


def _number(x: Any) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


@dataclass(frozen=True)
class ModelStats:
    """One model version's live numbers over its rolling window.

    Attributes:
        version: The model version.
        windows: Final windows in the rolling window.
        mae: Mean |P_l - R_l| over them (None without windows), fraction.
        coverage: Share of them with R_l inside [p_loss_lo, p_loss_hi] (None without any interval).
        calibrated: ``windows`` >= the minimum and ``mae`` < the threshold.
    """

    version: str
    windows: int
    mae: float | None
    coverage: float | None
    calibrated: bool


class CalibrationMonitor:
    """Per model version, the rolling window of (P_l, lo, hi, R_l) of its final windows.

    Args:
        windows: Rolling window length, final windows per model version (>= 1).
        max_mae: Calibrated while the rolling MAE(P_l) is below this (fraction).
        state: A :meth:`to_state` dict to continue from (None: empty).
    """

    def __init__(self, windows: int = 30, max_mae: float = 0.05, state: dict[str, Any] | None = None) -> None:
        if windows < 1:
            raise ValueError(f"windows must be >= 1, got {windows}")
        self.windows = windows
        self.max_mae = max_mae
        self.min_windows = min(MIN_WINDOWS, windows)
        self._seen: dict[str, deque[tuple[float, float | None, float | None, float]]] = {}
        for version, entries in ((state or {}).get("versions") or {}).items():
            q = self._queue(str(version))
            for e in entries:
                q.append((float(e[0]), _number(e[1]), _number(e[2]), float(e[3])))

    def _queue(self, version: str) -> deque[tuple[float, float | None, float | None, float]]:
        q = self._seen.pop(version, None)
        if q is None:
            q = deque(maxlen=self.windows)
        self._seen[version] = q  # most recently used last
        while len(self._seen) > MAX_VERSIONS:
            del self._seen[next(iter(self._seen))]
        return q

    def stats(self, version: str) -> ModelStats:
        """Return ``version``'s numbers now (an unseen version: no windows, not calibrated)."""
        q = self._seen.get(version) or ()
        n = len(q)
        mae = sum(abs(p - actual) for p, _, _, actual in q) / n if n else None
        judged = [(lo, hi, actual) for _, lo, hi, actual in q if lo is not None and hi is not None]
        coverage = sum(lo <= actual <= hi for lo, hi, actual in judged) / len(judged) if judged else None
        calibrated = n >= self.min_windows and mae is not None and mae < self.max_mae
        return ModelStats(version, n, mae, coverage, calibrated)

    def versions(self) -> list[str]:
        """Return the versions remembered, least recently seen first."""
        return list(self._seen)

    def annotate(self, rows: Iterable[MutableMapping[str, Any]]) -> int:
        """Set ``model_calibrated`` on the final predicted rows and add them to their version's window.

        A row counts if it is final and carries ``model_version``; it gets the version's status from
        before it is added. It is added when it has ``p_loss`` and ``loss_rate``. Rows are taken in
        window order (end, topic, tier), so the outcome does not depend on the order given.

        Returns:
            The number of rows added to a rolling window.
        """
        added = 0
        chosen = [
            r for r in rows if r.get("state") == window_result.FINAL and r.get("model_version") is not None
        ]
        for r in sorted(chosen, key=lambda r: (r["window_end_ms"], r["topic"], r["tier"])):
            version = str(r["model_version"])
            r["model_calibrated"] = self.stats(version).calibrated
            p, actual = _number(r.get("p_loss")), _number(r.get("loss_rate"))
            if p is None or actual is None:
                continue
            self._queue(version).append((p, _number(r.get("p_loss_lo")), _number(r.get("p_loss_hi")), actual))
            added += 1
        return added

    def to_state(self) -> dict[str, Any]:
        """Return the rolling windows as a JSON-able dict (see the constructor's ``state``)."""
        return {"versions": {v: [list(e) for e in q] for v, q in self._seen.items()}}
