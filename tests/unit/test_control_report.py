"""The closed-loop comparison table (testbed.control_report) from run result files."""

import json

import pytest
from testbed.control_report import compare

from kafka_plumbing.errors import ConfigError


def _run(path, offered, lost, decisions=(), applied=0):
    path.mkdir(parents=True)
    events = [{"kind": "applied"}] * applied
    (path / "stages.json").write_text(
        json.dumps(
            {
                "totals": {"offered": offered, "loss_rate": lost / offered, "duplicate_rate": 0.0},
                "stages": [{"config_events": events}],
                "decisions": list(decisions),
            }
        )
    )
    (path / "windows.csv").write_text("window_start_ms,exact\n1,True\n2,False\n")


def test_pairs_runs_per_stream_and_counts_changes(tmp_path):
    change = {"kind": "change", "changes": {"batch.num.messages": 8}}
    _run(tmp_path / "weblog-off", 1000, 400)
    _run(tmp_path / "weblog-apply", 1000, 100, [change, {"kind": "held"}], applied=3)
    _run(tmp_path / "game-off", 500, 0)  # no apply run: left out
    (row,) = compare(tmp_path)
    assert row.stream == "weblog"
    assert (row.loss_off, row.loss_apply, row.loss_ratio) == (0.4, 0.1, 0.25)
    assert (row.changes, row.applied, row.configs) == (1, 3, ["batch.num.messages=8"])
    assert (row.exact_windows_apply, row.windows_apply) == (1, 2)
    assert (row.paper_off, row.paper_dynamic) == (0.429, 0.065)


def test_no_pair_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no <stream>-off and <stream>-apply"):
        compare(tmp_path)
