"""Every command has help with an example; --version."""

from __future__ import annotations

import pytest
import typer

from cli_helpers import run
from kbcli import __version__
from kbcli.cli import app, group

GROUP = typer.main.get_command(app)
COMMANDS = sorted(GROUP.list_commands(typer.Context(GROUP)))


def test_the_expected_commands_are_registered():
    assert COMMANDS == [
        "add", "ask", "config", "copy", "delete", "doctor", "eval", "get", "ingest", "init", "list",
        "mcp", "search", "stats", "trust", "ui", "watch",
    ]  # fmt: skip


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help_with_an_example(name):
    command = GROUP.get_command(typer.Context(GROUP), name)
    assert command is not None
    assert (command.help or "").strip(), f"{name} has no help text"
    result = run(name, "--help")
    assert result.exit_code == 0
    assert "Example:" in result.stdout
    assert f"kb {name}" in result.stdout.split("Example:", 1)[1]


@pytest.mark.parametrize("name", COMMANDS)
def test_kb_help_lists_the_first_paragraph_of_each_commands_help(name):
    """``kb --help`` takes each command's line from :data:`kbcli.cli.group.COMMANDS`, without
    importing the command: the line is the first paragraph of the command's own help."""
    command = GROUP.get_command(typer.Context(GROUP), name)
    assert command is not None and command.help is not None
    first = " ".join(command.help.strip().split("\n\n")[0].split())
    assert group.COMMANDS[name][1] == first


def test_top_level_help_lists_commands_and_an_example():
    result = run("--help")
    assert result.exit_code == 0
    for name in COMMANDS:
        assert name in result.stdout
    assert "Example:" in result.stdout
    for option in ("--db", "--config", "--version", "--quiet", "--debug"):
        assert option in result.stdout


def test_no_arguments_shows_help():
    result = run()
    assert "Commands:" in result.stdout + result.stderr


def test_version():
    result = run("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"kb {__version__}"
