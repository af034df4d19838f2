"""Control-loop settings: defaults, environment, groups, and clear errors naming key and allowed values."""

from __future__ import annotations

import pytest

from control_loop.settings import ControlSettings, load_control_settings
from kafka_plumbing.errors import ConfigError


def test_defaults_advise_and_topic_is_its_own_group():
    s = ControlSettings()
    assert s.mode == "advise" and s.control_topic == "__kafka_audit_control"
    assert s.allowed_acks == ["0", "1", "all"] and s.rollback_windows == 3
    assert s.group_of("orders") == "orders"
    assert ControlSettings(groups={"orders": "shop"}).group_of("orders") == "shop"


def test_environment_and_acks_spelling(monkeypatch):
    monkeypatch.setenv("KAFKA_AUDIT_CONTROL_MODE", "apply")
    monkeypatch.setenv("KAFKA_AUDIT_CONTROL_ALLOWED_ACKS", '["-1", "1", "all"]')
    monkeypatch.setenv("KAFKA_AUDIT_CONTROL_ALLOWED_BATCH_NUM_MESSAGES", "[1, 100]")
    s = load_control_settings(dwell_ms=5)
    assert (s.mode, s.allowed_acks, s.allowed_batch_num_messages, s.dwell_ms) == (
        "apply",
        ["all", "1"],
        (1, 100),
        5,
    )
    assert load_control_settings(mode=None).mode == "apply"  # None: not given on the command line


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"mode": "auto"}, "mode (KAFKA_AUDIT_CONTROL_MODE): Input should be 'off', 'advise' or 'apply'"),
        ({"allowed_acks": ["2"]}, "'2' is not an acks value; allowed values are 0, 1, all, -1"),
        ({"allowed_acks": []}, "allowed_acks (KAFKA_AUDIT_CONTROL_ALLOWED_ACKS)"),
        (
            {"allowed_batch_num_messages": (10, 1)},
            "allowed_batch_num_messages=(10, 1): allowed values are (min, max) with 1 <= min <= max <= 1e+06",
        ),
        ({"allowed_linger_ms": (0, 1e9)}, "allowed_linger_ms=(0, 1e+09)"),
        (
            {"gamma_margin": 2},
            "gamma_margin (KAFKA_AUDIT_CONTROL_GAMMA_MARGIN): Input should be less than or",
        ),
        ({"rollback_windows": 0}, "rollback_windows (KAFKA_AUDIT_CONTROL_ROLLBACK_WINDOWS)"),
        ({"groups": {"orders": ""}}, "groups: empty topic or group name for ['orders']"),
    ],
)
def test_bad_values_name_key_and_allowed_values(values, message):
    with pytest.raises(ConfigError, match="invalid control settings") as err:
        load_control_settings(**values)
    assert message in str(err.value)
