"""Live comparison: predicted P_l, P_d and gamma next to the measured R_l, R_d of every final window.

The step after the stateful reconciler, run by the driver on each micro-batch's collected rows
(:func:`predict_rows`; :func:`make_predict_step` is the same step as a ``mapInPandas`` function). For
each *final* window result with messages sent and a producer configuration it

1. builds the predictor's input (paper Eq. 1, :data:`predictor.features.FEATURES`) from the window:
   ``acks`` 0/1 (``all``/``-1`` count as 1), L = ``packet_loss_pct_est`` (percent, 0 if unknown),
   D = ``delay_ms_est`` (ms, 0 if unknown), M = ``message_size_bytes`` (else the topic's setting),
   B = ``batch_num_messages``, T_o = ``message_timeout_ms``, delta = ``poll_interval_ms`` (0 if unknown),
   the TCP retransmission-timeout rate = ``tcp_timeout_pct_est`` (percent, 0 if unknown);
2. predicts P_l, P_d with their 90% intervals and the per-producer throughput T (messages/s);
3. computes gamma (Eq. 2) twice with the topic's weights (Table II preset): ``gamma_predicted`` with
   P_l, P_d and ``gamma_actual`` with the measured R_l, R_d. Both use the same service terms
   (:mod:`predictor.kpi`): lambda = sent / window length (messages/s), N_p = the audited producers,
   mu = max(min(1, N_p * T / lambda), 1 - R_l), phi = mu * (1 - loss). A window that kept up does not
   measure the producers' capacity, so T is the predicted one, but it bounds it from below: the
   producers delivered (1 - R_l) * lambda messages/s, so they served at least that (a window that lost
   nothing kept up, mu = 1, whatever the model thinks of the configuration's throughput). A saturated
   window (R_l >= ``predictor.kpi.SATURATION_LOSS``) does measure it: T is what each producer delivered
   (:func:`predictor.kpi.measured_throughput`), so mu = 1 - R_l. Without a prediction mu = 1 (the kpi
   module's convention);
4. when ``gamma_actual < gamma_target``, asks :func:`predictor.suggest.suggest` for the smallest
   configuration change predicted to meet the target and stores it as structure (the new value of each
   changed property in ``suggested_*``, its predicted P_l and gamma) and in words (``suggestion``). A
   saturated window passes its measured T, so the search sizes the producer count on the throughput of
   this deployment, not of the network the model was trained on.

Every predicted row carries ``model_version``: the version of the model that made it (the model
registry's champion the driver chose for the micro-batch, ``shipped`` for the shipped model; see
:mod:`spark_streaming.live_model`). The model is loaded once per process (the driver) and model directory
(module-level cache of the few newest) and only when a micro-batch holds a final window.

Nothing here fails a micro-batch: a failure leaves the prediction columns null, names its stage in the
row's ``predict_stage`` (``model``, ``input``, ``predict``, ``kpi`` or ``suggest``), which
the driver counts (``kafka_audit_prediction_failures_total``), and says why in ``predict_error``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from audit_record import PRODUCER_TIER, window_result
from predictor.registry import SHIPPED_VERSION

log = logging.getLogger(__name__)

_SUGGEST_KEY = (*window_result.CURRENT_PROPERTIES.values(), "sent", "loss_rate", "_L", "_D", "_M", "_R")
"""What a suggestion depends on: windows alike in these get the same one (computed once per batch)."""


class PredictorLike(Protocol):
    """What this module needs of :class:`predictor.model.Predictor`."""

    def predict(self, frame: pd.DataFrame, invalid: Any = ...) -> pd.DataFrame:
        """Return P_l, P_d (with lo/hi) and throughput per row of a FEATURES frame."""
        ...


@dataclass(frozen=True)
class KpiConfig:
    """What the predict step needs to know, picklable for Spark's Python workers.

    Attributes:
        stream_type: Eq. 2 weights preset of topics without their own.
        gamma_target: gamma target of topics without their own, (0, 1].
        message_size_bytes: Message size M when a window has none, bytes.
        topics: topic -> (stream_type or None, gamma_target or None, message_size_bytes or None).
        model_dir: Predictor model directory (None: the shipped default).
        model_version: Version written to ``model_version`` of the predicted rows (None: the loaded
            model's card ``version``, else ``shipped``).
        suggest_producers: Suggestions may change the number of producers (a hint the application must
            follow); False: only the producer configuration.
    """

    stream_type: str = "default"
    gamma_target: float = 0.9
    message_size_bytes: float = 1_000.0
    topics: dict[str, tuple[str | None, float | None, float | None]] = field(default_factory=dict)
    model_dir: str | None = None
    model_version: str | None = None
    suggest_producers: bool = True

    @classmethod
    def from_settings(cls, settings: Any, gamma_target: float) -> KpiConfig:
        """Build from :class:`~spark_streaming.settings.SparkJobSettings` and the resolved default target."""
        return cls(
            stream_type=settings.stream_type,
            gamma_target=gamma_target,
            suggest_producers=getattr(settings, "suggest_producers", True),
            message_size_bytes=settings.message_size_bytes,
            topics={
                t: (k.stream_type, k.gamma_target, k.message_size_bytes)
                for t, k in settings.topic_kpi.items()
            },
            model_dir=str(settings.model_dir) if settings.model_dir is not None else None,
        )

    def for_topic(self, topic: str) -> tuple[str, float, float]:
        """Return (stream type, gamma target, fallback message size in bytes) of ``topic``."""
        stream, target, size = self.topics.get(topic, (None, None, None))
        return (
            stream or self.stream_type,
            target if target is not None else self.gamma_target,
            size if size is not None else self.message_size_bytes,
        )


# ------------------------------------------------------------------------------------------ pure pandas
def _num(col: pd.Series) -> pd.Series:
    return pd.to_numeric(col, errors="coerce").astype("float64")


def predictable(results: pd.DataFrame, states: tuple[str, ...] = (window_result.FINAL,)) -> pd.Series:
    """Boolean mask: final result rows with messages sent and a producer configuration the model takes.

    ``states``: the result states predicted (the job: final; the control loop also predicts settled
    provisional results, :mod:`control_loop.provisional`, on its own copies).

    The configuration: ``acks``, ``batch_num_messages`` and ``message_timeout_ms`` known (a Java
    producer's snapshots have no ``batch.num.messages``: its windows get no prediction).

    Only the first tier after the producers (``previous_tier`` ``producer``, or null in rows without the
    tier fields): the producers' configuration and network decide what reaches it; a replica or an
    application consumer tier adds its own hop (docs/DESIGN.md, "Tiers"), which Eq. 1 does not model,
    so those rows get no prediction, gamma or suggestion (and the gamma, drift and control decisions
    that read them leave them out).
    """
    kind = results["kind"] if "kind" in results else pd.Series("result", index=results.index)
    first_tier = (
        results["previous_tier"].isna() | (results["previous_tier"] == PRODUCER_TIER)
        if "previous_tier" in results
        else pd.Series(True, index=results.index)
    )
    return (
        (kind == "result")
        & results["state"].isin(states)
        & (_num(results["sent"]).fillna(0) > 0)
        & results["acks"].notna()
        & _num(results["batch_num_messages"]).notna()
        & _num(results["message_timeout_ms"]).notna()
        & first_tier
    )


def _acks01(value: Any) -> float:
    """Return the predictor's 0/1 ``acks`` (:func:`predictor.features.acks_number`), NaN for a bad value."""
    from kafka_plumbing.errors import ConfigError
    from predictor.features import acks_number

    try:
        return float(acks_number(value))
    except ConfigError:  # bad input is data: the row gets no prediction
        return np.nan


def feature_frame(results: pd.DataFrame, message_size_bytes: pd.Series | float = 1_000.0) -> pd.DataFrame:
    """Build the predictor's input (paper Eq. 1) from window-result rows.

    Args:
        results: Window-result rows (``window_result.avsc`` columns).
        message_size_bytes: M where a row has no ``message_size_bytes`` (per row or one value), bytes.

    Returns:
        DataFrame with the same index and the :data:`predictor.features.FEATURES` columns as floats:
        acks 0/1 (``all``/``-1`` -> 1; unknown values -> NaN), packet_loss_pct (percent; unknown -> 0),
        delay_ms (ms; unknown -> 0), message_size_bytes (bytes), batch_num_messages (messages),
        message_timeout_ms (ms), poll_interval_ms (ms; unknown -> 0), tcp_timeout_pct (percent; unknown or
        a result from before the field -> 0).
    """
    out = pd.DataFrame(index=results.index)
    out["acks"] = results["acks"].map(_acks01).astype("float64")
    out["packet_loss_pct"] = _num(results["packet_loss_pct_est"]).fillna(0.0)
    out["delay_ms"] = _num(results["delay_ms_est"]).fillna(0.0)
    fallback = (
        message_size_bytes
        if isinstance(message_size_bytes, pd.Series)
        else pd.Series(float(message_size_bytes), index=results.index)
    )
    out["message_size_bytes"] = _num(results["message_size_bytes"]).fillna(fallback)
    out["batch_num_messages"] = _num(results["batch_num_messages"])
    out["message_timeout_ms"] = _num(results["message_timeout_ms"])
    out["poll_interval_ms"] = _num(results["poll_interval_ms"]).fillna(0.0)
    timeouts = results.get("tcp_timeout_pct_est", np.nan)
    out["tcp_timeout_pct"] = _num(pd.Series(timeouts, index=results.index)).fillna(0.0)
    return out


def _window_seconds(results: pd.DataFrame) -> pd.Series:
    """Window length, s."""
    return (_num(results["window_end_ms"]) - _num(results["window_start_ms"])) / 1000.0


def arrival_rate(results: pd.DataFrame) -> pd.Series:
    """Arrival rate lambda = sent / window length, messages/s (NaN where the window is empty)."""
    seconds = _window_seconds(results)
    rate = _num(results["sent"]) / seconds.where(seconds > 0)
    return rate.where(rate > 0)


def measured_throughput(results: pd.DataFrame) -> pd.Series:
    """T of one producer as each window measured it, messages/s (NaN where it kept up or is empty).

    :func:`predictor.kpi.measured_throughput` of ``sent``, the window length, ``loss_rate`` (R_l) and
    ``producers`` (N_p, 1 where unknown).
    """
    from predictor import kpi

    n_p = _num(results["producers"]).fillna(1.0).clip(lower=1.0)
    t = kpi.measured_throughput(
        _num(results["sent"]).to_numpy(),
        _window_seconds(results).to_numpy(),
        _num(results["loss_rate"]).to_numpy(),
        n_p.to_numpy(),
    )
    return pd.Series(np.asarray(t, dtype=np.float64).reshape(-1), index=results.index)


def _error(frame: pd.DataFrame, rows: pd.Index, stage: str, exc: BaseException | str) -> None:
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    frame.loc[rows, "predict_stage"] = stage
    frame.loc[rows, "predict_error"] = f"{stage}: {text}"[:500]


def _gammas(out: pd.DataFrame, rows: pd.Index, pred: pd.DataFrame | None, weights: Any) -> None:
    """Fill gamma_actual (R_l, R_d) and gamma_predicted (P_l, P_d) of ``rows`` (see the module docstring)."""
    from predictor import kpi

    lam = arrival_rate(out.loc[rows])
    n_p = _num(out.loc[rows, "producers"]).fillna(1.0).clip(lower=1.0)
    loss = _num(out.loc[rows, "loss_rate"])
    dup = _num(out.loc[rows, "duplicate_rate"]).clip(upper=1.0)  # R_d exceeds 1 if copies outnumber sent
    if pred is not None:
        measured = _num(out.loc[rows, "_T"])
        tp = measured.where(measured.notna(), pred.loc[rows, "throughput_msgs_per_s"])
        mu = (n_p * tp / lam).clip(0.0, 1.0).where(tp.notna() & lam.notna(), 1.0)
        mu = np.maximum(mu, (1.0 - loss).clip(0.0, 1.0).fillna(0.0))  # delivered <= served
    else:
        mu = pd.Series(1.0, index=rows)
    ok = loss.notna() & dup.notna()
    if ok.any():
        r_l, r_d, m = loss[ok].to_numpy(), dup[ok].to_numpy(), mu[ok].to_numpy()
        out.loc[ok[ok].index, "gamma_actual"] = kpi.gamma(m * (1.0 - r_l), m, r_l, r_d, weights)
    if pred is not None:
        p_ok = pred.loc[rows, "p_loss"].notna() & pred.loc[rows, "p_dup"].notna()
        if p_ok.any():
            idx = p_ok[p_ok].index
            p_l, p_d = pred.loc[idx, "p_loss"].to_numpy(), pred.loc[idx, "p_dup"].to_numpy()
            m = mu[idx].to_numpy()
            out.loc[idx, "gamma_predicted"] = kpi.gamma(m * (1.0 - p_l), m, p_l, p_d, weights)


def _predict_rows(predictor: PredictorLike, features: pd.DataFrame) -> pd.DataFrame:
    """Predict one row at a time (out-of-range rows -> NaN).

    torch's results depend in their last bits on the batch's shape; one row per call makes a window's
    numbers independent of what else is in the micro-batch, so a batch Spark replays after a crash
    yields the very same final results.
    """
    return pd.concat([predictor.predict(features.loc[[i]], invalid="nan") for i in features.index])


def _suggest(
    out: pd.DataFrame, i: Any, target: float, weights: Any, model: PredictorLike, suggest: Callable[..., Any]
) -> dict[str, Any] | None:
    """Return the suggestion fields (``window_result.SUGGESTION_FIELDS``) for row ``i``, None if none."""
    r = out.loc[i]
    now = window_result.current_properties(r)
    config = {
        "acks": str(now["acks"]),
        "batch.num.messages": int(now["batch.num.messages"]),
        "message.timeout.ms": int(now["message.timeout.ms"]),
        "poll_interval_ms": float(now["poll_interval_ms"]) if pd.notna(now["poll_interval_ms"]) else 0.0,
        "producers": int(now["producers"]) if pd.notna(now["producers"]) and now["producers"] >= 1 else 1,
    }
    lam = arrival_rate(out.loc[[i]]).iloc[0]
    t_measured = r["_T"]
    network = {
        "packet_loss_pct": float(r["_L"]),
        "delay_ms": float(r["_D"]),
        "message_size_bytes": float(r["_M"]),
        "tcp_timeout_pct": float(r["_R"]),
        "arrival_rate_msgs_per_s": float(lam) if pd.notna(lam) else None,
        # A window that delivered nothing (R_l = 1) measured T = 0: a capacity of 0 scales no
        # configuration's, so the suggestion uses the model's own (it used to fail, and the windows that
        # lost everything, those that most need a suggestion, got none).
        "measured_throughput_msgs_per_s": (
            float(t_measured) if pd.notna(t_measured) and t_measured > 0 else None
        ),
    }
    s = suggest(config, network, target, weights, model)
    if s is None:
        return None
    return {
        "suggestion": s.explanation,
        **window_result.suggestion_fields(s.changes),
        "suggested_p_loss": float(s.predicted_after.p_loss),
        "suggested_gamma": float(s.predicted_after.gamma),
        "suggestion_meets_target": bool(s.meets_target),
        "suggestion_loco_mae_p_loss": s.confidence.loco_mae_p_loss,
        "suggestion_calibrated": bool(s.confidence.calibrated),
    }


def add_predictions(
    results: pd.DataFrame,
    config: KpiConfig,
    load: Callable[[], PredictorLike] | None,
    states: tuple[str, ...] = (window_result.FINAL,),
) -> pd.DataFrame:
    """Return ``results`` with the live-comparison columns filled for final windows (see module docstring).

    Args:
        results: Rows of the reconciler's output (result, dead-letter, late and producer rows).
        config: Topic weights, targets and message-size fallbacks.
        load: Returns the predictor; called only if a final window needs it (a failure is recorded
            as stage ``model``). None predicts nothing (gamma_actual with mu = 1).
        states: The result states predicted (:func:`predictable`).

    Returns:
        A copy with the live-comparison fields (``window_result.LIVE_COMPARISON_FIELDS``: P_l, P_d with
        intervals, gamma actual / predicted / target, the suggestion) and ``predict_stage`` /
        ``predict_error`` set on the predictable rows (others untouched). Never raises for a prediction
        problem.
    """
    from predictor import kpi
    from predictor.suggest import suggest

    out = results.copy()
    for col in window_result.LIVE_COMPARISON_FIELDS:
        if col not in out:
            out[col] = None
    for col in (*window_result.PREDICTION_FIELDS, *window_result.GAMMA_FIELDS):
        out[col] = out[col].astype("float64")
    for col in (*window_result.SUGGESTION_FIELDS, "predict_stage", "predict_error"):
        if col not in out:
            out[col] = None
        out[col] = out[col].astype("object")
    todo = predictable(out, states)
    if not todo.any():
        return out
    rows = todo[todo].index
    per_topic = {t: config.for_topic(t) for t in out.loc[rows, "topic"].unique()}
    out.loc[rows, "gamma_target"] = out.loc[rows, "topic"].map(lambda t: per_topic[t][1]).astype("float64")
    sizes = out.loc[rows, "topic"].map(lambda t: per_topic[t][2]).astype("float64")
    features = feature_frame(out.loc[rows], sizes)
    out.loc[rows, "_L"] = features["packet_loss_pct"]
    out.loc[rows, "_D"] = features["delay_ms"]
    out.loc[rows, "_M"] = features["message_size_bytes"]
    out.loc[rows, "_R"] = features["tcp_timeout_pct"]
    out.loc[rows, "_T"] = measured_throughput(out.loc[rows])  # T per producer where the window measured it

    predictor: PredictorLike | None = None
    if load is not None:
        try:
            predictor = load()
        except Exception as exc:  # a missing or broken model must not fail the batch
            _error(out, rows, "model", exc)
    if predictor is not None:
        out["model_version"] = out["model_version"].astype("object")
        out.loc[rows, "model_version"] = config.model_version or _version_of(predictor)
    pred: pd.DataFrame | None = None
    if predictor is not None:
        bad_acks = features["acks"].isna()
        if bad_acks.any():
            _error(out, bad_acks[bad_acks].index, "input", "acks is not one of 0, 1, all, -1")
        try:
            pred = _predict_rows(predictor, features)
        except Exception as exc:
            _error(out, rows, "predict", exc)
        if pred is not None:
            missing = pred["p_loss"].isna() & ~bad_acks
            if missing.any():
                _error(out, missing[missing].index, "input", "a feature is out of the model's range")
            for col in window_result.PREDICTION_FIELDS:
                out.loc[rows, col] = pred[col]

    for topic, (stream, target, _) in per_topic.items():
        mine = rows[(out.loc[rows, "topic"] == topic).to_numpy()]
        try:
            weights = kpi.Weights.preset(stream)
            _gammas(out, mine, pred, weights)
        except Exception as exc:
            _error(out, mine, "kpi", exc)
            continue
        if predictor is None or pred is None:
            continue
        below = _num(out.loc[mine, "gamma_actual"]) < target
        scaled = functools.partial(suggest, scale_producers=config.suggest_producers)
        cache: dict[tuple[Any, ...], dict[str, Any] | None] = {}
        for i in below[below].index:
            if pd.isna(out.at[i, "p_loss"]):
                continue
            key = tuple(out.at[i, c] for c in _SUGGEST_KEY)
            try:
                if key not in cache:
                    cache[key] = _suggest(out, i, target, weights, predictor, scaled)
            except Exception as exc:
                _error(out, pd.Index([i]), "suggest", exc)
                continue
            for col, value in (cache[key] or {}).items():
                out.at[i, col] = value
    return out.drop(columns=["_L", "_D", "_M", "_R", "_T"])


def _version_of(predictor: PredictorLike) -> str:
    """Return a loaded model's version: its card's ``version``, else ``shipped`` (the base model)."""
    card = getattr(predictor, "card", None)
    version = card.get("version") if isinstance(card, dict) else None
    return str(version) if version else SHIPPED_VERSION


# ---------------------------------------------------------------------------------------------- in Spark
_MODELS: dict[tuple[str | None, int], Any] = {}
MODELS_CACHED = 3
"""Models kept per process: the serving one and the ones before it (a hot swap loads the next)."""


def load_model(model_dir: str | None) -> Any:
    """Return the predictor of ``model_dir`` (None: the shipped default), loaded once per process.

    The job calls it on the driver (:func:`predict_rows`): once per driver process and model directory
    (and weights file: a directory whose weights were replaced is loaded again); in a Spark Python
    worker (:func:`make_predict_step`) once per worker. The :data:`MODELS_CACHED` most recently loaded
    stay cached. Torch runs on one thread: a micro-batch's final windows are a few rows per topic.

    Raises:
        ConfigError: if the directory is not a model directory.
    """
    from predictor.model import MODEL_FILE

    try:
        stamp = (Path(model_dir) / MODEL_FILE).stat().st_mtime_ns if model_dir is not None else 0
    except OSError:
        stamp = -1  # Predictor.load says what is wrong
    key = (model_dir, stamp)
    if key in _MODELS:
        _MODELS[key] = _MODELS.pop(key)  # newest last
        return _MODELS[key]
    import torch

    from predictor.model import Predictor, default_predictor

    torch.set_num_threads(1)
    _MODELS[key] = default_predictor() if model_dir is None else Predictor.load(Path(model_dir))
    while len(_MODELS) > MODELS_CACHED:
        del _MODELS[next(iter(_MODELS))]
    return _MODELS[key]


def make_predict_step(
    config: KpiConfig, columns: list[str], states: tuple[str, ...] = (window_result.FINAL,)
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """Return the ``mapInPandas`` function of the predict step.

    Args:
        config: Topic weights, targets, fallbacks and the model directory.
        columns: Output column order (the reconciler's output schema, unchanged).
        states: The result states predicted (:func:`predictable`).
    """

    def predict_batches(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            if not predictable(pdf, states).any():
                yield pdf
                continue
            try:
                done = add_predictions(pdf, config, lambda: load_model(config.model_dir), states)
            except Exception as exc:  # last resort: the window results must still be written
                log.exception("prediction step failed")
                done = pdf.copy()
                rows = predictable(done, states)
                for col in ("predict_stage", "predict_error"):
                    done[col] = done[col].astype("object")
                _error(done, rows[rows].index, "predict", exc)
            yield done[columns]

    return predict_batches


# ---------------------------------------------------------------------------------------------- on the driver
_CHANGED = (*window_result.LIVE_COMPARISON_FIELDS, "predict_stage", "predict_error")
"""The columns the predict step writes (``model_version`` is among the live-comparison fields)."""
_CASTS: dict[str, Callable[[Any], Any]] = {
    "double": float,
    "int": int,
    "long": int,
    "string": str,
    "boolean": bool,
}


def _cell(value: Any, spark_type: str) -> Any:
    """Return one predicted cell as the Python value its Spark type gives after Arrow (None for null/NaN)."""
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, np.generic):
        value = value.item()
        if isinstance(value, float) and np.isnan(value):
            return None
    return _CASTS.get(spark_type, lambda v: v)(value)


def predict_rows(
    rows: list[dict[str, Any]],
    config: KpiConfig,
    columns: list[str],
    states: tuple[str, ...] = (window_result.FINAL,),
) -> int:
    """Run the predict step on the driver over one micro-batch's collected rows; return the rows predicted.

    The predictable rows (:func:`predictable`: final results of the first tier with messages sent and a
    producer configuration; a few per topic and minute) get the live-comparison fields, each cell the
    Python value of its Spark type, exactly what the same step gives as ``mapInPandas`` inside the query.
    On the driver the model is loaded once per driver process and model directory (:func:`load_model`),
    not once per Python worker of every executor: torch takes about 500 MiB per process, and which of an
    executor's reused Python workers ran the step (so loaded it) changed from run to run (issue 18: an
    executor's RSS stepped by 500 MiB at minute 12 of a 60-minute soak). The other rows are untouched.

    Args:
        rows: The micro-batch's rows (``toArrow().to_pylist()``, NaN already None), changed in place.
        config: Topic weights, targets, fallbacks and the model directory of this micro-batch.
        columns: The output columns (:data:`spark_streaming.window_state.OUTPUT_COLUMNS`).
        states: The result states predicted (default final; :func:`predictable`).

    Like the step itself it never raises for a prediction problem: a row whose predicted value its
    column cannot hold gets nulls and ``predict_stage`` ``predict`` (counted by the driver).
    """
    at = [i for i, r in enumerate(rows) if r.get("kind") == "result" and r.get("state") in states]
    if not at:
        return 0
    frame = pd.DataFrame([rows[i] for i in at], columns=columns)
    todo = predictable(frame, states)
    if not todo.any():
        return 0
    frame = frame[todo].reset_index(drop=True)
    [done] = list(make_predict_step(config, columns, states)(iter([frame])))
    picked = [i for i, ok in zip(at, todo.to_numpy(), strict=True) if ok]
    types = {c: window_result.SPARK_TYPES.get(c, "string") for c in _CHANGED}
    cells = {col: done[col].tolist() for col in _CHANGED}
    for j, i in enumerate(picked):
        try:
            new = {col: _cell(cells[col][j], types[col]) for col in _CHANGED}
        except (TypeError, ValueError, OverflowError) as exc:  # a value its column cannot hold
            new = {col: None for col in _CHANGED if col != "model_version"}
            new.update(predict_stage="predict", predict_error=f"predict: {type(exc).__name__}: {exc}"[:500])
        rows[i].update(new)
    return len(picked)
