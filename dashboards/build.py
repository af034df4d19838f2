"""Render the dashboards to Grafana JSON and write them with Grafana provisioning files.

``build(out)`` writes::

    out/dashboards/<uid>.json                       one file per dashboard (Grafana 11 JSON model)
    out/provisioning/datasources/kafka-audit.yaml   the Prometheus data source (uid kafka-audit-prometheus)
    out/provisioning/dashboards/kafka-audit.yaml    a file provider loading out/dashboards into a folder
    out/prometheus/kafka-audit-rules.yml            the Prometheus alerting rules (copy of the packaged file)

Point Grafana's ``paths.provisioning`` (env ``GF_PATHS_PROVISIONING``) at ``out/provisioning``; if
Grafana sees ``out`` under another path (a container volume), pass that path as ``grafana_dir``.
Grafana file provisioning: https://grafana.com/docs/grafana/latest/administration/provisioning/
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from kafka_plumbing.errors import ConfigError

DATASOURCE_UID = "kafka-audit-prometheus"
DATASOURCE_NAME = "kafka-audit Prometheus"
DEFAULT_FOLDER = "kafka-audit"
RULES_FILE = "prometheus-rules.yml"


def _builders() -> dict[str, Callable[[], Any]]:
    from dashboards.brokers import UID as BROKERS_UID
    from dashboards.brokers import broker_dashboard
    from dashboards.completeness import UID as COMPLETENESS_UID
    from dashboards.completeness import completeness_dashboard
    from dashboards.predictor_model import UID as MODEL_UID
    from dashboards.predictor_model import model_dashboard
    from dashboards.producers import UID as PRODUCERS_UID
    from dashboards.producers import producer_dashboard
    from dashboards.slos import UID as SLOS_UID
    from dashboards.slos import slo_dashboard

    return {
        COMPLETENESS_UID: completeness_dashboard,
        PRODUCERS_UID: producer_dashboard,
        MODEL_UID: model_dashboard,
        BROKERS_UID: broker_dashboard,
        SLOS_UID: slo_dashboard,
    }


def dashboard_json(builder: Any) -> dict[str, Any]:
    """Return the Grafana JSON model of a grafana-foundation-sdk dashboard builder.

    Panels get unique ids in layout order (rows included), and the Prometheus annotations get a title
    and tags (the alert name and topic, tier, severity; the model version for model decisions) --
    fields the SDK's annotation model lacks (``dashboards._panels.ANNOTATION_FORMATS``).
    """
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    from dashboards._panels import ANNOTATION_FORMATS, FIRING_ALERTS

    model: dict[str, Any] = json.loads(JSONEncoder().encode(builder.build()))
    for number, panel in enumerate(model.get("panels", []), start=1):
        panel["id"] = number
    for annotation in model.get("annotations", {}).get("list", []):
        if annotation.get("expr"):
            fmt = ANNOTATION_FORMATS.get(annotation.get("name", ""), ANNOTATION_FORMATS[FIRING_ALERTS])
            for key, value in fmt.items():
                annotation.setdefault(key, value)
            annotation.setdefault("useValueForTime", False)
    return model


def dashboards() -> dict[str, dict[str, Any]]:
    """Return every dashboard's JSON model by uid (completeness, producers, model, brokers, SLOs)."""
    return {uid: dashboard_json(make()) for uid, make in _builders().items()}


@dataclass(frozen=True)
class PanelQuery:
    """One PromQL query of a panel (or of an annotation, with ``panel`` = the annotation name)."""

    dashboard: str
    panel: str
    ref_id: str
    expr: str
    annotation: bool = False


def iter_queries(model: dict[str, Any]) -> Iterator[PanelQuery]:
    """Yield every panel target's and annotation's PromQL expression of a dashboard JSON model."""
    uid = model["uid"]
    for panel in model.get("panels", []):
        for target in panel.get("targets", []) or []:
            if target.get("expr"):
                yield PanelQuery(uid, panel["title"], target.get("refId", ""), target["expr"])
    for annotation in model.get("annotations", {}).get("list", []):
        if annotation.get("expr"):
            yield PanelQuery(uid, annotation["name"], "", annotation["expr"], annotation=True)


def rules_text() -> str:
    """Return the packaged Prometheus rules file (``dashboards/prometheus-rules.yml``)."""
    return resources.files("dashboards").joinpath(RULES_FILE).read_text()


def provisioning_files(
    dashboards_path: str, prometheus_url: str, folder: str = DEFAULT_FOLDER
) -> dict[str, dict[str, Any]]:
    """Return Grafana's provisioning documents by file name (relative to the provisioning directory).

    Args:
        dashboards_path: Directory holding the dashboard JSON as Grafana sees it.
        prometheus_url: URL Grafana's server uses to query Prometheus (``http://prometheus:9090``).
        folder: Grafana folder the dashboards go to.
    """
    datasource = {
        "apiVersion": 1,
        "datasources": [
            {
                "name": DATASOURCE_NAME,
                "uid": DATASOURCE_UID,
                "type": "prometheus",
                "access": "proxy",
                "url": prometheus_url,
                "isDefault": True,
                "editable": False,
                "jsonData": {"httpMethod": "POST", "timeInterval": "15s"},
            }
        ],
    }
    provider = {
        "apiVersion": 1,
        "providers": [
            {
                "name": "kafka-audit",
                "type": "file",
                "folder": folder,
                "disableDeletion": False,
                "allowUiUpdates": False,
                "updateIntervalSeconds": 30,
                "options": {"path": dashboards_path, "foldersFromFilesStructure": False},
            }
        ],
    }
    return {"datasources/kafka-audit.yaml": datasource, "dashboards/kafka-audit.yaml": provider}


def build(
    out: Path,
    prometheus_url: str = "http://127.0.0.1:9090",
    grafana_dir: str | None = None,
    folder: str = DEFAULT_FOLDER,
) -> list[Path]:
    """Write the dashboards, Grafana provisioning files and Prometheus rules under ``out``.

    Args:
        out: Output directory (created; files in it are overwritten).
        prometheus_url: URL of Prometheus as Grafana's server reaches it.
        grafana_dir: Where Grafana sees ``out`` (default: ``out`` itself, absolute).
        folder: Grafana folder of the provisioned dashboards.

    Returns:
        The files written.

    Raises:
        ConfigError: if ``prometheus_url`` is not an http(s) URL or ``out`` is a file.
    """
    if not prometheus_url.startswith(("http://", "https://")):
        raise ConfigError(f"--prometheus-url {prometheus_url!r}: expected an http:// or https:// URL")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a directory")
    seen_by_grafana = (grafana_dir or str(out.resolve())).rstrip("/")
    written: list[Path] = []
    for uid, model in dashboards().items():
        path = out / "dashboards" / f"{uid}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(model, indent=2, sort_keys=True) + "\n")
        written.append(path)
    for name, doc in provisioning_files(f"{seen_by_grafana}/dashboards", prometheus_url, folder).items():
        path = out / "provisioning" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        written.append(path)
    rules = out / "prometheus" / "kafka-audit-rules.yml"
    rules.parent.mkdir(parents=True, exist_ok=True)
    rules.write_text(rules_text())
    written.append(rules)
    return written
