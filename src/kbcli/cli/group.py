"""The ``kb`` group and its commands' class: global options in any position, and the one place
that turns errors into a message and an exit code."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import typer
from typer.core import TyperCommand, TyperGroup

from kbcli.cli.coercion import PlainCoercion, plain_arguments

EXIT_INTERRUPTED = 130
EXIT_READER_GONE = 0  # stdout's reader went away (kb ... | head): kb stops quietly

# Global options accepted after the command too: flags, and options taking a value.
GLOBAL_FLAGS = ("-q", "--quiet", "--debug")
GLOBAL_VALUES = ("--db", "--config", "--store")
# Commands with an option of the same name that means something else there.
OWN_OPTIONS = {"eval": ("--db",)}


def hoist_global_options(args: list[str], commands: Any) -> list[str]:
    """Move global options written after the command to before it (``kb search x -q`` is
    ``kb -q search x``), and a ``--json`` written before the command to after it. Nothing
    after ``--`` moves; a command's own option of the same name (``kb eval --db``) stays."""
    index, i = None, 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg in GLOBAL_VALUES:
            i += 2
            continue
        if not arg.startswith("-") and arg in commands:
            index = i
            break
        i += 1
    if index is None:
        return args
    before, name, after = list(args[:index]), args[index], list(args[index + 1 :])
    moved_json = [a for a in before if a == "--json"]
    before = [a for a in before if a != "--json"]
    own = OWN_OPTIONS.get(name, ())
    hoisted: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(after):
        arg = after[i]
        if arg == "--":
            rest.extend(after[i:])
            break
        option = arg.split("=", 1)[0]
        if arg in GLOBAL_FLAGS and arg not in own:
            hoisted.append(arg)
        elif option in GLOBAL_VALUES and option not in own:
            if "=" in arg:
                hoisted.append(arg)
            else:
                hoisted.extend(after[i : i + 2])
                i += 1
        else:
            rest.append(arg)
        i += 1
    return before + hoisted + [name] + moved_json + rest


class KBGroup(TyperGroup):
    """The one place that turns library errors into a message and an exit code."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        PlainCoercion.install(self.get_params(ctx))
        try:  # kb --version and kb --help print here
            return super().parse_args(ctx, hoist_global_options(list(args), self.commands))
        except BrokenPipeError as exc:
            _reader_gone(exc)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
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

    def invoke(self, ctx: Any) -> Any:
        from kbcli.cli.render.messages import settle_stdout

        try:
            return self._invoke(ctx)
        finally:
            settle_stdout()  # what is still buffered, now: not at the interpreter's exit

    def _invoke(self, ctx: Any) -> Any:
        from kbcli.errors import KBError

        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            _reader_gone(exc, debug=bool(ctx.params.get("debug")))
        except KBError as exc:
            if ctx.params.get("debug"):
                raise
            from kbcli.cli import render

            render.error(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            if ctx.params.get("debug"):
                raise
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as exc:
            message = _environment_error(exc)
            if message is None or ctx.params.get("debug"):
                raise
            from kbcli.cli import render

            render.error(message)
            raise typer.Exit(1) from None


def _reader_gone(exc: BrokenPipeError, debug: bool = False) -> NoReturn:
    """Stop quietly with :data:`EXIT_READER_GONE` when the reader of stdout has gone (``kb
    search x | head -1``), as ``rg`` does; any other broken pipe is an error of the machine."""
    from kbcli.cli import render
    from kbcli.cli.render.messages import reader_gone, silence

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
    import sqlite3

    if isinstance(exc, OSError):
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        return f"{exc.strerror or exc}{where} (run again with --debug for details)"
    if isinstance(exc, sqlite3.OperationalError):
        return f"database error: {' '.join(str(exc).split())} (run again with --debug for details)"
    return None


class KBCommand(TyperCommand):
    """A command whose options are converted without Pydantic (see :class:`PlainCoercion`)
    and whose arguments show their metavars."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        params = self.get_params(ctx)
        PlainCoercion.install(params)
        plain_arguments(params)
        return super().parse_args(ctx, args)
