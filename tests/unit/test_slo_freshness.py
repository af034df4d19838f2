"""Freshness SLOs: the threshold must be a histogram bound, the rules pass promtool, its unit tests fire.

The promtool unit tests feed synthetic ``kafka_audit_freshness_messages_total{le}`` series (one sample a
minute, like the job's counters that step once per final window; ``le="+Inf"``: every message held,
``le="30"``: those held within 30 s of their CreateTime) to the rules ``kafka-audit slo rules`` writes for
one freshness SLO (99% within 30 s over 30 days, the Workbook's window pairs) and check which alerts
fire. With a 1% budget the 14.4x page needs 14.4% of an hour's messages late: every message late pages
after 9 minutes (8.64 min of late messages), not 5 as a 99.99% completeness SLO can.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from alerts.slo_rules import FRESHNESS_ALERT_NAME, page_min_events, rules_document, rules_text
from alerts.slo_settings import WORKBOOK_ALERTS, FreshnessSlo, SloSettings, load_slo_settings
from audit_record import freshness
from kafka_plumbing.errors import ConfigError

PROMTOOL = "/usr/bin/promtool"
TIER = "cluster:eu"
SETTINGS = SloSettings(completeness=[], freshness=[FreshnessSlo(name="fresh30", threshold_s=30)])
FAST_1H = ("1h", "5m", "14.4")
SLOW_6H = ("6h", "30m", "6")
TICKET = ("3d", "6h", "1")


def _promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    assert shutil.which(PROMTOOL), (
        "promtool (Debian package prometheus) is a required dev tool: make bootstrap"
    )
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def _series(topic: str, held: str, within_30s: str) -> list[dict]:
    labels = f'topic="{topic}",tier="{TIER}",instance="job:9464",job="kafka-audit"'
    name = "kafka_audit_freshness_messages_total"
    return [
        {"series": f'{name}{{{labels},le="+Inf"}}', "values": held},
        {"series": f'{name}{{{labels},le="30"}}', "values": within_30s},
        # a bound above S: not what the SLO counts (a message held within 60 s may still be late)
        {"series": f'{name}{{{labels},le="60"}}', "values": held},
    ]


def _alert(topic: str, long_window: str, short_window: str, burn: str) -> dict:
    page = burn != "1"
    return {
        "exp_labels": {
            "topic": topic,
            "tier": TIER,
            "slo": "fresh30",
            "severity": "critical" if page else "warning",
            "urgency": "page" if page else "ticket",
            "long_window": long_window,
            "short_window": short_window,
            "burn_rate": burn,
        }
    }


def _check(at: str, *alerts: dict) -> dict:
    return {"eval_time": at, "alertname": FRESHNESS_ALERT_NAME, "exp_alerts": list(alerts)}


def _tests() -> list[dict]:
    return [
        {
            "name": "every message 30+ s late from minute 121 to 160: pages (1h/5m) within 10 min, resolves",
            "interval": "1m",
            "input_series": _series("delayed", "0+1000x300", "0+1000x120 120000x39 120000+1000x100"),
            "alert_rule_test": [
                _check("120m"),
                _check("125m", _alert("delayed", *TICKET)),  # 5 late minutes: 8.3% of the hour, < 14.4%
                _check(
                    "130m",
                    _alert("delayed", *FAST_1H),
                    _alert("delayed", *SLOW_6H),
                    _alert("delayed", *TICKET),
                ),
                _check(
                    "150m",
                    _alert("delayed", *FAST_1H),
                    _alert("delayed", *SLOW_6H),
                    _alert("delayed", *TICKET),
                ),
                _check("170m", _alert("delayed", *SLOW_6H), _alert("delayed", *TICKET)),
            ],
        },
        {
            "name": "one window of late messages on a healthy topic: no alert",
            "interval": "1m",
            "input_series": _series("blip", "0+1000x500", "0+1000x399 399000+1000x100"),
            "alert_rule_test": [_check(at) for at in ("401m", "402m", "405m", "430m", "480m")],
        },
        {
            "name": "3 messages an hour, one late: the low-traffic guard pages nobody, a ticket opens",
            "interval": "1m",
            # one message every 20 minutes; the one of minute 300 is held more than 30 s late
            "input_series": _series(
                "trickle",
                " ".join(f"{n}x19" for n in range(25)),
                " ".join(f"{n - (n >= 15)}x19" for n in range(25)),
            ),
            "alert_rule_test": [_check(at, _alert("trickle", *TICKET)) for at in ("302m", "320m")],
        },
    ]


def test_the_threshold_must_be_a_bucket_bound_and_says_which_are():
    assert FreshnessSlo(threshold_s=30).threshold_ms == 30_000
    assert FreshnessSlo(threshold_s=0.25).threshold_ms == 250
    with pytest.raises(ConfigError) as info:
        load_slo_settings(freshness=[{"threshold_s": 20}])
    message = str(info.value)
    assert "freshness (KAFKA_AUDIT_SLO_FRESHNESS): 0.threshold_s" in message
    assert (
        "20 s is not a freshness bucket bound: allowed 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60" in message
    )


def test_the_rules_select_the_threshold_bound_and_every_message():
    text = rules_text(SETTINGS)
    assert "# fresh30: freshness 99% within 30 s over 30d, topics ~ .*, tiers ~ cluster:.*" in text
    assert 'kafka_audit_freshness_messages_total{topic=~".*", tier=~"cluster:.*", le="30"}[1h]' in text
    assert 'kafka_audit_freshness_messages_total{topic=~".*", tier=~"cluster:.*", le="+Inf"}[5m]' in text
    assert "not yet measured" not in text
    [page] = [r for g in rules_document(SETTINGS)["groups"] for r in g["rules"] if r.get("alert")][:1]
    assert page["alert"] == FRESHNESS_ALERT_NAME
    assert "got there more than 30 s after their CreateTime" in page["annotations"]["description"]
    assert page_min_events(SETTINGS.freshness[0], WORKBOOK_ALERTS[0], SETTINGS) == 7  # ceil(1 / 0.144)


def test_freshness_rules_pass_promtool_check(tmp_path):
    path = tmp_path / "slo.yml"
    path.write_text(rules_text(SETTINGS.model_copy(update={"completeness": SloSettings().completeness})))
    done = _promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def _promtool_test(tmp_path: Path, settings: SloSettings) -> subprocess.CompletedProcess:
    doc = rules_document(settings)
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "slo-rules.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    test = {"rule_files": ["slo-rules.yml"], "evaluation_interval": "1m", "tests": _tests()}
    (tmp_path / "slo-rules.test.yml").write_text(yaml.safe_dump(test, sort_keys=False, width=1_000))
    return _promtool("test", "rules", "slo-rules.test.yml", cwd=tmp_path)


def test_promtool_unit_tests_of_freshness_burn_rates(tmp_path):
    done = _promtool_test(tmp_path, SETTINGS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_without_the_low_traffic_guard_the_trickle_topic_would_page(tmp_path):
    """The guard is what keeps the 3-messages-an-hour topic quiet (so the case above means something)."""
    done = _promtool_test(tmp_path, SETTINGS.model_copy(update={"low_traffic_min_events": 0}))
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "3 messages an hour" in out and 'urgency="page"' in out
    for other in ("every message 30+ s late", "one window of late messages"):
        assert other not in out, out


def test_le_labels_are_the_bounds_in_seconds():
    assert freshness.LE_LABELS[7:10] == ("15", "30", "60")
    assert freshness.LE_LABELS[0] == "0.1" and freshness.LE_LABELS[-1] == "+Inf"


def test_status_of_a_freshness_slo_equals_the_sums_of_the_histograms(tmp_path):
    """Written by the job's Parquet sink, read back by ``slo status``: counts add up, S's bucket decides."""
    from alerts.slo_status import read_parquet_results, slo_status
    from spark_streaming.sinks import ParquetResultSink
    from tests.unit.test_slo_status import result

    now_ms = 1_790_000_000_000
    late = 15  # of every window's counts in the 60 s bucket (30 < x <= 60 s): late for S = 30 s
    hist = freshness.empty()
    hist[freshness.BOUNDS_MS.index(1_000)] = 985
    hist[freshness.BOUNDS_MS.index(60_000)] = late
    rows = [result("t", now_ms - i * 60_000, 1_000, 1_000, freshness_counts=list(hist)) for i in range(120)]
    rows.append(result("old", now_ms, 1_000, 1_000))  # written before freshness: not measured
    ParquetResultSink(tmp_path).write(1, rows)
    back = read_parquet_results(tmp_path, now_ms - 86_400_000)
    by = {(s.slo, s.topic): s for s in slo_status(back, SETTINGS, now_ms)}
    t = by["fresh30", "t"]
    assert t.kind == "freshness"
    assert (t.period_counts.events, t.period_counts.bad) == (120 * 1_000, 120 * late)
    assert t.actual == pytest.approx(1 - late / 1_000)
    assert t.burn_rates["1h"] == pytest.approx((late / 1_000) / 0.01)  # 1.5x: below every page
    assert t.state == "ticket" and t.firing == ("3d/6h 1x",)
    assert by["fresh30", "old"].state == "no data"
    strict = SloSettings(completeness=[], freshness=[FreshnessSlo(name="f60", threshold_s=60)])
    [f60] = [s for s in slo_status(back, strict, now_ms) if s.topic == "t"]
    assert f60.period_counts.bad == 0 and f60.state == "ok"
