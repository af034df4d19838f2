"""Dashboards as code: the built JSON, provisioning files, Prometheus rules (promtool), push to Grafana."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from dashboards.brokers import UID as BROKERS_UID
from dashboards.build import DATASOURCE_UID, build, dashboards, iter_queries
from dashboards.completeness import TIER_VIEW_PANELS
from dashboards.push import GrafanaAuthError, GrafanaPushError, push, safe_url
from kafka_audit.cli import app
from kafka_plumbing.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
# The contract's metric names (docs/DESIGN.md, "Metrics"; histogram series add _bucket/_sum/_count).
CONTRACT_METRICS = {
    "kafka_audit_completeness_ratio",
    "kafka_audit_loss_ratio",
    "kafka_audit_duplicate_ratio",
    "kafka_audit_last_final_window_end_seconds",
    "kafka_audit_messages_sent_total",
    "kafka_audit_messages_unique_total",
    "kafka_audit_messages_lost_total",
    "kafka_audit_messages_duplicated_total",
    "kafka_audit_windows_total",
    "kafka_audit_dead_letters_total",
    "kafka_audit_late_snapshots_total",
    "kafka_audit_rows_dropped_by_watermark",
    "kafka_audit_watermark_lag_seconds",
    "kafka_audit_batch_duration_seconds_bucket",
    "kafka_audit_predicted_loss_ratio",
    "kafka_audit_predicted_duplicate_ratio",
    "kafka_audit_gamma",
    "kafka_audit_gamma_target",
    "kafka_audit_unaudited_producers",
    "kafka_audit_alerts_firing",
    "kafka_audit_producer_info",
    "kafka_audit_producer_rtt_seconds",
    "kafka_audit_producer_tx_retries",
    "kafka_audit_suggestion_info",
    "kafka_audit_training_windows_total",
    "kafka_audit_model_live_mae",
    "kafka_audit_model_live_coverage",
    "kafka_audit_model_calibrated",
    "kafka_audit_model_champion_info",
    "kafka_audit_model_decisions_total",
    "kafka_audit_retrain_runs_total",
    "kafka_audit_control_decisions_total",
    "kafka_audit_control_kill_switch",
    "kafka_audit_messages_received_total",
    "kafka_audit_messages_unaudited_total",
    "kafka_audit_messages_unaccounted_total",
    "kafka_audit_unaccounted_messages",
    "kafka_audit_unaudited_ratio",
    "kafka_audit_producers",
    "kafka_audit_final_wait_seconds",
    "kafka_audit_tier_completeness_ratio",
    "kafka_audit_tier_lag_seconds",
    "kafka_audit_tier_behind_messages",
    "kafka_audit_tier_duplicates_added_total",
    "kafka_audit_window_lost_messages_by_leader_total",
    "kafka_audit_freshness_messages_total",
    # the job's SLO evaluation (alerts.slo_evaluation, in the job's registry)
    "kafka_audit_slo_error_budget_remaining_ratio",
    "kafka_audit_slo_burn_rate",
    "kafka_audit_slo_period_messages",
    "kafka_audit_slo_error_budget_messages",
    "kafka_audit_slo_objective_ratio",
    "kafka_audit_slo_evaluated_at_seconds",
}
ALERT_NAMES = {
    "KafkaAuditCompletenessBelowTarget",
    "KafkaAuditGammaBelowTarget",
    "KafkaAuditPredictionDrift",
    "KafkaAuditAuditLag",
    "KafkaAuditUnauditedProducers",
    "KafkaAuditUnauditedTraffic",
    "KafkaAuditUnaccountedMessages",
}
PROMTOOL = "/usr/bin/promtool"


def _metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bkafka_audit_\w+", expr))


@pytest.fixture(scope="module")
def models():
    return dashboards()


def test_dashboards_with_stable_uids_and_titles(models):
    assert {m["uid"]: m["title"] for m in models.values()} == {
        "kafka-audit-completeness": "Kafka completeness",
        "kafka-audit-producers": "Producer reliability",
        "kafka-audit-model": "Predictor model",
        "kafka-audit-brokers": "Kafka brokers",
        "kafka-audit-slos": "SLOs",
    }


def test_contract_metrics_are_the_exporters():
    """Every metric the dashboards may query is registered by the Spark job's or the alerts' exporter."""
    from prometheus_client import CollectorRegistry

    from alerts.metrics import AlertMetrics
    from alerts.slo_evaluation import SloMetrics
    from control_loop.metrics import ControlMetrics
    from spark_streaming.metrics import ResultMetrics

    job = ResultMetrics().registry
    ControlMetrics(job)  # the control loop registers in the job's registry (control_loop.attach_to_job)
    alerts = CollectorRegistry()
    AlertMetrics(alerts)
    SloMetrics(alerts)  # the SLO evaluation too (alerts.attach_to_job with SLO settings)
    exported = set(job._names_to_collectors) | set(alerts._names_to_collectors)
    missing = CONTRACT_METRICS - exported
    assert not missing, missing


def test_every_query_uses_only_contract_metrics(models):
    used = set()
    for model in models.values():
        if model["uid"] == BROKERS_UID:  # the brokers' JMX exporters: tests/unit/test_broker_metrics.py
            continue
        queries = list(iter_queries(model))
        assert queries
        for q in queries:
            names = _metric_names(q.expr)
            assert names, f"{q.panel}: no kafka_audit metric in {q.expr!r}"
            assert names <= CONTRACT_METRICS, f"{q.panel}: not in the contract: {names - CONTRACT_METRICS}"
            used |= names
        for var in model["templating"]["list"]:
            if var["type"] == "query":
                assert _metric_names(var["query"]) <= CONTRACT_METRICS
    # The views the issue asks for are all there.
    for needed in (
        "kafka_audit_completeness_ratio",
        "kafka_audit_messages_sent_total",
        "kafka_audit_messages_unique_total",
        "kafka_audit_loss_ratio",
        "kafka_audit_predicted_loss_ratio",
        "kafka_audit_duplicate_ratio",
        "kafka_audit_predicted_duplicate_ratio",
        "kafka_audit_gamma",
        "kafka_audit_gamma_target",
        "kafka_audit_last_final_window_end_seconds",
        "kafka_audit_unaudited_producers",
        "kafka_audit_messages_unaudited_total",
        "kafka_audit_unaudited_ratio",
        "kafka_audit_final_wait_seconds",
        "kafka_audit_tier_completeness_ratio",
        "kafka_audit_tier_lag_seconds",
        "kafka_audit_tier_behind_messages",
        "kafka_audit_alerts_firing",
        "kafka_audit_producer_info",
        "kafka_audit_producer_rtt_seconds",
        "kafka_audit_producer_tx_retries",
        "kafka_audit_suggestion_info",
        "kafka_audit_model_live_mae",
        "kafka_audit_model_live_coverage",
        "kafka_audit_model_calibrated",
        "kafka_audit_model_champion_info",
        "kafka_audit_model_decisions_total",
        "kafka_audit_retrain_runs_total",
        "kafka_audit_training_windows_total",
        "kafka_audit_control_decisions_total",
        "kafka_audit_control_kill_switch",
        "kafka_audit_slo_error_budget_remaining_ratio",
        "kafka_audit_slo_burn_rate",
        "kafka_audit_slo_period_messages",
        "kafka_audit_slo_error_budget_messages",
        "kafka_audit_freshness_messages_total",
    ):
        assert needed in used, needed


def test_completeness_variables_derive_cluster_from_tier(models):
    model = models["kafka-audit-completeness"]
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert set(variables) == {"datasource", "cluster", "topic", "tier"}
    cluster = variables["cluster"]
    assert "tier)" in cluster["query"]
    pattern = cluster["regex"].strip("/")
    assert re.match(pattern, "cluster:local").group(1) == "local"
    assert re.match(pattern, "producer") is None
    for name in ("cluster", "topic", "tier"):
        assert variables[name]["multi"] and variables[name]["includeAll"]
        assert variables[name]["allValue"] == ".*"
    # Every per-(topic, tier) query filters by all three variables; the tier view shows every tier.
    for q in iter_queries(model):
        if q.panel in TIER_VIEW_PANELS:
            assert 'topic=~"$topic"' in q.expr and "$tier" not in q.expr, q
            continue
        if "{" in q.expr and "tier" in q.expr and not q.annotation:
            assert "$topic" in q.expr and "$tier" in q.expr and "cluster:$cluster" in q.expr, q


def test_panels_have_ids_datasource_and_the_alert_annotation(models):
    for model in models.values():
        ids = [p["id"] for p in model["panels"]]
        assert len(ids) == len(set(ids)) and 0 not in ids
        for panel in model["panels"]:
            if panel["type"] != "row":
                assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
                assert [t["refId"] for t in panel["targets"]] == list("ABCD"[: len(panel["targets"])])
    annotation, promotions, changes = models["kafka-audit-completeness"]["annotations"]["list"]
    assert "kafka_audit_alerts_firing" in annotation["expr"] and annotation["titleFormat"] == "{{alertname}}"
    assert annotation["tagKeys"] == "topic,tier,severity"
    assert promotions["name"] == "Model promotions" and promotions["enable"] is True
    assert changes["name"] == "Configuration changes" and changes["enable"] is True
    assert 'kafka_audit_control_decisions_total{kind=~"change|rollback"}' in changes["expr"]
    assert changes["titleFormat"] == "configuration {{kind}}: {{group}}"
    assert changes["tagKeys"] == "group,kind"


def test_control_loop_panel_shows_decisions_per_group_by_kind(models):
    model = models["kafka-audit-completeness"]
    by_title = {p["title"]: p for p in model["panels"] if p["type"] != "row"}
    targets = by_title["Configuration changes"]["targets"]
    assert "sum by (group, kind)" in targets[0]["expr"] and 'kind!="held"' in targets[0]["expr"]
    assert targets[0]["legendFormat"] == "{{kind}} {{group}}"
    assert "sum by (group, reason)" in targets[1]["expr"] and 'kind="held"' in targets[1]["expr"]
    assert by_title["Control kill switch"]["targets"][0]["expr"] == "max(kafka_audit_control_kill_switch)"


def test_slo_dashboard_shows_budget_burn_spending_windows_and_freshness(models, tmp_path):
    from dashboards.slos import UID as SLOS_UID

    model = models[SLOS_UID]
    queries = {q.panel: q.expr for q in iter_queries(model) if not q.annotation}
    assert "kafka_audit_slo_error_budget_remaining_ratio" in queries["Error budget remaining"]
    assert "kafka_audit_slo_burn_rate" in queries["Burn rate per alert window"]
    spent = queries["Budget spent per interval"]
    assert "kafka_audit_messages_lost_total" in spent and "kafka_audit_slo_error_budget_messages" in spent
    assert "group_right" in spent  # several SLOs may judge one (topic, tier): the budget is the many side
    assert "histogram_quantile(0.99" in queries["Freshness percentiles per tier"]
    assert [v["name"] for v in model["templating"]["list"]] == ["datasource", "slo", "topic", "tier"]
    [annotation] = model["annotations"]["list"]
    assert "BudgetBurn" in annotation["expr"]
    # Every query is valid PromQL: promtool parses each one as a recording rule (variables as Grafana
    # fills them: one value, or .* for "All").
    fill = {"$__rate_interval": "1m", "$__interval": "1m", "$slo": ".*", "$topic": ".*", "$tier": ".*"}
    rules = []
    for i, q in enumerate(iter_queries(model)):
        expr = q.expr
        for var, value in fill.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, expr
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "slo-dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "slo-dashboard", "rules": rules}]}))
    done = _promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_interval_band_between_p05_and_p95(models):
    panel = next(p for p in models["kafka-audit-completeness"]["panels"] if p["title"].startswith("R_l"))
    legends = [t["legendFormat"] for t in panel["targets"]]
    assert legends == ["R_l actual", "P_l predicted", "P_l p05", "P_l p95"]
    upper = next(o for o in panel["fieldConfig"]["overrides"] if o["matcher"]["options"] == "P_l p95")
    assert {"id": "custom.fillBelowTo", "value": "P_l p05"} in upper["properties"]


def test_model_dashboard_views(models):
    model = models["kafka-audit-model"]
    by_title = {p["title"]: p for p in model["panels"] if p["type"] != "row"}
    exprs = {title: [t["expr"] for t in p["targets"]] for title, p in by_title.items()}
    # live MAE and coverage per model version over time
    assert exprs["Live MAE(P_l) per model version"] == [
        'kafka_audit_model_live_mae{model_version=~"$model_version"}'
    ]
    assert by_title["Live MAE(P_l) per model version"]["targets"][0]["legendFormat"] == "{{model_version}}"
    coverage = by_title["90% interval coverage per model version"]["fieldConfig"]["defaults"]
    assert [s["value"] for s in coverage["thresholds"]["steps"]] == [None, 0.8, 0.97]
    assert coverage["custom"]["thresholdsStyle"] == {"mode": "dashed"}
    # the serving version and its calibrated state, as words
    serving = by_title["Serving model"]
    assert "kafka_audit_model_champion_info == 1" in serving["targets"][0]["expr"]
    texts = {v["text"] for m in serving["fieldConfig"]["defaults"]["mappings"] for v in m["options"].values()}
    assert texts == {"calibrating", "calibrated"}
    assert serving["options"]["textMode"] == "value_and_name"
    # retraining: decisions, runs, training windows by outcome
    assert "kafka_audit_model_decisions_total" in exprs["Champion / challenger decisions"][0]
    assert "sum by (result)" in exprs["Retraining runs by result"][0]
    assert "sum by (outcome)" in exprs["Training windows by outcome"][0]
    # predicted vs actual R_l per topic (a repeated row)
    rows = [p for p in model["panels"] if p["type"] == "row"]
    assert any(r.get("repeat") == "topic" for r in rows)
    assert "P_l p95" in [t["legendFormat"] for t in by_title["R_l actual vs predicted P_l"]["targets"]]
    # promotions (on) and rejections (off) as annotations titled with the serving model version
    promotions, rejections = model["annotations"]["list"]
    assert (promotions["name"], promotions["enable"], rejections["enable"]) == (
        "Model promotions",
        True,
        False,
    )
    assert 'kafka_audit_model_decisions_total{outcome="promoted"}' in promotions["expr"]
    assert promotions["titleFormat"] == "model {{model_version}} promoted"
    assert promotions["tagKeys"] == "model_version" and promotions["useValueForTime"] is False
    variables = {v["name"] for v in model["templating"]["list"]}
    assert variables == {"datasource", "cluster", "topic", "tier", "model_version"}


def test_build_writes_dashboards_and_provisioning(tmp_path):
    written = build(tmp_path / "out", prometheus_url="http://prometheus:9090", grafana_dir="/etc/ka/grafana")
    names = sorted(str(p.relative_to(tmp_path / "out")) for p in written)
    assert names == [
        "dashboards/kafka-audit-brokers.json",
        "dashboards/kafka-audit-completeness.json",
        "dashboards/kafka-audit-model.json",
        "dashboards/kafka-audit-producers.json",
        "dashboards/kafka-audit-slos.json",
        "prometheus/kafka-audit-rules.yml",
        "provisioning/dashboards/kafka-audit.yaml",
        "provisioning/datasources/kafka-audit.yaml",
    ]
    board = json.loads((tmp_path / "out/dashboards/kafka-audit-completeness.json").read_text())
    assert board["uid"] == "kafka-audit-completeness"
    [ds] = yaml.safe_load((tmp_path / "out/provisioning/datasources/kafka-audit.yaml").read_text())[
        "datasources"
    ]
    assert (ds["uid"], ds["type"], ds["url"]) == (DATASOURCE_UID, "prometheus", "http://prometheus:9090")
    [provider] = yaml.safe_load((tmp_path / "out/provisioning/dashboards/kafka-audit.yaml").read_text())[
        "providers"
    ]
    assert provider["type"] == "file" and provider["options"]["path"] == "/etc/ka/grafana/dashboards"


def test_build_rejects_bad_prometheus_url(tmp_path):
    with pytest.raises(ConfigError, match="--prometheus-url"):
        build(tmp_path, prometheus_url="prometheus:9090")


def test_cli_build(tmp_path):
    result = CliRunner().invoke(app, ["dashboards", "build", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "dashboards/kafka-audit-producers.json").exists()


# ------------------------------------------------------------------------------------------ promtool
def _promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    assert shutil.which(PROMTOOL), (
        "promtool (Debian package prometheus) is a required dev tool: make bootstrap"
    )
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def test_promtool_checks_the_rules_and_the_build_output(tmp_path):
    packaged = REPO / "dashboards/prometheus-rules.yml"
    built = [p for p in build(tmp_path) if p.suffix == ".yml"]
    for rules in (packaged, *built):
        done = _promtool("check", "rules", str(rules))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "SUCCESS: 7 rules found" in done.stdout
    names = {r["alert"] for g in yaml.safe_load(packaged.read_text())["groups"] for r in g["rules"]}
    assert names == ALERT_NAMES


def test_promtool_unit_tests_of_the_rules():
    done = _promtool("test", "rules", "prometheus-rules.test.yml", cwd=REPO / "dashboards")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_unit_tests_can_fail(tmp_path):
    """A wrong expectation fails, so the test above means something."""
    shutil.copy(REPO / "dashboards/prometheus-rules.yml", tmp_path)
    text = (REPO / "dashboards/prometheus-rules.test.yml").read_text()
    (tmp_path / "prometheus-rules.test.yml").write_text(text.replace("gamma 0.700 below", "gamma 0.9 below"))
    done = _promtool("test", "rules", "prometheus-rules.test.yml", cwd=tmp_path)
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr


def test_example_prometheus_and_alertmanager_configs(tmp_path):
    shutil.copy(REPO / "deploy/prometheus/prometheus.yml", tmp_path)
    shutil.copy(REPO / "dashboards/prometheus-rules.yml", tmp_path / "kafka-audit-rules.yml")
    done = _promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert done.returncode == 0, done.stdout + done.stderr
    amtool = shutil.which("amtool")
    assert amtool, "amtool (Debian package prometheus-alertmanager) is a required dev tool"
    done = subprocess.run(
        [amtool, "check-config", str(REPO / "deploy/alertmanager.yml")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


# ------------------------------------------------------------------------------------------ push
GOOD, VIEWER = "glsa_good_token_123", "glsa_viewer_token_456"


class FakeGrafana(BaseHTTPRequestHandler):
    """Just enough of Grafana's HTTP API: folders and dashboards/db, with bearer-token auth."""

    state: dict

    def log_message(self, *args):
        pass

    def _reply(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _auth(self, write: bool) -> bool:
        token = self.headers.get("Authorization", "")
        self.state["auth"].append(token)
        if token not in (f"Bearer {GOOD}", f"Bearer {VIEWER}"):
            self._reply(401, {"message": "invalid API key"})
            return False
        if write and token == f"Bearer {VIEWER}":
            self._reply(403, {"message": "You'll need additional permissions to perform this action."})
            return False
        return True

    def do_GET(self):
        self.state["requests"].append(("GET", self.path))
        if not self._auth(write=False):
            return
        if self.path.split("?")[0] == "/grafana/api/folders":
            self._reply(200, self.state["folders"])
        else:
            self._reply(404, {"message": "not found"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.state["requests"].append(("POST", self.path))
        if not self._auth(write=True):
            return
        if self.path == "/grafana/api/folders":
            folder = {"id": len(self.state["folders"]) + 1, "uid": body["uid"], "title": body["title"]}
            self.state["folders"].append(folder)
            self._reply(200, folder)
        elif self.path == "/grafana/api/dashboards/db":
            dash = body["dashboard"]
            assert body["overwrite"] is True and dash["id"] is None
            assert body["folderUid"] in {f["uid"] for f in self.state["folders"]}
            old = self.state["dashboards"].get(dash["uid"])
            version = old["version"] + 1 if old else 1
            self.state["dashboards"][dash["uid"]] = {"version": version, "folder": body["folderUid"], **dash}
            self._reply(
                200,
                {"status": "success", "uid": dash["uid"], "version": version, "url": f"/d/{dash['uid']}/x"},
            )
        else:
            self._reply(404, {"message": "not found"})


@pytest.fixture
def grafana():
    state = {
        "folders": [{"id": 1, "uid": "other", "title": "Other"}],
        "dashboards": {},
        "requests": [],
        "auth": [],
    }
    handler = type("Handler", (FakeGrafana,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/grafana", state
    finally:
        server.shutdown()
        server.server_close()


def test_push_creates_folder_once_and_overwrites_by_uid(grafana, models):
    url, state = grafana
    first = push(url, GOOD, models, folder="Kafka Audit")
    assert [(d.uid, d.version) for d in first] == [
        ("kafka-audit-completeness", 1),
        ("kafka-audit-producers", 1),
        ("kafka-audit-model", 1),
        ("kafka-audit-brokers", 1),
        ("kafka-audit-slos", 1),
    ]
    second = push(url, GOOD, models, folder="Kafka Audit")
    assert [d.version for d in second] == [2, 2, 2, 2, 2]
    created = [f for f in state["folders"] if f["title"] == "Kafka Audit"]
    assert len(created) == 1 and created[0]["uid"] == "kafka-audit"
    assert set(state["dashboards"]) == set(models)
    assert {d["folder"] for d in state["dashboards"].values()} == {"kafka-audit"}
    assert (
        state["dashboards"]["kafka-audit-completeness"]["panels"]
        == models["kafka-audit-completeness"]["panels"]
    )
    assert set(state["auth"]) == {f"Bearer {GOOD}"}
    assert state["requests"].count(("POST", "/grafana/api/folders")) == 1


def test_push_into_an_existing_folder(grafana, models):
    url, state = grafana
    push(url, GOOD, models, folder="Other")
    assert {d["folder"] for d in state["dashboards"].values()} == {"other"}
    assert ("POST", "/grafana/api/folders") not in state["requests"]


def test_push_bad_token_is_a_clear_auth_error(grafana, models):
    url, state = grafana
    with pytest.raises(GrafanaAuthError, match=r"rejected the token \(HTTP 401") as info:
        push(url, "wrong-token", models)
    assert url in str(info.value) and "wrong-token" not in str(info.value)
    assert state["dashboards"] == {}


def test_push_token_without_permission_is_403(grafana, models):
    url, _ = grafana
    with pytest.raises(GrafanaAuthError, match=r"HTTP 403 Forbidden.*Editor"):
        push(url, VIEWER, models)


def test_push_unreachable_grafana(models):
    with pytest.raises(GrafanaPushError, match=re.escape("cannot reach Grafana at http://127.0.0.1:9")):
        push("http://127.0.0.1:9", GOOD, models, timeout_s=2)


def test_push_rejects_bad_url_and_never_shows_credentials(models):
    with pytest.raises(ConfigError, match="--url"):
        push("grafana:3000", GOOD, models)
    assert safe_url("http://admin:s3cret@grafana:3000/g") == "http://grafana:3000/g"


def test_cli_push_bad_token_exits_2_without_printing_it(grafana, monkeypatch):
    url, _ = grafana
    monkeypatch.setenv("GRAFANA_TOKEN", "secret-but-wrong")
    result = CliRunner().invoke(app, ["dashboards", "push", "--url", url])
    assert result.exit_code == 2
    assert "rejected the token" in result.output and "127.0.0.1" in result.output
    assert "secret-but-wrong" not in result.output


def test_cli_push_ok(grafana, monkeypatch):
    url, state = grafana
    monkeypatch.setenv("GRAFANA_TOKEN", GOOD)
    result = CliRunner().invoke(app, ["dashboards", "push", "--url", url, "--folder", "kafka-audit"])
    assert result.exit_code == 0, result.output
    assert "kafka-audit-completeness" in result.output and GOOD not in result.output
    assert len(state["dashboards"]) == len(dashboards())


def test_json_decodes_with_the_sdk_grafana_schema(models):
    """The written JSON reads back through grafana-foundation-sdk's Grafana 11.6 dashboard model."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    for model in models.values():
        back = json.loads(JSONEncoder().encode(Dashboard.from_json(model)))
        assert [p["title"] for p in back["panels"]] == [p["title"] for p in model["panels"]]
        assert [q.expr for q in iter_queries(back)] == [q.expr for q in iter_queries(model)]
