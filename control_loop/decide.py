"""The controller's decisions: pure logic, no I/O, no clock (``now_ms`` is an argument).

Per producer group, from the newest final window results (``docs/DESIGN.md``, "Control loop"):

* **Which row.** A window result is one (topic, window, cluster tier): it carries the producers'
  configuration, the network the producers measured (L = ``packet_loss_pct_est`` in percent, D =
  ``delay_ms_est`` in ms), the cluster tier's measured R_l, R_d and gamma (``gamma_actual``, Eq. 2),
  the predicted gamma of the current configuration (``gamma_predicted``) and the suggestion
  (``suggested_*``, ``suggested_gamma``). There is no producer-tier result row, so the controller reads
  the cluster-tier rows with a measured gamma (the live comparison ran): final ones, and provisional ones
  whose counts settled (:mod:`control_loop.provisional`: every producer accounted for the window and the
  tier holds every acknowledged message; the loop predicts those for the controller), so a change comes
  within seconds of the window that asks for it, not after the window's timeout rule. A topic
  belongs to the group ``ControlSettings.group_of(topic)``. When several rows of a group end at the
  same time (several cluster tiers, several topics of the group), the one with the lowest measured
  gamma stands for the window (the worst served tier decides). Windows are taken once each, in
  event-time order; a window ending at or before the newest one taken is ignored (a micro-batch that
  Spark re-runs changes nothing).
* **Guardrails**, checked in this order on the newest window's suggestion, each failing one giving a
  ``held`` decision with that reason: ``bounds`` (the suggested configuration, including the
  properties it keeps, must lie within the allowed values; a suggestion outside them is skipped, not
  clipped: the predicted gamma is that of the exact suggestion), ``margin`` (``suggested_gamma -
  gamma_predicted`` must exceed ``gamma_margin``), ``rolled_back`` (a configuration rolled back is not
  tried again for ``rollback_block_ms``), ``evaluating`` (a change is being watched), ``dwell``
  (``dwell_ms`` since the group's last change, or last advice in advise mode).
* **Modes.** ``apply``: a ``change`` (next version). ``advise``, or ``apply`` with the kill switch on:
  ``advice`` (reason ``advise_mode`` / ``kill_switch``), nothing changes. ``off``: no decisions.
* **Rollback.** After a change the next ``rollback_windows`` k final windows that ran with the new
  configuration (same librdkafka properties, one producer configuration in the window) are measured; if
  their mean gamma is below what the change should have given by more than the measurement's noise
  (below), a ``rollback`` to the previous configuration (next version), else ``kept``. What it should
  have given: the mean measured gamma of the k windows before the change, moved by as much as the network
  moved the model's prediction for the new configuration (the mean ``gamma_predicted`` of the k windows
  after, the new configuration on their network, minus the predicted gamma of the change, on the network
  it was decided on). So a network that got worse right after a change (a new loss stage) is not blamed
  on the change; without predictions the shift is 0.
  Without k such windows within ``evaluation_timeout_ms`` the evaluation ends ``held``/``not_applied``.
* **Measurement first** (issue 39: a change that raised the measured gamma from 0.730 to 1.000 was
  rolled back because the model had predicted a network improvement of +0.289 it had to beat). A change
  whose mean measured gamma meets the window's ``gamma_target`` (``kept``/``meets_target``), or beats
  the gamma before it by more than the measurement's noise (``kept``/``improved``; noise = the larger
  of ``rollback_tolerance`` and :data:`NOISE_Z` standard errors of the difference of the two means,
  from the spread of the k windows on each side), is never rolled back. Otherwise the network
  adjustment is used only where the model is calibrated for both configurations (mean gamma error
  |gamma_predicted - gamma_actual| at most :data:`CALIBRATED_GAMMA_ERROR` on the k windows before and
  on the k after, and none of them marked not calibrated by the job), and it is bounded to
  +-:data:`NETWORK_SHIFT_MAX`; the expected gamma never exceeds 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from statistics import fmean, pvariance
from typing import Any, Literal

from audit_record import window_result
from control_loop import provisional
from control_loop.config import GroupConfig
from control_loop.controller_state import ControllerState, Evaluation, GroupState
from control_loop.settings import ControlSettings

NOISE_Z = 2.0
"""Standard errors of the difference of the mean measured gammas (k windows before, k after) that count
as the measurement's noise (about a 95% two-sided band)."""
CALIBRATED_GAMMA_ERROR = 0.05
"""Largest mean |gamma_predicted - gamma_actual| over a configuration's windows for the network adjustment
to use the model there (the job's ``calibration_max_mae`` bar for P_l, applied to gamma)."""
NETWORK_SHIFT_MAX = 0.1
"""Bound of the network adjustment of a rollback judgement, gamma units: two calibrated predictions (one
per configuration) can each be off by about :data:`CALIBRATED_GAMMA_ERROR`."""

Kind = Literal["change", "rollback", "kept", "advice", "held"]
KINDS: tuple[str, ...] = ("change", "rollback", "kept", "advice", "held")
"""Decision kinds: ``change`` and ``rollback`` write a control record (apply mode); ``kept`` ends the
evaluation of a change that did not make gamma worse; ``advice`` is what apply mode would do (advise mode
or kill switch); ``held`` is a suggestion a guardrail stopped."""
REASONS: dict[str, tuple[str, ...]] = {
    "change": ("suggestion",),
    "rollback": ("worse",),
    "kept": ("not_worse", "meets_target", "improved"),
    "advice": ("advise_mode", "kill_switch"),
    "held": ("bounds", "margin", "rolled_back", "dwell", "evaluating", "not_applied"),
}
"""The reasons of each kind (metrics label values)."""


def _number(x: Any) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    try:
        out = float(x)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


@dataclass(frozen=True)
class ControlDecision:
    """One decision of the controller for one producer group (immutable).

    Attributes:
        group: Producer group.
        kind: One of :data:`KINDS`.
        reason: Machine label, one of :data:`REASONS` of the kind.
        detail: The decision in words, with its numbers (for logs and events).
        mode: The controller's mode (``advise`` or ``apply``).
        decided_at_ms: Wall clock of the decision, ms since the epoch UTC.
        version: Control-record version written (``change``, ``rollback``), else the group's newest
            version issued (0: none).
        from_config: Properties before (librdkafka names and the hints ``poll_interval_ms``, ``producers``).
        to_config: Properties after (what was written, advised or held back; for ``kept`` the running one).
        predicted_gamma_before: Predicted gamma (Eq. 2, 0-1) of ``from_config``.
        predicted_gamma_after: Predicted gamma of ``to_config``.
        measured_gamma_before: Mean measured gamma (Eq. 2 with the measured R_l, R_d) of the k final
            windows before the change, 0-1.
        measured_gamma_after: Mean measured gamma of the k windows after a change (``rollback``, ``kept``).
        gamma_target: The topic's gamma target, 0-1.
        packet_loss_pct: L measured by the producers in the deciding window, percent 0-100.
        delay_ms: D, ms.
        topic, tier, window_start_ms, window_end_ms: The deciding window result (None if none).
        window_state: Its state when decided on: ``final``, or ``provisional`` (settled).
        suggestion_loco_mae_p_loss: The counterfactual MAE(P_l) of the model that made the window's
            suggestion (fraction; None: no score), for ``change``, ``advice`` and ``held``.
        suggestion_calibrated: False: that model was never scored on such a change ("uncalibrated").
    """

    group: str
    kind: Kind
    reason: str
    detail: str
    mode: str
    decided_at_ms: int
    version: int
    from_config: dict[str, Any] = field(default_factory=dict)
    to_config: dict[str, Any] = field(default_factory=dict)
    predicted_gamma_before: float | None = None
    predicted_gamma_after: float | None = None
    measured_gamma_before: float | None = None
    measured_gamma_after: float | None = None
    gamma_target: float | None = None
    packet_loss_pct: float | None = None
    delay_ms: float | None = None
    topic: str | None = None
    tier: str | None = None
    window_start_ms: int | None = None
    window_end_ms: int | None = None
    window_state: str | None = None
    suggestion_loco_mae_p_loss: float | None = None
    suggestion_calibrated: bool | None = None

    @property
    def writes(self) -> bool:
        """True if the decision is a control record to write (``change`` or ``rollback``)."""
        return self.kind in ("change", "rollback")

    def changes(self) -> dict[str, Any]:
        """Return ``{property: new value}`` of what ``to_config`` changes against ``from_config``."""
        return {p: v for p, v in self.to_config.items() if v != self.from_config.get(p) and v is not None}

    def to_json(self) -> dict[str, Any]:
        """Return the decision as a JSON-ready dict (every attribute, plus ``changes``)."""
        out = asdict(self)
        out["changes"] = self.changes()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ControlDecision:
        """Inverse of :meth:`to_json` (``changes`` is derived, so ignored)."""
        return cls(**{k: v for k, v in data.items() if k != "changes"})


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return fmean(values) if values else None


def measurement_noise(before: list[float], after: list[float], floor: float) -> float:
    """Return the noise of ``mean(after) - mean(before)`` (gamma units): ``NOISE_Z`` standard errors.

    Each side's variance is its sample variance (0 with one window); the result is at least ``floor``
    (the ``rollback_tolerance``).
    """

    def var_of_mean(xs: list[float]) -> float:
        return pvariance(xs) * len(xs) / (len(xs) - 1) / len(xs) if len(xs) > 1 else 0.0

    return max(floor, NOISE_Z * math.sqrt(var_of_mean(before) + var_of_mean(after)))


def confidence_words(row: Mapping[str, Any]) -> str:
    """Return how sure the window's suggestion is, in words (``predictor.confidence.Confidence.words``).

    ``counterfactual MAE(P_l) 0.031`` (scored on such a configuration), ``uncalibrated: counterfactual
    MAE(P_l) 0.031 on other configurations``, or ``uncalibrated: no counterfactual score``.
    """
    score = _number(row.get("suggestion_loco_mae_p_loss"))
    if score is not None and row.get("suggestion_calibrated"):
        return f"counterfactual MAE(P_l) {score:.3f}"
    if score is not None:
        return f"uncalibrated: counterfactual MAE(P_l) {score:.3f} on other configurations"
    return "uncalibrated: no counterfactual score"


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "?" if x is None else format(x, spec)


def _describe(changes: Mapping[str, Any], before: Mapping[str, Any]) -> str:
    return ", ".join(f"{p} {before.get(p)}→{v}" for p, v in changes.items()) or "no change"


class Controller:
    """Decides configuration changes per producer group; holds the state it needs (:attr:`state`).

    Args:
        settings: Mode and guardrails.
        state: Saved state to resume from (default: empty).
    """

    def __init__(self, settings: ControlSettings, state: ControllerState | None = None) -> None:
        self.settings = settings
        self.state = state if state is not None else ControllerState()

    # ------------------------------------------------------------------------------ public
    def seed_versions(self, latest: Mapping[str, int]) -> None:
        """Make the next version of each group exceed ``latest`` (group -> newest version on the topic)."""
        for group, version in latest.items():
            st = self.state.group(group)
            st.version = max(st.version, int(version))

    def is_new(self, row: Mapping[str, Any]) -> bool:
        """Return True if ``row``'s window ends after the newest window its group has taken."""
        if row.get("window_end_ms") is None or not row.get("topic"):
            return False
        taken = self.state.groups.get(self.settings.group_of(row["topic"]))
        last = taken.last_window_end_ms if taken is not None else None
        return last is None or int(row["window_end_ms"]) > last

    def groups_of(self, rows: Iterable[Mapping[str, Any]]) -> set[str]:
        """Return the groups of the topics of ``rows``."""
        return {self.settings.group_of(r["topic"]) for r in rows if r.get("topic")}

    def decide(
        self, rows: Iterable[Mapping[str, Any]], now_ms: int, *, kill_switch: bool = False
    ) -> list[ControlDecision]:
        """Take new windows into account and return this round's decisions, by group.

        Args:
            rows: Window results: final ones and settled provisional ones
                (:func:`control_loop.provisional.windows_by_group`; others, rows without a measured gamma
                and windows already taken are ignored).
            now_ms: Wall clock, ms since the epoch UTC (dwell time, evaluation timeout, decision time).
            kill_switch: The kill switch is on now (file or environment); ``settings.kill_switch`` counts
                too. Changes and rollbacks become advice.

        Returns:
            Decisions in group order; the state (:attr:`state`) is updated.
        """
        s = self.settings
        if s.mode == "off":
            return []
        killed = kill_switch or s.kill_switch
        by_group = provisional.windows_by_group(rows, s.group_of)
        out: list[ControlDecision] = []
        for group in sorted(by_group):
            st = self.state.group(group)
            newest = None
            for end in sorted(by_group[group]):
                if st.last_window_end_ms is not None and end <= st.last_window_end_ms:
                    continue
                self._observe(st, by_group[group][end])
                newest = by_group[group][end]
            if newest is not None:
                out.extend(self._decide_group(group, st, newest, now_ms, killed))
        return out

    # ------------------------------------------------------------------------------ observation
    def _observe(self, st: GroupState, row: Mapping[str, Any]) -> None:
        """Add one new final window of the group to its measured history and its evaluation."""
        gamma = float(row["gamma_actual"])
        k = self.settings.rollback_windows
        st.recent_gammas = [*st.recent_gammas, gamma][-k:]
        predicted = _number(row.get("gamma_predicted"))
        error = None
        if predicted is not None:
            error = 1.0 if row.get("model_calibrated") is False else abs(predicted - gamma)
            st.recent_errors = [*st.recent_errors, error][-k:]
        st.last_window_end_ms = int(row["window_end_ms"])
        ev = st.evaluation
        if ev is None:
            return
        config = GroupConfig.from_row(row)
        one_config = (row.get("producer_configs") or 1) <= 1
        started = int(row.get("window_start_ms") or 0) >= ev.decided_at_ms
        if config is not None and one_config and started and config.runs_as(ev.after):
            ev.gammas_after.append(gamma)
            if predicted is not None and error is not None:
                ev.predicted_after_live.append(predicted)
                ev.errors_after.append(error)

    # ------------------------------------------------------------------------------ decisions
    def _decide_group(
        self, group: str, st: GroupState, row: Mapping[str, Any], now_ms: int, killed: bool
    ) -> list[ControlDecision]:
        s = self.settings
        out: list[ControlDecision] = []
        ev = st.evaluation
        if ev is not None:
            if len(ev.gammas_after) >= s.rollback_windows:
                st.evaluation = None
                judged = self._judge(group, st, ev, row, now_ms, killed)
                out.append(judged)
                if judged.kind == "rollback":
                    return out
            elif now_ms - ev.decided_at_ms > s.evaluation_timeout_ms:
                st.evaluation = None
                out.append(
                    self._decision(
                        group,
                        st,
                        row,
                        now_ms,
                        "held",
                        "not_applied",
                        f"the group's windows did not show version {ev.version} "
                        f"({_describe(ev.before.changed(ev.after), ev.before.properties())}) "
                        f"{s.rollback_windows} time(s) within {s.evaluation_timeout_ms} ms: evaluation "
                        "abandoned (producers not autotuned, or they rejected the configuration)",
                        ev.before,
                        ev.after,
                        predicted_before=ev.predicted_gamma_before,
                        predicted_after=ev.predicted_gamma_after,
                        measured_before=ev.measured_gamma_before,
                        measured_after=_mean(ev.gammas_after),
                    )
                )
        proposal = self._propose(group, st, row, now_ms, killed)
        if proposal is not None:
            out.append(proposal)
        return out

    def _judge(
        self, group: str, st: GroupState, ev: Evaluation, row: Mapping[str, Any], now_ms: int, killed: bool
    ) -> ControlDecision:
        """End an evaluation: ``rollback`` (or advice to roll back under the kill switch) or ``kept``."""
        s = self.settings
        k = s.rollback_windows
        after = _mean(ev.gammas_after[:k])
        before = ev.measured_gamma_before
        target = _number(row.get("gamma_target"))
        noise = measurement_noise(ev.gammas_before, ev.gammas_after[:k], s.rollback_tolerance)
        live = _mean(ev.predicted_after_live[:k])
        planned = ev.predicted_gamma_after
        predicted_shift = live - planned if live is not None and planned is not None else 0.0
        error_before, error_after = _mean(ev.errors_before), _mean(ev.errors_after[:k])
        calibrated = (
            error_before is not None
            and error_after is not None
            and max(error_before, error_after) <= CALIBRATED_GAMMA_ERROR
        )
        shift = max(-NETWORK_SHIFT_MAX, min(NETWORK_SHIFT_MAX, predicted_shift)) if calibrated else 0.0
        expected = None if before is None else min(1.0, before + shift)
        worse = after is not None and expected is not None and after < expected - noise
        numbers = dict(
            predicted_before=ev.predicted_gamma_before,
            predicted_after=ev.predicted_gamma_after,
            measured_before=before,
            measured_after=after,
        )
        words = (
            f"measured gamma over {s.rollback_windows} window(s) after version {ev.version}: "
            f"{_fmt(after)} vs {_fmt(before)} before"
        )
        if after is not None and target is not None and after >= target:
            return self._decision(
                group, st, row, now_ms, "kept", "meets_target",
                f"{words}: meets the target {target:g}; kept (measurement first)",
                ev.before, ev.after, **numbers,
            )  # fmt: skip
        if after is not None and before is not None and after - before > noise:
            return self._decision(
                group, st, row, now_ms, "kept", "improved",
                f"{words}: rose by {after - before:+.3f}, more than the measurement's noise {noise:.3f}; "
                "kept (measurement first)",
                ev.before, ev.after, **numbers,
            )  # fmt: skip
        if predicted_shift and not calibrated:
            words += (
                f", network adjustment {predicted_shift:+.3f} predicted, not used (model not calibrated "
                f"for both configurations: gamma error {_fmt(error_before)} before, "
                f"{_fmt(error_after)} after, bar {CALIBRATED_GAMMA_ERROR:g})"
            )
        elif shift != predicted_shift:
            words += f", {predicted_shift:+.3f} for the network since (predicted), {shift:+.3f} used (bound)"
        elif shift:
            words += f", {shift:+.3f} for the network since (predicted)"
        words += f" (noise {noise:.3f}, at least the tolerance {s.rollback_tolerance:g})"
        if not worse:
            return self._decision(
                group, st, row, now_ms, "kept", "not_worse", f"{words}: kept", ev.before, ev.after, **numbers
            )
        st.blocked.append((ev.after.producer_properties(), now_ms + s.rollback_block_ms))
        if killed or s.mode != "apply":  # a change made in apply mode, judged after a switch to advise
            st.last_advice_ms = now_ms
            reason = "kill_switch" if killed else "advise_mode"
            return self._decision(
                group,
                st,
                row,
                now_ms,
                "advice",
                reason,
                f"{words}: worse; a rollback to the previous configuration is advised, not written "
                f"({'kill switch on' if killed else 'advise mode'})",
                ev.after,
                ev.before,
                **numbers,
            )
        st.version += 1
        st.config = ev.before
        st.last_change_ms = now_ms
        return self._decision(
            group,
            st,
            row,
            now_ms,
            "rollback",
            "worse",
            f"{words}: worse; rolled back to version {st.version} = the previous configuration "
            f"({_describe(ev.after.changed(ev.before), ev.after.properties())})",
            ev.after,
            ev.before,
            **numbers,
        )

    def bounds_problems(self, config: GroupConfig) -> list[str]:
        """Return what in ``config`` lies outside the allowed values (empty: nothing)."""
        s = self.settings
        out = []
        if config.acks not in s.allowed_acks:
            out.append(f"acks={config.acks} (allowed: {', '.join(s.allowed_acks)})")
        for prop, value, (lo, hi) in (
            ("batch.num.messages", config.batch_num_messages, s.allowed_batch_num_messages),
            ("message.timeout.ms", config.message_timeout_ms, s.allowed_message_timeout_ms),
            ("linger.ms", config.linger_ms, s.allowed_linger_ms),
        ):
            if not lo <= value <= hi:
                out.append(f"{prop}={value:g} (allowed: {lo:g}-{hi:g})")
        return out

    def _propose(
        self, group: str, st: GroupState, row: Mapping[str, Any], now_ms: int, killed: bool
    ) -> ControlDecision | None:
        """Return the decision about the newest window's suggestion (None: it has none)."""
        s = self.settings
        changes = window_result.suggested_changes(row)
        current = GroupConfig.from_row(row)
        if not changes or current is None:
            return None
        target = current.with_changes(changes)
        diff = current.changed(target)
        if not diff:
            return None
        before = _number(row.get("gamma_predicted"))
        after = _number(row.get("suggested_gamma"))
        measured = _mean(st.recent_gammas)
        numbers = dict(predicted_before=before, predicted_after=after, measured_before=measured)
        what = _describe(diff, current.properties())

        def held(reason: str, why: str) -> ControlDecision:
            return self._decision(
                group, st, row, now_ms, "held", reason, f"{what} held: {why}", current, target, **numbers,
                proposal=True,
            )  # fmt: skip

        problems = self.bounds_problems(target)
        if problems:
            return held("bounds", "outside the allowed values: " + "; ".join(problems))
        if before is None or after is None or after - before <= s.gamma_margin:
            return held(
                "margin",
                f"predicted gamma {_fmt(before)}→{_fmt(after)}, gain not above the margin {s.gamma_margin:g}",
            )
        st.blocked = [(p, until) for p, until in st.blocked if until > now_ms]
        if any(p == target.producer_properties() for p, _ in st.blocked):
            return held(
                "rolled_back", f"this configuration was rolled back less than {s.rollback_block_ms} ms ago"
            )
        if st.evaluation is not None:
            return held("evaluating", f"version {st.evaluation.version} is still being evaluated")
        advise = s.mode == "advise" or killed
        last = st.last_advice_ms if advise else st.last_change_ms
        if last is not None and now_ms - last < s.dwell_ms:
            return held(
                "dwell",
                f"{now_ms - last} ms since the last {'advice' if advise else 'change'} "
                f"(dwell time {s.dwell_ms} ms)",
            )
        gain = (
            f"predicted gamma {before:.3f}→{after:.3f} "
            f"(gain {after - before:+.3f} > margin {s.gamma_margin:g}; {confidence_words(row)})"
        )
        if advise:
            st.last_advice_ms = now_ms
            reason = "kill_switch" if s.mode == "apply" else "advise_mode"
            note = "kill switch on: not written" if reason == "kill_switch" else "advise mode: not written"
            return self._decision(
                group,
                st,
                row,
                now_ms,
                "advice",
                reason,
                f"advice {what}: {gain}; {note}",
                current,
                target,
                **numbers,
                proposal=True,
            )
        st.version += 1
        st.config = target
        st.last_change_ms = now_ms
        st.evaluation = Evaluation(
            version=st.version,
            decided_at_ms=now_ms,
            before=current,
            after=target,
            measured_gamma_before=measured,
            predicted_gamma_before=before,
            predicted_gamma_after=after,
            gammas_before=list(st.recent_gammas),
            errors_before=list(st.recent_errors),
        )
        return self._decision(
            group,
            st,
            row,
            now_ms,
            "change",
            "suggestion",
            f"version {st.version}: {what}: {gain}",
            current,
            target,
            **numbers,
            proposal=True,
        )

    def _decision(
        self,
        group: str,
        st: GroupState,
        row: Mapping[str, Any],
        now_ms: int,
        kind: Kind,
        reason: str,
        detail: str,
        before: GroupConfig,
        after: GroupConfig,
        *,
        predicted_before: float | None = None,
        predicted_after: float | None = None,
        measured_before: float | None = None,
        measured_after: float | None = None,
        proposal: bool = False,
    ) -> ControlDecision:
        return ControlDecision(
            group=group,
            kind=kind,
            reason=reason,
            detail=detail,
            mode=self.settings.mode,
            decided_at_ms=now_ms,
            version=st.version,
            from_config=before.properties(),
            to_config=after.properties(),
            predicted_gamma_before=predicted_before,
            predicted_gamma_after=predicted_after,
            measured_gamma_before=measured_before,
            measured_gamma_after=measured_after,
            gamma_target=_number(row.get("gamma_target")),
            packet_loss_pct=_number(row.get("packet_loss_pct_est")),
            delay_ms=_number(row.get("delay_ms_est")),
            topic=row.get("topic"),
            tier=row.get("tier"),
            window_start_ms=row.get("window_start_ms"),
            window_end_ms=row.get("window_end_ms"),
            window_state=row.get("state"),
            suggestion_loco_mae_p_loss=_number(row.get("suggestion_loco_mae_p_loss")) if proposal else None,
            suggestion_calibrated=row.get("suggestion_calibrated") if proposal else None,
        )


def decision_line(decision: ControlDecision) -> str:
    """Return the decision as one log line: group, kind, reason and the detail."""
    return f"control {decision.kind} ({decision.reason}) for group {decision.group}: {decision.detail}"


__all__ = ["KINDS", "REASONS", "ControlDecision", "Controller", "Kind", "decision_line"]
