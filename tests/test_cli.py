"""Every command explains itself: --help works and carries an example."""
import pytest
from typer.testing import CliRunner

from headcut.cli.main import app

COMMANDS = sorted(c.name or c.callback.__name__ for c in app.registered_commands)


def test_all_commands_are_registered():
    assert {"evaluate", "finetune", "prune", "distill", "export", "grade", "serve", "bench"} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_an_example(command):
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Example" in result.output or "example" in result.output


def test_unknown_flag_exits_2():
    result = CliRunner().invoke(app, ["evaluate", "--no-such-flag"])
    assert result.exit_code == 2
