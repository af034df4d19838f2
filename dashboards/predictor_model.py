"""The "Predictor model" dashboard: how well the model serving P_l fits this deployment, and its retraining.

The Spark job scores every model version on its own final windows (``spark_streaming/metrics.py``):
the rolling live MAE of P_l against the measured R_l (``kafka_audit_model_live_mae``, fraction of
messages), the share of windows whose R_l fell inside the 90% interval (``..._live_coverage``), whether
the version is calibrated for this deployment (``..._calibrated``: rolling MAE below the job's
``calibration_max_mae``; drift alerts fire only then), and which version serves
(``..._champion_info``). The background retraining counts its runs (``kafka_audit_retrain_runs_total``),
the windows offered to the training store by outcome (``kafka_audit_training_windows_total``) and its
champion / challenger decisions (``kafka_audit_model_decisions_total``), which are also annotations.

Rows (top to bottom): the serving model (version and calibrated state, live MAE, coverage, decisions
in the time range); live accuracy per model version over time; retraining; one row per topic with the
measured R_l against the predicted P_l and its 90% band and the absolute error per window.

Template variables: ``$model_version`` and, for the per-topic rows, ``$cluster``, ``$topic``, ``$tier``
(as on the completeness dashboard).
"""

from __future__ import annotations

from grafana_foundation_sdk.builders.common import GraphThresholdsStyleConfig
from grafana_foundation_sdk.builders.dashboard import Dashboard, Row, ThresholdsConfig
from grafana_foundation_sdk.builders.timeseries import Panel as TimeseriesPanel
from grafana_foundation_sdk.models.common import (
    BigValueTextMode,
    GraphDrawStyle,
    GraphThresholdsStyleMode,
    LineInterpolation,
)
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    Threshold,
    ThresholdsMode,
    ValueMap,
    ValueMappingResult,
)

from dashboards._panels import decision_annotation, label_variable, query, stat, timeseries
from dashboards.completeness import ROW_SEL, loss_vs_predicted, topic_variables

UID = "kafka-audit-model"
TITLE = "Predictor model"
VERSION_SEL = 'model_version=~"$model_version"'
#: The serving version: ``kafka_audit_model_champion_info`` is 1 for it (per job instance).
SERVING = "on(instance, job, model_version) (kafka_audit_model_champion_info == 1)"
RATE = "$__rate_interval"


def _serving(metric: str) -> str:
    """PromQL: ``metric`` (labelled by ``model_version``) of the serving version only, per job instance."""
    return f"max by (instance, job, model_version) ({metric}) and {SERVING}"


CALIBRATION_MAX_MAE = 0.05
"""The job's default ``calibration_max_mae`` (``KAFKA_AUDIT_SPARK_CALIBRATION_MAX_MAE``), fraction: drawn
as the MAE threshold line."""
COVERAGE_BOUNDS = (0.80, 0.97)
"""The 90% interval's coverage a challenger needs on held-back windows to be promoted (criterion c)."""


def _thresholds(steps: list[tuple[float | None, str]]) -> ThresholdsConfig:
    return ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps([Threshold(v, c) for v, c in steps])


def _dashed_thresholds(panel: TimeseriesPanel, steps: list[tuple[float | None, str]]) -> TimeseriesPanel:
    """Draw the threshold ``steps`` as dashed lines on a time series panel."""
    style = GraphThresholdsStyleConfig().mode(GraphThresholdsStyleMode.DASHED)
    return panel.thresholds(_thresholds(steps)).thresholds_style(style)


def _serving_row(d: Dashboard) -> Dashboard:
    serving_state = (
        stat(
            "Serving model",
            "The model version serving P_l and P_d now, and whether it is calibrated for this deployment "
            "(its rolling live MAE(P_l) below the job's calibration threshold). While it is calibrating, "
            "no prediction-drift alert fires.",
            [
                query(
                    _serving("kafka_audit_model_calibrated"),
                    "{{model_version}}",
                    instant=True,
                )
            ],
            "none",
            [(None, "yellow"), (1, "green")],
            width=6,
            height=5,
        )
        .text_mode(BigValueTextMode.VALUE_AND_NAME)
        .mappings(
            [
                ValueMap(
                    {
                        "0": ValueMappingResult(text="calibrating", color="yellow"),
                        "1": ValueMappingResult(text="calibrated", color="green"),
                    }
                )
            ]
        )
        .no_value("no final window scored yet")
    )
    return (
        d.with_row(Row("Serving model"))
        .with_panel(serving_state)
        .with_panel(
            stat(
                "Live MAE(P_l), serving model",
                "Rolling mean |P_l - R_l| (fraction of messages) of the serving model over its recent final "
                f"windows. Red from {CALIBRATION_MAX_MAE:.0%}, the default calibration threshold.",
                [
                    query(
                        _serving("kafka_audit_model_live_mae"),
                        "{{model_version}}",
                        instant=True,
                    )
                ],
                "percentunit",
                [(None, "green"), (CALIBRATION_MAX_MAE, "red")],
                width=6,
                height=5,
            )
        )
        .with_panel(
            stat(
                "90% interval coverage, serving model",
                "Share of the serving model's recent final windows whose measured R_l lay inside its 90% "
                f"interval of P_l; {COVERAGE_BOUNDS[0]:.0%}-{COVERAGE_BOUNDS[1]:.0%} is what a challenger "
                "needs to be promoted (above: intervals too wide).",
                [
                    query(
                        _serving("kafka_audit_model_live_coverage"),
                        "{{model_version}}",
                        instant=True,
                    )
                ],
                "percentunit",
                [(None, "red"), (COVERAGE_BOUNDS[0], "green"), (COVERAGE_BOUNDS[1], "yellow")],
                width=6,
                height=5,
            )
        )
        .with_panel(
            stat(
                "Decisions in the time range",
                "Champion / challenger decisions of the background retraining in the dashboard's time range, "
                "by outcome (promoted, rejected).",
                [
                    query(
                        "round(sum by (outcome) (increase(kafka_audit_model_decisions_total[$__range])))",
                        "{{outcome}}",
                        instant=True,
                    )
                ],
                "short",
                [(None, "blue")],
                width=6,
                height=5,
            )
        )
    )


def _accuracy_row(d: Dashboard) -> Dashboard:
    mae = timeseries(
        "Live MAE(P_l) per model version",
        "Rolling mean |P_l - R_l| (fraction of messages) of each model version over its recent final "
        "windows on this deployment. Dashed: the default calibration threshold; below it the version is "
        "calibrated and drift alerts fire.",
        [query(f"kafka_audit_model_live_mae{{{VERSION_SEL}}}", "{{model_version}}")],
        "percentunit",
    )
    coverage = timeseries(
        "90% interval coverage per model version",
        "Share of each version's recent final windows whose R_l lay inside its 90% interval of P_l "
        f"(nominal 90%). Dashed: {COVERAGE_BOUNDS[0]:.0%} and {COVERAGE_BOUNDS[1]:.0%}.",
        [query(f"kafka_audit_model_live_coverage{{{VERSION_SEL}}}", "{{model_version}}")],
        "percentunit",
        max_val=1,
    )
    calibrated = timeseries(
        "Calibrated (1) or calibrating (0)",
        "Per model version: 1 while its rolling live MAE(P_l) is below the calibration threshold (enough "
        "windows seen), 0 while calibrating.",
        [query(f"kafka_audit_model_calibrated{{{VERSION_SEL}}}", "{{model_version}}")],
        "none",
        max_val=1,
    ).line_interpolation(LineInterpolation.STEP_AFTER)
    serving = timeseries(
        "Serving model version",
        "Which model version served the predictions when (1 = serving). A new one appears at the "
        "micro-batch after its promotion (hot swap, no restart).",
        [query("kafka_audit_model_champion_info == 1", "{{model_version}}")],
        "none",
        max_val=1,
    ).line_interpolation(LineInterpolation.STEP_AFTER)
    return (
        d.with_row(Row("Live accuracy per model version"))
        .with_panel(_dashed_thresholds(mae, [(None, "green"), (CALIBRATION_MAX_MAE, "red")]))
        .with_panel(
            _dashed_thresholds(
                coverage, [(None, "red"), (COVERAGE_BOUNDS[0], "green"), (COVERAGE_BOUNDS[1], "yellow")]
            )
        )
        .with_panel(calibrated)
        .with_panel(serving)
    )


def _bars(panel: TimeseriesPanel) -> TimeseriesPanel:
    return panel.draw_style(GraphDrawStyle.BARS).fill_opacity(60)


def _retraining_row(d: Dashboard) -> Dashboard:
    return (
        d.with_row(Row("Retraining"))
        .with_panel(
            _bars(
                timeseries(
                    "Champion / challenger decisions",
                    "Decisions per interval by outcome: promoted (the challenger serves from the next "
                    "micro-batch) or rejected (the champion keeps serving). Each one is also an event in "
                    "the alerts topic (KafkaAuditModelPromoted / KafkaAuditModelRejected).",
                    [
                        query(
                            f"sum by (outcome) (increase(kafka_audit_model_decisions_total[{RATE}]))",
                            "{{outcome}}",
                        )
                    ],
                    "short",
                    width=8,
                )
            )
        )
        .with_panel(
            _bars(
                timeseries(
                    "Retraining runs by result",
                    "Background retraining processes that ended per interval: completed, failed (non-zero "
                    "exit) or killed (signal, or stopped with the job). A failed or killed run leaves the "
                    "champion serving.",
                    [
                        query(
                            f"sum by (result) (increase(kafka_audit_retrain_runs_total[{RATE}]))",
                            "{{result}}",
                        )
                    ],
                    "short",
                    width=8,
                )
            )
        )
        .with_panel(
            _bars(
                timeseries(
                    "Training windows by outcome",
                    "Final windows offered to the training store per interval: stored, or the reason "
                    "they were left out (no_producer_config, unmapped_config, unknown_loss, unknown_delay, "
                    "too_few_messages, unaudited_producers, mixed_config).",
                    [
                        query(
                            f"sum by (outcome) (increase(kafka_audit_training_windows_total[{RATE}]))",
                            "{{outcome}}",
                        )
                    ],
                    "short",
                    width=8,
                )
            )
        )
    )


def _topic_row(d: Dashboard) -> Dashboard:
    error = timeseries(
        "|R_l - P_l| per window",
        "Absolute error of the predicted P_l (p50) against the measured R_l of each final window "
        "(fraction of messages), per tier; the serving model's live MAE is its rolling mean over all topics.",
        [
            query(
                f"abs(kafka_audit_loss_ratio{{{ROW_SEL}}} - ignoring(bound) "
                f'kafka_audit_predicted_loss_ratio{{{ROW_SEL}, bound="p50"}})',
                "{{tier}}",
            ),
            query(
                f"max({_serving('kafka_audit_model_live_mae')})",
                "live MAE, serving model",
            ),
        ],
        "percentunit",
        width=12,
    )
    return (
        d.with_row(Row("$topic: R_l actual vs predicted").repeat("topic"))
        .with_panel(loss_vs_predicted(width=12))
        .with_panel(error)
    )


def model_dashboard() -> Dashboard:
    """Build the "Predictor model" dashboard (a grafana-foundation-sdk builder, uid :data:`UID`)."""
    d = (
        Dashboard(TITLE)
        .uid(UID)
        .description(
            "The predictor on this deployment: serving version, calibrated or calibrating, live MAE(P_l) "
            "and 90% coverage per version, retraining and decisions, R_l vs P_l per topic."
        )
        .tags(["kafka-audit", "kafka", "predictor"])
        .refresh("30s")
        .time("now-6h", "now")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .annotation(decision_annotation("promoted"))
        .annotation(decision_annotation("rejected"))
    )
    d = topic_variables(d).with_variable(
        label_variable(
            "model_version", "Model version", "label_values(kafka_audit_model_live_mae, model_version)"
        )
    )
    return _topic_row(_retraining_row(_accuracy_row(_serving_row(d))))
