"""The ``kb`` group and its commands' class: commands loaded when named, ``--json`` before the
command, and the one place that turns errors into a message and an exit code."""

from __future__ import annotations

import sqlite3
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from kbcli.cli import render
from kbcli.cli.context import get_state
from kbcli.cli.params import plain
from kbcli.cli.render.messages import reader_gone, settle_stdout, silence
from kbcli.errors import KBError

if TYPE_CHECKING:
    # click as typer ships it: types only
    from typer._click import Command, Context, HelpFormatter, Parameter

EXIT_INTERRUPTED = 130
EXIT_READER_GONE = 0  # stdout's reader went away (kb ... | head): kb stops quietly

#: Each command and the module that defines it, in ``kb --help``'s order.
COMMANDS = {
    "ingest": "ingest", "add": "add", "search": "search", "ask": "ask", "delete": "delete",
    "get": "get", "list": "list_", "stats": "stats", "doctor": "doctor", "init": "init",
    "config": "config_", "trust": "trust", "eval": "eval_", "mcp": "mcp", "copy": "copy_",
    "watch": "watch",
}  # fmt: skip


def command_app() -> typer.Typer:
    """The application of one command module: its ``@app.command`` is the command."""
    return typer.Typer(add_completion=False, rich_markup_mode=None)


class KBGroup(TyperGroup):
    """kb's commands, each imported when it is named (click's lazy group: ``get_command`` and
    ``list_commands``), and the one place that turns errors into a message and an exit code."""

    def get_params(self, ctx: Context) -> list[Parameter]:
        return plain(super().get_params(ctx))

    def list_commands(self, ctx: Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            # __import__, not importlib: python -X importtime (the tests, the benchmark) sees it
            module = __import__(f"{__package__}.{COMMANDS[cmd_name]}", fromlist=["app"])
            self.commands[cmd_name] = typer.main.get_command(module.app)
        return self.commands.get(cmd_name)

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, Command | None, list[str]]:
        """The command named first in ``args``, with a ``--json`` given before it (``kb --json
        stats``); a misspelt name gets typer's suggestions from every command."""
        if args and args[0] not in COMMANDS:
            for known in COMMANDS:  # typer suggests from the commands it has
                self.get_command(ctx, known)
        name, command, rest = super().resolve_command(ctx, args)
        if ctx.params.get("json_first"):
            rest = ["--json", *rest]
        return name, command, rest

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        try:  # kb --version and kb --help print here
            return super().parse_args(ctx, args)
        except BrokenPipeError as exc:
            _reader_gone(exc)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        """Each command with its whole one-line description (Click cuts them at 45 chars)."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            text = command.short_help or (command.help or "").strip().split("\n\n")[0]
            rows.append((name, " ".join(text.split())))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: Context) -> Any:
        try:
            return self._invoke(ctx)
        finally:
            settle_stdout()  # what is still buffered, now: not at the interpreter's exit

    def _invoke(self, ctx: Context) -> Any:
        # get_state(ctx).debug is read when the error comes: kb search x --debug sets it late
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            _reader_gone(exc, debug=get_state(ctx).debug)
        except KBError as exc:
            if get_state(ctx).debug:
                raise
            render.error(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            if get_state(ctx).debug:
                raise
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as exc:
            message = _environment_error(exc)
            if message is None or get_state(ctx).debug:
                raise
            render.error(message)
            raise typer.Exit(1) from None


def _reader_gone(exc: BrokenPipeError, debug: bool = False) -> NoReturn:
    """Stop quietly with :data:`EXIT_READER_GONE` when the reader of stdout has gone (``kb
    search x | head -1``), as ``rg`` does; any other broken pipe is an error of the machine."""
    if not reader_gone():
        if debug:
            raise exc
        render.error(_environment_error(exc) or str(exc))
        raise typer.Exit(1) from None
    silence(sys.stdout)
    if reader_gone(sys.stderr):  # 2>&1 into the same pipe
        silence(sys.stderr)
    raise typer.Exit(EXIT_READER_GONE) from None


def _environment_error(exc: BaseException) -> str | None:
    """One line for errors of the machine rather than of kb (disk full, I/O, permissions),
    or None for anything else (a bug keeps its traceback)."""
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        return f"{exc.strerror or exc}{where} (run again with --debug for details)"
    if isinstance(exc, sqlite3.OperationalError):
        return f"database error: {' '.join(str(exc).split())} (run again with --debug for details)"
    return None


class KBCommand(TyperCommand):
    """A command whose parameters are kb's (:func:`.params.plain`)."""

    def get_params(self, ctx: Context) -> list[Parameter]:
        return plain(super().get_params(ctx))
