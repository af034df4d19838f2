import pytest
from typer.testing import CliRunner

from kafka_audit.cli import app

COMMANDS = [
    [],
    ["kafka"],
    ["kafka", "start"],
    ["kafka", "status"],
    ["kafka", "stop"],
    ["produce"],
    ["audit-consumer"],
    ["verify"],
    ["demo"],
]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "root")
def test_every_command_has_help(cmd):
    result = CliRunner().invoke(app, [*cmd, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_bad_passthrough_property_is_a_clear_error():
    result = CliRunner().invoke(app, ["produce", "--topic", "t", "-b", "127.0.0.1:1", "-X", "acks"])
    assert result.exit_code != 0
    assert "key=value" in result.output
