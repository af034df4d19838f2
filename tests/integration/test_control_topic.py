"""The control topic on a real broker: apply writes, advise does not, forced records, status, malformed."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource
from typer.testing import CliRunner

from control_loop.loop import ControlLoop
from control_loop.settings import KILL_ENV, ControlSettings
from control_loop.topic import read_control_topic
from kafka_audit.cli import app
from tests.conftest import unique_name
from tests.unit.control_rows import now_after, row

pytestmark = pytest.mark.integration


def test_apply_writes_advise_does_not_and_forced_records_are_followed(
    kconfig, bootstrap, request, tmp_path, monkeypatch
):
    monkeypatch.delenv(KILL_ENV, raising=False)
    control = unique_name(request, ".control")
    untouched = unique_name(request, ".advise")
    # advise: a decision, and the control topic is not even created
    advise = ControlLoop(
        ControlSettings(mode="advise", control_topic=untouched, dwell_ms=0), kconfig, tmp_path / "a"
    )
    assert [d.kind for d in advise.process([row(0)], now_after(0))] == ["advice"]
    assert untouched not in AdminClient(kconfig).list_topics(timeout=10).topics

    # apply: one record per change, on a compacted topic
    settings = ControlSettings(mode="apply", control_topic=control, dwell_ms=0, evaluation_timeout_ms=1)
    loop = ControlLoop(settings, kconfig, tmp_path / "b")
    try:
        (d,) = loop.process([row(0)], now_after(0))
        assert (d.kind, d.version) == ("change", 1) and loop.unsent == []
        latest, malformed = read_control_topic(kconfig, control)
        assert latest["orders"].version == 1 and latest["orders"].batch_num_messages == 4 and malformed == []
        resource = ConfigResource("topic", control)
        admin = AdminClient(kconfig)  # kept referenced until the future is done
        configs = admin.describe_configs([resource])[resource].result()
        assert configs["cleanup.policy"].value == "compact"

        # an operator forces a configuration: version 2
        runner = CliRunner()
        result = runner.invoke(
            app,
            [
                "control",
                "set",
                "-b",
                bootstrap,
                "--control-topic",
                control,
                "--group",
                "orders",
                "--batch-num-messages",
                "8",
                "--json",
            ],
        )
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["version"] == 2 and json.loads(result.output)["reason"] == "forced"

        # a malformed record changes nothing and is reported
        raw = Producer(kconfig)
        raw.produce(control, b"not avro", b"orders")
        assert raw.flush(10) == 0
        status = runner.invoke(
            app, ["control", "status", "-b", bootstrap, "--control-topic", control, "--json"]
        )
        assert status.exit_code == 1, status.output
        lines = [json.loads(x) for x in status.output.splitlines()]
        assert (
            lines[0]["group"] == "orders" and lines[0]["version"] == 2 and lines[0]["batch_num_messages"] == 8
        )
        assert lines[1]["malformed"]["reason"] == "bad_magic" and lines[1]["malformed"]["key"] == "orders"

        # the controller's next change follows the forced version (its evaluation timed out: not applied)
        kinds = [(d.kind, d.reason, d.version) for d in loop.process([row(3)], now_after(3))]
        assert kinds == [("held", "not_applied", 2), ("change", "suggestion", 3)]
        assert read_control_topic(kconfig, control)[0]["orders"].version == 3
    finally:
        loop.close()
