"""`kafka-audit control ...` and the --control option / [control] section (no broker needed)."""

from __future__ import annotations

from typer.testing import CliRunner

from kafka_audit.cli import app
from kafka_audit.up_settings import load_up_settings

runner = CliRunner()


def test_kill_switch_file_on_and_off(tmp_path):
    result = runner.invoke(app, ["control", "kill", "--checkpoint-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "control.kill").exists() and "kill switch ON" in result.output
    result = runner.invoke(app, ["control", "kill", "--off", "--checkpoint-dir", str(tmp_path)])
    assert result.exit_code == 0 and not (tmp_path / "control.kill").exists()


def test_set_needs_a_property():
    result = runner.invoke(app, ["control", "set", "--group", "g", "-b", "127.0.0.1:9"])
    assert result.exit_code == 2 and "nothing to set" in result.output


def test_spark_job_rejects_a_bad_mode():
    result = runner.invoke(app, ["spark-job", "--control", "auto", "-b", "127.0.0.1:9"])
    assert result.exit_code == 2
    text = " ".join(result.output.split())  # rich wraps long lines
    assert "mode (KAFKA_AUDIT_CONTROL_MODE): Input should be 'off', 'advise' or 'apply'" in text


def test_up_control_section_and_flag(tmp_path):
    config = tmp_path / "up.toml"
    config.write_text('[control]\nmode = "apply"\ndwell_ms = 5000\ngroups = {"audit.social" = "social"}\n')
    s = load_up_settings(config)
    assert (s.control.mode, s.control.dwell_ms, s.control.group_of("audit.social")) == (
        "apply",
        5000,
        "social",
    )
    s = load_up_settings(config, control={"mode": "advise"})
    assert (s.control.mode, s.control.dwell_ms) == ("advise", 5000)  # the flag wins, the section stays
    assert load_up_settings(None).control.mode == "advise"
