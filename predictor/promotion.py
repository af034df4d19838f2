"""Champion / challenger: retrain, compare on the same held-back windows, promote only a better model.

A challenger (:func:`predictor.retrain.retrain`, warm-started from the champion) replaces the champion
only if all five hold (:func:`decide`):

(a) its MAE of P_l on the held-back recent local windows (the newest 20% of the training store, never
    trained or calibrated on) is below the champion's on the same windows by more than ``margin``
    (default :data:`MARGIN` = 0.002, a fifth of the shipped model's paper MAE: smaller gains are
    within the seed-to-seed spread), and either below that of a constant (the training windows'
    median R_l, :func:`predictor.retrain.baseline_mae`) by the same margin or at most
    ``calibrated_mae`` (default :data:`CALIBRATED_MAE` = 0.05, the live job's
    ``calibration_max_mae``: a model that good on the newest windows is calibrated for the deployment
    by the job's own rule). A champion that describes another network can be worse than a constant,
    and a challenger that learnt nothing about which window loses what (labels shuffled between
    windows) predicts about that constant, which is why the constant is asked for; but where the
    newest windows lost (almost) nothing, the constant (0) is nearly exact and no model beats it by a
    margin, so without the second branch a healthy deployment would keep a champion many times worse
    forever (testbed round 6, 500 messages/s: a challenger with MAE 0.028 was rejected against a
    constant's 0.003 while the shipped champion scored 0.184);
(b) its MAE of P_l on the paper's held-back split is not worse than the champion's by more than
    ``tolerance`` (default :data:`TOLERANCE` = 0.003) and stays within ``paper_mae_max`` (default
    :data:`PAPER_MAE_MAX` = 0.02, the paper's own bar; so successive promotions cannot drift away from
    the paper's measurements tolerance by tolerance);
(c) its 90% interval covers between 80% and 97% of the held-back local windows, judged with the 95%
    Wilson interval of the measured share (:func:`wilson_interval`): on a handful of windows, 100% is
    consistent with a calibrated 90% interval, so (c) fails only when that interval lies wholly outside
    80%-97%;
(d) its counterfactual score, the leave-one-configuration-out MAE(P_l) (:mod:`predictor.counterfactual`:
    a fold retrained as the challenger is, without one configuration's windows, scored on them; mean over
    the ``loco_folds`` most frequent configurations), is not worse than the champion's on the same
    windows by more than ``loco_tolerance`` (default 0.01). Not applied (and said so) while the store
    holds fewer than two configurations. The newest windows ran the configurations the challenger
    trained on, so (a) never measured how it predicts the others (issue 39);
(e) it has the properties of :mod:`predictor.properties` (P_d 0 for acks 0, intervals containing the
    point, P_l non-increasing in ``message.timeout.ms``) on the seeded grid of
    :func:`predictor.properties.check_properties`. The monotonicity property rejects a largest rise
    above the champion's (same inputs) by more than ``timeout_rise_tolerance`` (default 0; the
    ``timeout_rise_*`` numbers report both); models of the shipped lineage never rise, by construction
    (issue 39 item 2, ``ModelSpec.timeout_monotone``), so it stops only a lineage from an unconstrained
    model (:func:`predictor.properties.rejecting_violations`). A rejection names the property and a
    counterexample.

A promoted challenger is served with its interval recalibrated on the calibration and test windows
together (:func:`predictor.conformal.recalibrate`); the decision's numbers stay those of the interval it
judged.

:func:`run_retraining` is the whole background job the live Spark job starts as a subprocess
(``kafka-audit predictor retrain --registry R --from-results T``): it saves every challenger as the next
version, records the decision in the registry's ``decisions.jsonl`` and, if promoted, moves
``champion.json``; the running job picks the new champion up at its next micro-batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from predictor.conformal import recalibrate
from predictor.counterfactual import LocoScore, loco_score
from predictor.model import Predictor
from predictor.properties import (
    PropertyViolation,
    check_properties,
    rejecting_violations,
    trained_ranges,
)
from predictor.registry import ModelRegistry, model_version
from predictor.retrain import DEFAULT_SETTINGS, RetrainResult, baseline_mae, evaluate, retrain
from predictor.settings import CALIBRATED_MAE, LOCO_TOLERANCE, MARGIN, TOLERANCE, RetrainSettings
from predictor.training_store import open_store

log = logging.getLogger(__name__)

PAPER_MAE_MAX = 0.02
"""Criterion (b): the paper held-back MAE(P_l) a promoted model must stay within, fraction."""
COVERAGE_RANGE = (0.80, 0.97)
"""Criterion (c): allowed 90%-interval coverage of P_l on the local test split."""
COVERAGE_CONFIDENCE_Z = 1.96
"""Criterion (c) is judged with the 95% Wilson score interval of the measured coverage (z = 1.96)."""


def wilson_interval(covered: int, n: int, z: float = COVERAGE_CONFIDENCE_Z) -> tuple[float, float]:
    """Return the Wilson score interval (fractions) of a share ``covered / n`` (Wilson 1927).

    On a few test windows a measured coverage says little: 7 of 7 windows covered (100%) is what a
    well-calibrated 90% interval gives half the time. Criterion (c) therefore fails only when this
    interval lies wholly outside :data:`COVERAGE_RANGE`.

    Raises:
        ValueError: if ``n`` < 1 or ``covered`` is not in [0, n].
    """
    if n < 1 or not 0 <= covered <= n:
        raise ValueError(f"covered={covered}, n={n}: need 0 <= covered <= n and n >= 1")
    p = covered / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


ALL_MET = "all criteria met"


@dataclass(frozen=True)
class Decision:
    """One champion/challenger decision (an event: log line, metric, alerts-topic entry, annotation).

    Attributes:
        decided_at_ms: When, ms since the epoch (UTC).
        challenger_version: The challenger's registry version (``v0003``).
        champion_version: The champion's version at the time (``shipped``, ``v0002``).
        promoted: Whether the challenger became the champion.
        reasons: Which of the criteria (a), (b), (c) failed, in words with the numbers; or
            ``["all criteria met"]``.
        numbers: ``mae_local_champion``, ``mae_local_challenger``, ``mae_paper_champion``,
            ``mae_paper_challenger`` (MAE of P_l, fractions), ``coverage_local_challenger`` (share of
            the local test windows inside the 90% interval), ``n_local_test`` (windows), ``margin``,
            ``tolerance`` (fractions), and ``mae_local_baseline`` and ``calibrated_mae`` when the
            constant was checked; with criterion (d) ``loco_mae_p_loss_champion`` /
            ``_challenger``, ``loco_mae_p_dup_*``, ``loco_folds``, ``loco_configurations`` and
            ``loco_tolerance``; ``property_violations`` (count, criterion (e)) and the
            ``timeout_rise_*`` numbers.
        rows_by_source: The challenger's training rows per source (CSV file name or ``local``).
    """

    decided_at_ms: int
    challenger_version: str
    champion_version: str
    promoted: bool
    reasons: tuple[str, ...]
    numbers: dict[str, float]
    rows_by_source: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (one line of the registry's ``decisions.jsonl``)."""
        return {
            "decided_at_ms": self.decided_at_ms,
            "challenger_version": self.challenger_version,
            "champion_version": self.champion_version,
            "promoted": self.promoted,
            "reasons": list(self.reasons),
            "numbers": dict(self.numbers),
            "rows_by_source": dict(self.rows_by_source),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Decision:
        """Inverse of :meth:`to_json`."""
        return cls(
            decided_at_ms=int(d["decided_at_ms"]),
            challenger_version=str(d["challenger_version"]),
            champion_version=str(d["champion_version"]),
            promoted=bool(d["promoted"]),
            reasons=tuple(d["reasons"]),
            numbers=dict(d["numbers"]),
            rows_by_source=dict(d.get("rows_by_source", {})),
        )


def decide(
    champion_metrics: Mapping[str, Mapping[str, Any]],
    challenger_metrics: Mapping[str, Mapping[str, Any]],
    *,
    margin: float = MARGIN,
    tolerance: float = TOLERANCE,
    coverage: tuple[float, float] = COVERAGE_RANGE,
    paper_mae_max: float | None = PAPER_MAE_MAX,
    mae_local_baseline: float | None = None,
    calibrated_mae: float = CALIBRATED_MAE,
    loco: Mapping[str, float] | None = None,
    loco_tolerance: float = LOCO_TOLERANCE,
    property_violations: Sequence[PropertyViolation] = (),
    property_numbers: Mapping[str, float] | None = None,
    challenger_version: str = "",
    champion_version: str = "",
    rows_by_source: Mapping[str, int] | None = None,
    now_ms: int | None = None,
) -> Decision:
    """Decide whether the challenger replaces the champion (criteria (a)-(c) of the module docstring).

    Pure apart from reading the clock when ``now_ms`` is None.

    Args:
        champion_metrics: ``{"local_test": metrics, "paper_heldout": metrics}``
            (:func:`predictor.retrain.evaluate`) of the champion.
        challenger_metrics: The same for the challenger, on the same rows.
        margin: Criterion (a), fraction.
        tolerance: Criterion (b), fraction.
        coverage: Criterion (c), (low, high) shares.
        paper_mae_max: Criterion (b): absolute ceiling of the challenger's paper MAE (None: none).
        mae_local_baseline: Criterion (a): local test MAE of the constant predictor
            (:func:`predictor.retrain.baseline_mae`); the challenger must beat it by ``margin`` too,
            unless its own local MAE is at most ``calibrated_mae`` (None: not checked).
        calibrated_mae: Criterion (a), fraction.
        loco: Criterion (d): :meth:`predictor.counterfactual.LocoScore.numbers` (None or empty: not
            applied, fewer than two configurations seen).
        loco_tolerance: Criterion (d), fraction.
        property_violations: Criterion (e): the challenger's violations that reject it
            (:func:`predictor.properties.rejecting_violations`).
        property_numbers: Criterion (e), for the record: ``timeout_rise_challenger`` /
            ``_champion`` (largest rise of P_l with the timeout on the check's inputs, fractions) and
            ``timeout_rise_tolerance``.
        challenger_version: For the record.
        champion_version: For the record.
        rows_by_source: For the record.
        now_ms: Decision time, ms since the epoch (default now).
    """
    mae_local_champion = float(champion_metrics["local_test"]["mae_p_loss"])
    mae_local = float(challenger_metrics["local_test"]["mae_p_loss"])
    mae_paper_champion = float(champion_metrics["paper_heldout"]["mae_p_loss"])
    mae_paper = float(challenger_metrics["paper_heldout"]["mae_p_loss"])
    cover = float(challenger_metrics["local_test"]["coverage_90_p_loss"])
    reasons = []
    if not mae_local < mae_local_champion - margin:
        reasons.append(
            f"(a) local MAE(P_l) {mae_local:.4f} is not below the champion's {mae_local_champion:.4f} "
            f"by more than {margin:g}"
        )
    elif (
        mae_local_baseline is not None
        and not mae_local < mae_local_baseline - margin
        and not mae_local <= calibrated_mae
    ):
        reasons.append(
            f"(a) local MAE(P_l) {mae_local:.4f} is not below a constant's (the training windows' median "
            f"R_l) {mae_local_baseline:.4f} by more than {margin:g}, nor at most {calibrated_mae:g}"
        )
    if mae_paper > mae_paper_champion + tolerance:
        reasons.append(
            f"(b) paper held-back MAE(P_l) {mae_paper:.4f} is worse than the champion's "
            f"{mae_paper_champion:.4f} by more than {tolerance:g}"
        )
    elif paper_mae_max is not None and mae_paper > paper_mae_max:
        reasons.append(f"(b) paper held-back MAE(P_l) {mae_paper:.4f} exceeds {paper_mae_max:g}")
    lo, hi = coverage
    n_test = int(challenger_metrics["local_test"]["n"])
    cover_lo, cover_hi = wilson_interval(round(cover * n_test), n_test)
    if cover_hi < lo or cover_lo > hi:
        reasons.append(
            f"(c) 90% interval covers {cover:.1%} of {n_test} local test windows (95% Wilson interval "
            f"{cover_lo:.0%}-{cover_hi:.0%}), outside {lo:.0%}-{hi:.0%}"
        )
    loco = dict(loco or {})
    if loco:
        loco_champion, loco_challenger = loco["loco_mae_p_loss_champion"], loco["loco_mae_p_loss_challenger"]
        if loco_challenger > loco_champion + loco_tolerance:
            reasons.append(
                f"(d) counterfactual MAE(P_l) {loco_challenger:.4f} (leave-one-configuration-out, "
                f"{int(loco['loco_folds'])} of {int(loco['loco_configurations'])} configurations) is worse "
                f"than the champion's {loco_champion:.4f} by more than {loco_tolerance:g}"
            )
        loco["loco_tolerance"] = loco_tolerance
    reasons.extend(v.reason() for v in property_violations)
    return Decision(
        decided_at_ms=int(time.time() * 1000) if now_ms is None else int(now_ms),
        challenger_version=challenger_version,
        champion_version=champion_version,
        promoted=not reasons,
        reasons=tuple(reasons) or (ALL_MET,),
        numbers={
            "mae_local_champion": mae_local_champion,
            "mae_local_challenger": mae_local,
            "mae_paper_champion": mae_paper_champion,
            "mae_paper_challenger": mae_paper,
            "coverage_local_challenger": cover,
            "coverage_local_challenger_wilson_lo": cover_lo,
            "coverage_local_challenger_wilson_hi": cover_hi,
            "n_local_test": n_test,
            "margin": margin,
            "tolerance": tolerance,
            **(
                {}
                if mae_local_baseline is None
                else {"mae_local_baseline": mae_local_baseline, "calibrated_mae": calibrated_mae}
            ),
            **loco,
            "property_violations": len(property_violations),
            **dict(property_numbers or {}),
        },
        rows_by_source=dict(rows_by_source or {}),
    )


def challenge(
    champion: Predictor,
    local: Any,
    base_paths: Sequence[Path],
    settings: RetrainSettings = DEFAULT_SETTINGS,
    *,
    champion_version: str,
    challenger_version: str,
) -> tuple[RetrainResult, Decision]:
    """Retrain a challenger from ``champion`` on ``local`` (store rows) + ``base_paths`` and decide.

    Both models are evaluated on the same local test split and paper held-back split, and scored
    leave-one-configuration-out on the same windows (criterion (d),
    :func:`predictor.counterfactual.loco_score`, ``settings.loco_folds`` folds); the challenger's
    properties are checked (criterion (e), :func:`predictor.properties.check_properties`). The
    challenger's card gets ``version``, the champion's numbers (``metrics.champion``), ``metrics.loco``,
    ``metrics.properties`` and the ``decision``; a promoted challenger's interval is then recalibrated
    on the calibration and test windows (:func:`predictor.conformal.recalibrate`; the decision's numbers
    are those of the interval it judged).

    Args:
        champion: The serving model (the challenger starts from it).
        local: The local windows (training-store rows).
        base_paths: Base data CSVs (the paper's ``experiments.csv``, testbed grids).
        settings: How to retrain, and the decision's ``margin``, ``tolerance`` and ``calibrated_mae``.
        champion_version: For the record.
        challenger_version: For the record and the challenger's card.

    Raises:
        ConfigError: as :func:`predictor.retrain.retrain`.
    """
    result = retrain(champion, local, base_paths, settings)
    champion_metrics = evaluate(champion, result.split.test, result.paper_heldout)
    loco: LocoScore = loco_score(champion, local, base_paths, settings)
    ranges = trained_ranges(result.model)
    checked = check_properties(result.model, ranges=ranges)
    champion_checked = check_properties(champion, ranges=ranges)
    violations = rejecting_violations(checked, champion_checked, settings.timeout_rise_tolerance)
    decision = decide(
        champion_metrics,
        result.model.card["metrics"],
        margin=settings.margin,
        tolerance=settings.tolerance,
        mae_local_baseline=baseline_mae(result.split),
        calibrated_mae=settings.calibrated_mae,
        loco=loco.numbers(),
        loco_tolerance=settings.loco_tolerance,
        property_violations=violations,
        property_numbers={
            "timeout_rise_challenger": checked.max_timeout_rise,
            "timeout_rise_champion": champion_checked.max_timeout_rise,
            "timeout_rise_tolerance": settings.timeout_rise_tolerance,
        },
        challenger_version=challenger_version,
        champion_version=champion_version,
        rows_by_source=result.rows_by_source,
    )
    card = result.model.card
    card["version"] = challenger_version
    card["metrics"]["champion"] = {
        "version": champion_version,
        **{k: {n: v for n, v in m.items() if n != "families"} for k, m in champion_metrics.items()},
    }
    card["metrics"]["loco"] = loco.to_json()
    card["metrics"]["properties"] = {
        "check": "seeded grid (predictor.properties.check_properties)",
        "challenger": checked.to_json(),
        "champion": champion_checked.to_json(),
        "rejecting": [v.to_json() for v in violations],
    }
    card["decision"] = decision.to_json()
    if decision.promoted:
        recalibrate(result.model, pd.concat([result.split.calibration, result.split.test], ignore_index=True))
    return result, decision


def log_decision(decision: Decision) -> None:
    """One log line (INFO) with the decision and its numbers."""
    n = decision.numbers
    loco = (
        f", counterfactual MAE {n['loco_mae_p_loss_challenger']:.4f} vs {n['loco_mae_p_loss_champion']:.4f}"
        if "loco_mae_p_loss_challenger" in n
        else ""
    )
    log.info(
        "model %s %s over %s: local MAE %.4f vs %.4f, paper MAE %.4f vs %.4f, coverage %.1f%% of %d%s; %s",
        decision.challenger_version,
        "promoted" if decision.promoted else "rejected",
        decision.champion_version,
        n["mae_local_challenger"],
        n["mae_local_champion"],
        n["mae_paper_challenger"],
        n["mae_paper_champion"],
        100 * n["coverage_local_challenger"],
        n["n_local_test"],
        loco,
        "; ".join(decision.reasons),
    )


def run_retraining(
    registry: ModelRegistry,
    training_dir: Path,
    base_paths: Sequence[Path],
    settings: RetrainSettings = DEFAULT_SETTINGS,
    *,
    base_model_dir: Path | None = None,
) -> Decision:
    """Run the background retraining job: retrain from the champion, decide, save, promote, record.

    Steps: the champion is the registry's (``champion.json``) or else the base model
    (``base_model_dir``; None = the shipped default); the local windows are every row of the training
    store at ``training_dir``; :func:`challenge` retrains and decides; the challenger is saved as
    ``registry.next_version()`` whatever the decision (its card says why); if promoted,
    ``champion.json`` moves to it; then the decision is appended to ``decisions.jsonl`` and logged.
    A process killed at any step leaves the previous champion serving.

    Args:
        registry: The model registry.
        training_dir: The job's training store (:class:`~predictor.training_store.TrainingStore`).
        base_paths: Base data CSVs (the paper's ``experiments.csv``, testbed grids).
        settings: How to retrain and decide (:class:`~predictor.settings.RetrainSettings`).
        base_model_dir: The base model (the job's pinned ``model_dir``); None = the shipped default.

    Returns:
        The decision (also recorded).

    Raises:
        ConfigError: if ``training_dir`` is no directory or holds fewer than ``settings.min_windows``
            windows, or a model or base CSV cannot be read.
    """
    store = open_store(training_dir)
    champion_dir = registry.champion_dir()
    champion = Predictor.load(champion_dir if champion_dir is not None else base_model_dir)
    champion_version = registry.champion_version() if champion_dir is not None else model_version(champion)
    local = store.load()
    version = registry.next_version()
    result, decision = challenge(
        champion, local, base_paths, settings, champion_version=champion_version, challenger_version=version
    )
    registry.save(result.model, version)
    if decision.promoted:
        registry.promote(version)
    registry.record(decision.to_json())
    log_decision(decision)
    return decision
