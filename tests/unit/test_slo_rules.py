"""SLO settings and their generated Prometheus rules: promtool checks them, unit-tests the burn-rate alerts.

The promtool unit tests feed synthetic ``kafka_audit_messages_{sent,lost}_total`` series (one sample a
minute, like the job's counters that step once per final window) to the rules ``kafka-audit slo rules``
writes with the default settings (99.99% over 30 days; the Workbook's 14.4x 1h/5m and 6x 6h/30m pages,
1x 3d/6h ticket) and check which alerts fire: a fast burn pages within 5 minutes and resolves, a slow
leak opens a ticket and pages nobody, one bad window on a healthy topic alerts nobody, a topic with 10
messages an hour pages nobody (it opens a ticket). Annotations are left out of the copy promtool tests
(they hold the measured ratio); labels and firing are what is tested.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from alerts.slo_rules import ALERT_NAME, page_min_events, rules_document, rules_text
from alerts.slo_settings import WORKBOOK_ALERTS, SloSettings, load_slo_settings
from kafka_audit.cli import app
from kafka_plumbing.errors import ConfigError
from spark_streaming.metrics import ResultMetrics

PROMTOOL = "/usr/bin/promtool"
PER_MIN = 60_000
"""Messages a healthy topic's producers send per 60 s window (1000/s)."""
TIER = "cluster:eu"


def _promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    assert shutil.which(PROMTOOL), (
        "promtool (Debian package prometheus) is a required dev tool: make bootstrap"
    )
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def _series(topic: str, sent: str, lost: str) -> list[dict]:
    labels = f'topic="{topic}",tier="{TIER}",instance="job:9464",job="kafka-audit"'
    return [
        {"series": f"kafka_audit_messages_sent_total{{{labels}}}", "values": sent},
        {"series": f"kafka_audit_messages_lost_total{{{labels}}}", "values": lost},
    ]


def _alert(topic: str, long_window: str, short_window: str, burn: str) -> dict:
    page = burn != "1"
    return {
        "exp_labels": {
            "topic": topic,
            "tier": TIER,
            "slo": "completeness",
            "severity": "critical" if page else "warning",
            "urgency": "page" if page else "ticket",
            "long_window": long_window,
            "short_window": short_window,
            "burn_rate": burn,
        }
    }


FAST_1H = ("1h", "5m", "14.4")
SLOW_6H = ("6h", "30m", "6")
TICKET = ("3d", "6h", "1")


def _check(at: str, *alerts: dict) -> dict:
    return {"eval_time": at, "alertname": ALERT_NAME, "exp_alerts": list(alerts)}


def _low_traffic_sent(hours: int) -> str:
    """10 messages an hour: one more every 6 minutes (segments ``nx5``: 6 samples of n)."""
    return " ".join(f"{n}x5" for n in range(10 * hours))


def _tests() -> list[dict]:
    healthy = f"0+{PER_MIN}x500"
    return [
        {
            "name": "fast burn: 5% lost from minute 121 pages within 5 min; the 1h/5m page resolves",
            "interval": "1m",
            # 5% of each window lost from minute 121 to 160, none after.
            "input_series": _series("fast", healthy, "0x120 3000+3000x39 120000x60"),
            "alert_rule_test": [
                _check("120m"),
                _check(
                    "125m",
                    _alert("fast", *FAST_1H),
                    _alert("fast", *SLOW_6H),
                    _alert("fast", *TICKET),
                ),
                _check("170m", _alert("fast", *SLOW_6H), _alert("fast", *TICKET)),
            ],
        },
        {
            "name": "slow leak: 2x the budget (0.02% lost) opens a ticket, pages nobody",
            "interval": "1m",
            "input_series": _series("leak", healthy, "0+12x500"),
            "alert_rule_test": [
                _check("420m", _alert("leak", *TICKET)),
                _check("480m", _alert("leak", *TICKET)),
            ],
        },
        {
            "name": "one bad window (1% lost, under the 99.9% window target) of a healthy topic: no alert",
            "interval": "1m",
            "input_series": _series("blip", healthy, "0x399 600x100"),
            "alert_rule_test": [_check(at) for at in ("401m", "402m", "405m", "430m", "480m")],
        },
        {
            "name": "10 messages an hour, 3 of them lost in an hour: pages nobody, opens a ticket",
            "interval": "1m",
            "input_series": _series("trickle", _low_traffic_sent(8), "0x299 1x5 2x5 3x500"),
            "alert_rule_test": [
                _check("302m", _alert("trickle", *TICKET)),
                _check("320m", _alert("trickle", *TICKET)),
                _check("400m", _alert("trickle", *TICKET)),
            ],
        },
    ]


def _write_unit_tests(tmp_path: Path, settings: SloSettings) -> Path:
    doc = rules_document(settings)
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "slo-rules.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    test = {"rule_files": ["slo-rules.yml"], "evaluation_interval": "1m", "tests": _tests()}
    path = tmp_path / "slo-rules.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False, width=1_000))
    return path


# ------------------------------------------------------------------------------------------ settings
def test_defaults_give_monitor_mode_one_completeness_slo_and_the_workbook_alerts(monkeypatch):
    for name in ("COMPLETENESS", "FRESHNESS", "BURN_RATE_ALERTS", "LOW_TRAFFIC_MIN_EVENTS"):
        monkeypatch.delenv(f"KAFKA_AUDIT_SLO_{name}", raising=False)
    s = load_slo_settings()
    [slo] = s.slos()
    assert (slo.name, slo.objective, slo.period, slo.topic_pattern, slo.tier_pattern) == (
        "completeness",
        0.9999,
        "30d",
        ".*",
        "cluster:.*",
    )
    assert tuple(s.burn_rate_alerts) == WORKBOOK_ALERTS
    guards = [page_min_events(slo, a, s) for a in s.burn_rate_alerts]
    assert guards == [695, 1667, 0]  # ceil(1 / (14.4 * 1e-4)), ceil(1 / (6 * 1e-4)); tickets unguarded


def test_precedence_command_line_over_environment_over_config_file(tmp_path, monkeypatch):
    config = tmp_path / "kafka-audit.toml"
    config.write_text(
        "[slo]\nlow_traffic_min_events = 100\n"
        '[[slo.completeness]]\nname = "orders"\ntopic_pattern = "orders\\\\..*"\nobjective = 0.999\n'
        '[[slo.freshness]]\nname = "orders-fresh"\nthreshold_s = 30\n'
    )
    s = load_slo_settings(config)
    assert [x.name for x in s.slos()] == ["orders", "orders-fresh"]
    assert s.completeness[0].topic_pattern == r"orders\..*" and s.low_traffic_min_events == 100
    monkeypatch.setenv("KAFKA_AUDIT_SLO_LOW_TRAFFIC_MIN_EVENTS", "7")
    assert load_slo_settings(config).low_traffic_min_events == 7
    assert load_slo_settings(config, low_traffic_min_events=9).low_traffic_min_events == 9
    yaml_config = tmp_path / "kafka-audit.yaml"
    yaml_config.write_text("slo:\n  completeness:\n    - {objective: 0.99, tier_pattern: 'consumer:.*'}\n")
    [slo] = load_slo_settings(yaml_config).slos()
    assert (slo.name, slo.objective, slo.tier_pattern) == ("completeness-0", 0.99, "consumer:.*")


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"completeness": [{"objective": 1.0}]}, "completeness (KAFKA_AUDIT_SLO_COMPLETENESS): 0.objective"),
        ({"completeness": [{"period": "30 days"}]}, "an integer > 0 followed by one unit of s, m, h"),
        ({"completeness": [{"topic_pattern": "(?!tmp).*"}]}, "look-around and back-references are not"),
        ({"completeness": [{"topic_pattern": "orders("}]}, "0.topic_pattern: 'orders(' is not a regular"),
        (
            {
                "burn_rate_alerts": [
                    {"long_window": "1h", "short_window": "5m", "factor": 2, "urgency": "sms"}
                ]
            },
            "(KAFKA_AUDIT_SLO_BURN_RATE_ALERTS): 0.urgency: Input should be 'page' or 'ticket'",
        ),
        (
            {"burn_rate_alerts": [{"long_window": "5m", "short_window": "1h", "factor": 2}]},
            "short_window 1h must be shorter than long_window 5m",
        ),
        ({"completeness": [{"name": "a"}, {"name": "a"}]}, "SLO names must be unique; repeated: a"),
    ],
)
def test_an_invalid_slo_names_the_key_and_the_allowed_values(values, named):
    with pytest.raises(ConfigError, match="invalid SLO settings") as info:
        load_slo_settings(**values)
    assert named in str(info.value)


def test_an_invalid_slo_from_the_environment_names_its_variable(monkeypatch):
    monkeypatch.setenv("KAFKA_AUDIT_SLO_COMPLETENESS", '[{"objective": 99.99}]')
    with pytest.raises(
        ConfigError, match=r"KAFKA_AUDIT_SLO_COMPLETENESS\): 0.objective: Input should be less"
    ):
        load_slo_settings()


# ------------------------------------------------------------------------------------------ promtool
def test_cli_writes_rules_that_promtool_checks(tmp_path):
    config = tmp_path / "kafka-audit.yaml"
    config.write_text(
        "slo:\n  completeness:\n    - {name: orders, topic_pattern: 'orders\\..*', objective: 0.999}\n"
        "    - {name: all}\n  freshness:\n    - {name: fresh, threshold_s: 30}\n"
    )
    out = tmp_path / "rules" / "slo.yml"
    result = CliRunner().invoke(app, ["slo", "rules", "--config", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "42 recording rules, 9 alerts" in result.output
    done = _promtool("check", "rules", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 51 rules found" in done.stdout
    text = out.read_text()
    assert "# fresh: freshness 99% within 30 s over 30d, topics ~ .*, tiers ~ cluster:.*" in text
    assert 'kafka_audit_messages_lost_total{topic=~"orders\\\\..*", tier=~"cluster:.*"}[1h]' in text


def test_cli_rejects_an_invalid_config(tmp_path):
    config = tmp_path / "kafka-audit.toml"
    config.write_text("[slo]\n[[slo.completeness]]\nobjective = 2\n")
    out = tmp_path / "x.yml"
    result = CliRunner().invoke(app, ["slo", "rules", "--config", str(config), "--out", str(out)])
    assert result.exit_code == 2
    assert "completeness (KAFKA_AUDIT_SLO_COMPLETENESS): 0.objective" in result.output
    assert not out.exists()


def test_default_rules_text_passes_promtool_check(tmp_path):
    path = tmp_path / "slo.yml"
    path.write_text(rules_text(SloSettings()))
    done = _promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_of_the_four_burn_rate_cases(tmp_path):
    path = _write_unit_tests(tmp_path, SloSettings())
    done = _promtool("test", "rules", path.name, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_without_the_low_traffic_guard_the_trickle_topic_would_page(tmp_path):
    """The guard is what keeps the 10-messages-an-hour topic quiet (so the test above means something)."""
    path = _write_unit_tests(tmp_path, SloSettings(low_traffic_min_events=0))
    done = _promtool("test", "rules", path.name, cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "FAILED" in out
    assert "10 messages an hour" in out and 'alertname="KafkaAuditCompletenessBudgetBurn"' in out
    for other in ("fast burn", "slow leak", "one bad window"):
        assert other not in out.split("FAILED")[-1], out


def test_up_reads_the_same_slo_section_of_its_config_file(tmp_path):
    from kafka_audit.up_settings import load_up_settings

    config = tmp_path / "up.toml"
    config.write_text('[slo]\n[[slo.completeness]]\nname = "orders"\nobjective = 0.999\n')
    assert [(s.name, s.objective) for s in load_up_settings(config).slo.slos()] == [("orders", 0.999)]
    assert load_up_settings(None).slo.slos()[0].objective == 0.9999  # monitor mode: SLOs by default
    config.write_text("[slo]\n[[slo.completeness]]\nobjective = 3\n")
    with pytest.raises(ConfigError, match=r"slo.completeness.0.objective: Input should be less than 1"):
        load_up_settings(config)


def test_the_exporter_starts_a_topics_completeness_counters_at_0_while_its_first_window_is_provisional():
    """increase() takes a series' first sample as its baseline: a first sample already at the first final
    window's counts would hide that window's loss from the burn-rate rules (and after every job restart)."""
    metrics = ResultMetrics()
    row = {
        "topic": "orders", "tier": TIER, "window_start_ms": 0, "window_end_ms": PER_MIN, "sent": 1000,
        "unique": 990, "duplicated": 0, "received": 990, "unaudited": 0, "completeness": 0.99,
        "loss_rate": 0.01, "duplicate_rate": 0.0,
    }  # fmt: skip
    labels = {"topic": "orders", "tier": TIER}
    value = metrics.registry.get_sample_value

    def sent_and_lost() -> tuple[float | None, ...]:
        return tuple(value(f"kafka_audit_messages_{c}_total", labels) for c in ("sent", "lost"))

    assert sent_and_lost() == (None, None)  # nothing seen of the topic yet
    metrics.observe([{**row, "state": "provisional"}], [], [])
    assert sent_and_lost() == (0.0, 0.0)
    metrics.observe([{**row, "state": "final"}], [], [])
    assert sent_and_lost() == (1000.0, 10.0)
