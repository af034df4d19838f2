"""The model lifecycle on the driver: which model serves, is it calibrated, training data, retraining.

:class:`LiveModel` is called by :class:`~spark_streaming.job.ReconciliationJob` around every
micro-batch (all on the driver, ``docs/DESIGN.md``, "Model lifecycle"):

1. :meth:`~LiveModel.begin_batch`: the model for the batch: the registry's champion
   (:class:`predictor.registry.ModelRegistry`; no champion: the base model, the job's ``model_dir`` or
   the shipped one), read once per micro-batch, so a promotion is served from the next micro-batch on
   (hot swap, no restart). The choice is saved before anything is written, so a batch Spark re-runs
   after a crash uses the same model and writes the same rows.
2. :meth:`~LiveModel.annotate`: ``model_calibrated`` on the final predicted rows
   (:class:`~spark_streaming.calibration.CalibrationMonitor`, continuing from the state before the
   batch, so a re-run gives the same flags).
3. :meth:`~LiveModel.store`: every final window is offered to the training store
   (:mod:`predictor.training_store`): stored, or counted under its skip reason.
4. :meth:`~LiveModel.end_batch`: save the state; then, at the boundary, reap a finished retraining,
   pass new decisions of the registry to the log, the metrics and ``decision_listeners`` (the alert
   pipeline writes them to the alerts topic), and start a retraining if one is due
   (:mod:`spark_streaming.retraining`).

State (``live-model-state.json`` in the checkpoint directory, replaced atomically): the last batch id
with its model and the calibration windows before and after it, the retraining counters and how many
registry decisions were passed on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from audit_record import window_result
from kafka_plumbing.state_file import JsonStateFile
from predictor.settings import RetrainSettings
from spark_streaming.calibration import CalibrationMonitor
from spark_streaming.metrics import ResultMetrics
from spark_streaming.predict import SHIPPED_VERSION, KpiConfig, feature_frame
from spark_streaming.retraining import RetrainPolicy, RetrainProcess, retrain_command
from spark_streaming.settings import SparkJobSettings

log = logging.getLogger(__name__)

LIVE_MODEL_STATE_FILE = "live-model-state.json"
"""The driver's model state, kept in the job's checkpoint directory (see the module docstring)."""
FORMAT = 1
DecisionListener = Callable[[dict[str, Any]], None]
"""Called on the driver with each new decision of the registry (``promotion.Decision.to_json``)."""


@dataclass(frozen=True)
class ServingModel:
    """The model of a micro-batch.

    Attributes:
        version: ``model_version`` written to its predictions (``shipped``, ``v0001``, ...).
        model_dir: Its directory (None: the shipped default).
    """

    version: str
    model_dir: str | None


def card_version(model_dir: Path | None) -> str:
    """Return the version a model directory serves under: its card's ``version``, else ``shipped``."""
    from predictor.model import CARD_FILE, DEFAULT_MODEL_DIR

    path = Path(model_dir if model_dir is not None else DEFAULT_MODEL_DIR) / CARD_FILE
    try:
        version = json.loads(path.read_text()).get("version")
    except (OSError, ValueError, AttributeError):
        return SHIPPED_VERSION
    return str(version) if version else SHIPPED_VERSION


def _check_model(model_dir: str) -> None:
    """Load a model directory once on the driver (raises if it cannot serve)."""
    from predictor.model import Predictor

    Predictor.load(Path(model_dir))


class LiveModel:
    """See the module docstring.

    Args:
        settings: The job's settings (registry, training store, retraining, calibration).
        metrics: The job's metrics.
        decision_listeners: The job's list of decision listeners (shared, so listeners added later count).
        check_model: Loads a model directory on the driver before it serves (raises if broken);
            a version that fails keeps the previous model serving.
    """

    def __init__(
        self,
        settings: SparkJobSettings,
        metrics: ResultMetrics,
        decision_listeners: list[DecisionListener] | None = None,
        check_model: Callable[[str], None] = _check_model,
    ) -> None:
        self.s = settings
        self.metrics = metrics
        self.decision_listeners = decision_listeners if decision_listeners is not None else []
        self.check_model = check_model
        self.policy = RetrainPolicy(
            settings.retrain_every_windows, settings.retrain_every_minutes, settings.retrain_min_windows
        )
        self.process = RetrainProcess(settings.model_registry_dir)
        self.path = settings.checkpoint_dir / LIVE_MODEL_STATE_FILE
        self.state_file = JsonStateFile(self.path, FORMAT, "model state")
        self.serving: ServingModel | None = None
        self.monitor = CalibrationMonitor(settings.calibration_windows, settings.calibration_max_mae)
        self._lock = threading.Lock()
        self._opened = False
        self._bad: set[str] = set()
        self._checked: set[str] = set()
        self._state: dict[str, Any] = {}
        self._count_batch = True
        self._calibration_published: set[str] = set()

    # ------------------------------------------------------------------------------------- lifecycle
    def open(self) -> None:
        """Read the saved state and the registry (at job start)."""
        from predictor.registry import ModelRegistry

        self.base = ServingModel(
            card_version(self.s.model_dir), str(self.s.model_dir) if self.s.model_dir is not None else None
        )
        self.registry = ModelRegistry(self.s.model_registry_dir, base_version=self.base.version)
        now = int(time.time() * 1000)
        state = self._load()
        if state is None:  # a fresh checkpoint: carry on from the registry and the training store
            seen = len(self.registry.decisions())
            state = {
                "batch": None,
                "retrain": {"new_windows": self._unseen_windows(), "last_start_ms": now},
                "decisions_seen": seen,
            }
        state.setdefault("writer", uuid.uuid4().hex[:12])  # this checkpoint's files in the training store
        self._state = state
        batch = state.get("batch") or {}
        self.monitor = self._monitor(batch.get("after") or batch.get("before"))
        self._publish_calibration()
        self._opened = True
        serving = self._resolve()
        self._serve(serving)
        log.info(
            "model registry %s: serving %s; training store %s; retraining %s",
            self.s.model_registry_dir,
            serving.version,
            self.s.training_dir,
            "on" if self.retraining else "off",
        )

    def _unseen_windows(self) -> int:
        """Return the stored windows the newest challenger did not see (0 on any doubt).

        So that a job started with a fresh checkpoint (another scenario run, a moved checkpoint) counts
        towards ``retrain_every_windows`` what earlier jobs stored, instead of starting from 0.
        """
        from predictor.training_store import TrainingStore

        try:
            stored = TrainingStore(self.s.training_dir).count()
            versions = self.registry.versions()
            seen = 0
            newest = self.registry.version_dir(versions[-1]) if versions else None
            if newest is not None:
                split = json.loads((newest / "card.json").read_text()).get("local_split") or {}
                seen = sum(int(split.get(k) or 0) for k in ("n_train", "n_calibration", "n_test"))
        except (OSError, ValueError) as exc:
            log.warning("training store %s not counted: %s", self.s.training_dir, exc)
            return 0
        return max(0, stored - seen)

    @property
    def retraining(self) -> bool:
        """True if the job retrains in the background (``retrain`` and ``predict`` on)."""
        return self.s.retrain and self.s.predict

    def close(self) -> None:
        """Stop a running retraining (counted as killed) and save the state (at job stop)."""
        with self._lock:
            result = self.process.stop()
            if result is not None:
                self.metrics.retrain_runs.labels(result).inc()
            if self._opened:
                self._save()

    # ------------------------------------------------------------------------------------- per batch
    def begin_batch(self, batch_id: int, base: KpiConfig) -> KpiConfig:
        """Return the predict step's configuration for micro-batch ``batch_id`` (its model fixed).

        A batch id seen before (Spark re-runs the last batch after a crash) gets the model and the
        calibration state it had; a new one gets the registry's champion now.
        """
        with self._lock:
            batch = self._state.get("batch") or {}
            if batch.get("id") == batch_id:
                serving = ServingModel(**batch["model"])
                self._count_batch = batch.get("after") is None  # the first attempt did not finish
            else:
                serving = self._resolve() if self.s.predict else self.serving or self.base
                before = batch.get("after") or batch.get("before") or self.monitor.to_state()
                self._state["batch"] = {
                    "id": batch_id,
                    "model": dataclasses.asdict(serving),
                    "before": before,
                    "after": None,
                }
                self._count_batch = True
                self._save()
            self.monitor = self._monitor(self._state["batch"]["before"])
            self._serve(serving)
            return dataclasses.replace(base, model_dir=serving.model_dir, model_version=serving.version)

    def annotate(self, results: list[dict[str, Any]]) -> None:
        """Set ``model_calibrated`` on the batch's final predicted rows (see :mod:`.calibration`)."""
        with self._lock:
            self.monitor.annotate(results)

    def store(self, batch_id: int, results: list[dict[str, Any]], config: KpiConfig) -> int:
        """Offer the batch's final windows to the training store; return how many were stored.

        The batch's file is rewritten when Spark re-runs it (one file per batch id), so each window is
        stored once; the outcome metric counts a batch once. Never raises: a store that cannot be
        written is logged (the audit results are already written; training data is best effort).
        """
        from predictor.training_store import TrainingStore, skip_reason, training_frame

        finals = [r for r in results if r.get("state") == window_result.FINAL]
        if not finals:
            return 0
        minimum = self.s.training_min_messages
        outcomes: dict[str, int] = {}
        for r in finals:
            reason = skip_reason(r, minimum)
            if reason is not None:
                outcomes[reason] = outcomes.get(reason, 0) + 1
        eligible = len(finals) - sum(outcomes.values())
        stored = 0
        if eligible:
            frame = pd.DataFrame([window_result.only_fields(r) for r in finals])
            sizes = frame["topic"].map(lambda t: config.for_topic(t)[2]).astype("float64")
            try:
                rows = training_frame(frame, feature_frame(frame, sizes), minimum)
                TrainingStore(self.s.training_dir).write(batch_id, rows, self._state["writer"])
                stored = len(rows)
            except Exception:  # disk full, permissions: the audit goes on without training data
                log.exception("training store %s: batch %d not stored", self.s.training_dir, batch_id)
                outcomes["store_failed"] = eligible
                eligible = 0
            if eligible - stored:
                outcomes["invalid_features"] = eligible - stored
        if self._count_batch:
            if stored:
                outcomes["stored"] = stored
            for outcome, n in outcomes.items():
                self.metrics.training_windows.labels(outcome).inc(n)
            with self._lock:
                self._state["retrain"]["new_windows"] += stored
        return stored

    def end_batch(self, batch_id: int) -> None:
        """Save the state after micro-batch ``batch_id``, then do the boundary work (module docstring)."""
        with self._lock:
            batch = self._state.get("batch")
            if batch is not None and batch.get("id") == batch_id:
                batch["after"] = self.monitor.to_state()
            self._count_batch = False
            self._publish_calibration()
            try:
                self._boundary()
            except Exception:  # an exception in foreachBatch would stop the query: the audit goes on
                log.exception("model lifecycle work after micro-batch %d failed", batch_id)
            self._save()

    # ------------------------------------------------------------------------------------- boundary
    def _boundary(self) -> None:
        result = self.process.poll()
        if result is not None:
            self.metrics.retrain_runs.labels(result).inc()
        self._pass_decisions()
        if not self.retraining or self.process.running:
            return
        counters = self._state["retrain"]
        now = int(time.time() * 1000)
        if not self.policy.due(counters["new_windows"], counters["last_start_ms"], now):
            return
        cmd = retrain_command(
            self.s.model_registry_dir,
            self.s.training_dir,
            [*self._base_data(), *self.s.retrain_data],
            RetrainSettings(
                min_windows=self.s.retrain_min_windows, calibrated_mae=self.s.calibration_max_mae
            ),
            self.s.model_dir,
        )
        try:
            started = self.process.start(cmd)
        except OSError:
            log.exception("retraining could not be started")
            started = False
        if started:
            log.info("retraining after %d new stored window(s)", counters["new_windows"])
            counters["new_windows"] = 0
            counters["last_start_ms"] = now

    @staticmethod
    def _base_data() -> list[Path]:
        from predictor import SHARED_DATA

        return [SHARED_DATA]

    def _pass_decisions(self) -> None:
        seen = int(self._state.get("decisions_seen") or 0)
        try:
            new = self.registry.decisions(seen)
        except (OSError, ValueError):
            log.exception("model decisions in %s unreadable", self.s.model_registry_dir)
            return
        for decision in new:
            self._state["decisions_seen"] = seen = seen + 1
            outcome = "promoted" if decision.get("promoted") else "rejected"
            self.metrics.model_decisions.labels(outcome).inc()
            numbers = decision.get("numbers") or {}
            log.warning(
                "model decision: challenger %s %s against champion %s (%s); %s",
                decision.get("challenger_version"),
                outcome,
                decision.get("champion_version"),
                "; ".join(map(str, decision.get("reasons") or [])),
                json.dumps(numbers, sort_keys=True),
            )
            for listener in self.decision_listeners:
                try:
                    listener(decision)
                except Exception:  # a listener's failure must not stop the audit job
                    log.exception("decision listener failed")

    # ------------------------------------------------------------------------------------- helpers
    def _resolve(self) -> ServingModel:
        """Return the registry's champion, or the base model; a champion that does not load is skipped."""
        try:
            champion_dir = self.registry.champion_dir()
            version = self.registry.champion_version()
        except (OSError, ValueError):
            log.exception("model registry %s unreadable; serving on", self.s.model_registry_dir)
            return self.serving or self.base
        if champion_dir is None:
            return self.base
        if version in self._bad:
            return self.serving or self.base
        if version not in self._checked:
            try:
                self.check_model(str(champion_dir))
            except Exception as exc:
                self._bad.add(version)
                log.error("champion %s in %s does not load (%s); not serving it", version, champion_dir, exc)
                return self.serving or self.base
            self._checked.add(version)
        return ServingModel(version, str(champion_dir.resolve()))  # Spark workers may run elsewhere

    def _serve(self, serving: ServingModel) -> None:
        if serving == self.serving:
            return
        if self.serving is not None:
            with contextlib.suppress(KeyError):
                self.metrics.model_champion_info.remove(self.serving.version)
            log.warning(
                "hot swap: model %s serves from now on (was %s)", serving.version, self.serving.version
            )
        self.metrics.model_champion_info.labels(serving.version).set(1)
        self.serving = serving

    def _monitor(self, state: dict[str, Any] | None) -> CalibrationMonitor:
        return CalibrationMonitor(self.s.calibration_windows, self.s.calibration_max_mae, state)

    def _publish_calibration(self) -> None:
        m = self.metrics
        current = set(self.monitor.versions())
        for version in self._calibration_published - current:  # forgotten by the monitor: no stale series
            for gauge in (m.model_live_mae, m.model_live_coverage, m.model_calibrated):
                with contextlib.suppress(KeyError):
                    gauge.remove(version)
        self._calibration_published = current
        for version in self.monitor.versions():
            st = self.monitor.stats(version)
            for gauge, value in ((m.model_live_mae, st.mae), (m.model_live_coverage, st.coverage)):
                if value is None:
                    with contextlib.suppress(KeyError):
                        gauge.remove(version)
                else:
                    gauge.labels(version).set(value)
            m.model_calibrated.labels(version).set(1.0 if st.calibrated else 0.0)

    def _load(self) -> dict[str, Any] | None:
        data = self.state_file.load()
        if data is None:
            return None
        try:
            data["retrain"] = {
                "new_windows": int(data["retrain"]["new_windows"]),
                "last_start_ms": int(data["retrain"]["last_start_ms"]),
            }
            data["decisions_seen"] = int(data["decisions_seen"])
            return dict(data)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self.state_file.set_aside(f"{type(exc).__name__}: {exc}")
            return None

    def _save(self) -> None:
        """Replace the state file atomically (:mod:`kafka_plumbing.state_file`); errors are logged."""
        try:
            self.state_file.save(self._state)
        except OSError as exc:
            log.error("model state not saved to %s: %s", self.path, exc)
