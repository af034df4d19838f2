"""Small builders shared by the dashboards: the Prometheus data source, variables, panels, queries.

Everything here wraps grafana-foundation-sdk builders (Grafana 11.6 schema) so that the dashboard
modules read as a list of panels. Panels query the Prometheus exporter of the Spark job
(``spark_streaming/metrics.py``; metric names as in ``docs/DESIGN.md``, "Metrics").
"""

from __future__ import annotations

from typing import Any, TypeVar

from grafana_foundation_sdk.builders.dashboard import (
    AnnotationQuery,
    DatasourceVariable,
    QueryVariable,
    ThresholdsConfig,
)
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.builders.stat import Panel as StatPanel
from grafana_foundation_sdk.builders.table import Panel as TablePanel
from grafana_foundation_sdk.builders.timeseries import Panel as TimeseriesPanel
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    DataTransformerConfig,
    DynamicConfigValue,
    Threshold,
    ThresholdsMode,
    VariableOption,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

DATASOURCE_VAR = "datasource"
#: Every panel and variable uses the data source picked in the ``$datasource`` variable.
PROMETHEUS = DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VAR}}}")
_REF_IDS = "ABCDEFGHIJ"

FIRING_ALERTS = "Firing alerts"
MODEL_PROMOTIONS = "Model promotions"
MODEL_REJECTIONS = "Model rejections"
CONFIG_CHANGES = "Configuration changes"
#: Fields of a Prometheus annotation the SDK's annotation model lacks, by annotation name
#: (``dashboards.build.dashboard_json`` adds them): title and text (``{{label}}`` templates), the labels
#: that become tags. Grafana marks every step where the expression is > 0.
ANNOTATION_FORMATS: dict[str, dict[str, Any]] = {
    FIRING_ALERTS: {"titleFormat": "{{alertname}}", "tagKeys": "topic,tier,severity"},
    MODEL_PROMOTIONS: {
        "titleFormat": "model {{model_version}} promoted",
        "textFormat": "A retrained challenger beat the champion; {{model_version}} serves from here on.",
        "tagKeys": "model_version",
    },
    MODEL_REJECTIONS: {
        "titleFormat": "challenger rejected, {{model_version}} keeps serving",
        "textFormat": "A retrained challenger did not beat the champion {{model_version}}.",
        "tagKeys": "model_version",
    },
    CONFIG_CHANGES: {
        "titleFormat": "configuration {{kind}}: {{group}}",
        "textFormat": "The control loop wrote a new configuration of producer group {{group}} ({{kind}}); "
        "the alerts topic has the event with gamma before and after.",
        "tagKeys": "group,kind",
    },
}


def firing_alerts_annotation(expr: str) -> AnnotationQuery:
    """Return the red annotation marking firing kafka-audit alerts (:data:`FIRING_ALERTS`).

    Args:
        expr: PromQL on ``kafka_audit_alerts_firing`` (e.g. filtered by the dashboard's ``$topic``).
    """
    return (
        AnnotationQuery().name(FIRING_ALERTS).datasource(PROMETHEUS).enable(True).icon_color("red").expr(expr)
    )


def datasource_variable() -> DatasourceVariable:
    """Return the ``$datasource`` variable: any Prometheus data source of the Grafana instance."""
    return DatasourceVariable(DATASOURCE_VAR).label("Prometheus").type("prometheus")


def label_variable(name: str, label: str, query: str, regex: str | None = None) -> QueryVariable:
    """Return a multi-value query variable over ``label_values(...)``, "All" selected, all value ``.*``.

    Args:
        name: Variable name (``$name`` in queries).
        label: Shown next to the drop-down.
        query: Grafana Prometheus variable query, e.g. ``label_values(metric{...}, topic)``.
        regex: Optional regex applied to the values (first capture group is the value).
    """
    var = (
        QueryVariable(name)
        .label(label)
        .datasource(PROMETHEUS)
        .query(query)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(VariableOption(selected=True, text="All", value="$__all"))
    )
    return var.regex(regex) if regex else var


def query(expr: str, legend: str = "", *, instant: bool = False, table: bool = False) -> Dataquery:
    """One PromQL target (``refId`` is set by the panel helpers); ``legend`` uses ``{{label}}``."""
    q = Dataquery().expr(expr).legend_format(legend).datasource(PROMETHEUS)
    if instant:
        q = q.instant()
    if table:
        q = q.format(PromQueryFormat.TABLE)
    return q


_P = TypeVar("_P", TimeseriesPanel, StatPanel, TablePanel)


def _panel(panel: _P, title: str, description: str, targets: list[Dataquery], width: int, height: int) -> _P:
    """Give ``panel`` what every panel has: title, tooltip, the ``$datasource``, size and its targets."""
    panel = panel.title(title).description(description).datasource(PROMETHEUS).span(width).height(height)
    for ref_id, target in zip(_REF_IDS, targets, strict=False):
        panel = panel.with_target(target.ref_id(ref_id))
    return panel


def timeseries(
    title: str,
    description: str,
    targets: list[Dataquery],
    unit: str,
    *,
    width: int = 12,
    height: int = 8,
    min_val: float | None = 0,
    max_val: float | None = None,
) -> TimeseriesPanel:
    """Return a time series panel.

    Args:
        title: Panel title.
        description: The panel's "i" tooltip.
        targets: PromQL queries (``refId`` A, B, ... in order).
        unit: Grafana unit id: ``percentunit`` (fraction 0-1 shown as %), ``s``, ``short``, ``cps``.
        width: Grid columns (a dashboard is 24 wide).
        height: Grid rows.
        min_val: Y axis minimum (None = automatic).
        max_val: Y axis maximum (None = automatic).
    """
    panel = TimeseriesPanel().unit(unit).line_width(2).fill_opacity(5).span_nulls(True)
    if min_val is not None:
        panel = panel.min(min_val)
    if max_val is not None:
        panel = panel.max(max_val)
    return _panel(panel, title, description, targets, width, height)


def band(panel: TimeseriesPanel, lower: str, upper: str) -> TimeseriesPanel:
    """Shade the interval between the series named ``lower`` and ``upper`` (Grafana fill-below-to)."""
    edge = [DynamicConfigValue("custom.lineWidth", 0)]
    upper_props = [
        *edge,
        DynamicConfigValue("custom.fillBelowTo", lower),
        DynamicConfigValue("custom.fillOpacity", 20),
    ]
    return panel.override_by_name(upper, upper_props).override_by_name(
        lower, [*edge, DynamicConfigValue("custom.fillOpacity", 0)]
    )


def dashed(panel: TimeseriesPanel, series: str, color: str = "red") -> TimeseriesPanel:
    """Draw ``series`` as a dashed line of a fixed colour (targets, thresholds)."""
    return panel.override_by_name(
        series,
        [
            DynamicConfigValue("custom.lineStyle", {"fill": "dash", "dash": [10, 10]}),
            DynamicConfigValue("color", {"mode": "fixed", "fixedColor": color}),
            DynamicConfigValue("custom.fillOpacity", 0),
        ],
    )


def stat(
    title: str,
    description: str,
    targets: list[Dataquery],
    unit: str,
    steps: list[tuple[float | None, str]],
    *,
    width: int = 6,
    height: int = 6,
) -> StatPanel:
    """Return a stat panel coloured by absolute threshold ``steps`` [(from value, None = base; colour)]."""
    thresholds = ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps([Threshold(v, c) for v, c in steps])
    return _panel(StatPanel().unit(unit).thresholds(thresholds), title, description, targets, width, height)


def table(
    title: str,
    description: str,
    targets: list[Dataquery],
    hide_columns: list[str],
    *,
    width: int = 24,
    height: int = 8,
) -> TablePanel:
    """Return a table of instant-query labels (one row per series), ``hide_columns`` removed."""
    organize = DataTransformerConfig(
        id_val="organize", options={"excludeByName": dict.fromkeys(hide_columns, True)}
    )
    panel = (
        TablePanel()
        .with_transformation(DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(organize)
    )
    return _panel(panel, title, description, targets, width, height)


def control_annotation() -> AnnotationQuery:
    """Return the annotation marking the control loop's configuration changes and rollbacks.

    :data:`CONFIG_CHANGES` (purple, on): every step at which
    ``kafka_audit_control_decisions_total{kind=~"change|rollback"}`` increased in the last 2 minutes,
    titled with the kind and the producer group.
    """
    expr = (
        "sum by (group, kind) "
        '(increase(kafka_audit_control_decisions_total{kind=~"change|rollback"}[2m])) > 0'
    )
    return (
        AnnotationQuery()
        .name(CONFIG_CHANGES)
        .datasource(PROMETHEUS)
        .enable(True)
        .icon_color("purple")
        .expr(expr)
    )


def decision_annotation(outcome: str) -> AnnotationQuery:
    """Return the annotation marking champion / challenger decisions of one ``outcome``.

    ``promoted`` (:data:`MODEL_PROMOTIONS`, green, on) or ``rejected`` (:data:`MODEL_REJECTIONS`,
    orange, off until toggled): every step at which ``kafka_audit_model_decisions_total{outcome}``
    increased in the last 2 minutes, titled with the model version serving after it
    (``kafka_audit_model_champion_info``).
    """
    name = MODEL_PROMOTIONS if outcome == "promoted" else MODEL_REJECTIONS
    expr = (
        f'(sum(increase(kafka_audit_model_decisions_total{{outcome="{outcome}"}}[2m])) > 0)'
        " * on() group_left(model_version) topk(1, max by (model_version) (kafka_audit_model_champion_info))"
    )
    return (
        AnnotationQuery()
        .name(name)
        .datasource(PROMETHEUS)
        .enable(outcome == "promoted")
        .icon_color("green" if outcome == "promoted" else "orange")
        .expr(expr)
    )
