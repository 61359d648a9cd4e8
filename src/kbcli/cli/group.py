"""The ``kb`` group and its commands' class: commands loaded when named, ``--json`` before the
command, and the one place that turns errors into a message and an exit code.

Both subclass typer's public ``TyperGroup`` and ``TyperCommand`` and override click's documented
methods. Typer ships click privately and exports its ``Context`` only as the subclass
``typer.Context``: both classes make their contexts ``typer.Context`` (click's documented
``context_class``), so the overrides take one, narrower than the private base (hence their
``type: ignore[override]``), and name click's other classes by what they use."""

from __future__ import annotations

import sqlite3
import sys
from contextlib import AbstractContextManager
from typing import Any, NoReturn, Protocol

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from kbcli.cli.params import plain_params
from kbcli.cli.render.messages import error, reader_gone, settle_stdout, silence
from kbcli.cli.state import get_state
from kbcli.errors import KBError

#: A command of kb's group: one of typer's (each module's ``app`` makes a :class:`KBCommand`)
Command = TyperCommand | TyperGroup

EXIT_INTERRUPTED = 130
EXIT_READER_GONE = 0  # stdout's reader went away (kb ... | head): kb stops quietly

#: Each command: the module that defines it, and its line in ``kb --help`` (the first paragraph
#: of its help, tests/cli/test_help.py checks), so that kb --help imports no command's module.
COMMANDS: dict[str, tuple[str, str]] = {
    "ingest": (
        "ingest",
        "Index files and folders (only new and changed files are read again; files deleted "
        "from PATH leave the index). Files are searchable by keyword as soon as they are "
        "written; their vectors follow in the same run (or the next one, if it was stopped).",
    ),
    "add": ("add", "Store one piece of text as a single chunk and print its id."),
    "search": ("search", "Search the knowledge base; hits show path:line ($EDITOR +LINE path)."),
    "ask": ("ask", "Answer a question from the knowledge base, citing its sources, or refuse."),
    "delete": (
        "delete",
        "Delete chunks by id, a file's chunks, or every file under a folder.",
    ),
    "get": (
        "get",
        "Show a file's indexed text with line numbers, or one chunk by id.",
    ),
    "list": ("list_", "List stored chunks, oldest first."),
    "stats": ("stats", "Show what the index holds: files, chunks, embedder, last ingest."),
    "status": (
        "status",
        "Show whether the index is behind its files: per ingested root, the files new, changed"
        " or gone since its last sync (a stat per file; a hash only where the size matches and "
        "the mtime does not), chunks without vectors, a kb watch running. Exit 0 when current,"
        " 6 when behind (kb ingest brings it up to date).",
    ),
    "doctor": ("doctor", "Check the keyword index and the vector caches against the catalog."),
    "init": ("init", "Write a commented jianmu.yaml listing every setting with its default."),
    "config": ("config_", "Show the effective configuration and where each value came from."),
    "trust": (
        "trust",
        "Let kb use the code, servers and models a folder's jianmu.yaml names (as it is now).",
    ),
    "eval": (
        "eval_",
        "Measure retrieval quality: on a BEIR collection (nDCG, recall, MRR), or with "
        "--queries on your own index with your own questions (nDCG, hit@1/@3, MRR with 95% "
        "intervals, the misses, a suggested --min-score; --compare, --report).",
    ),
    "mcp": ("mcp", "Serve the knowledge base to agents over MCP (stdio or HTTP)."),
    "ui": ("ui", "Serve a web page to search and read the knowledge base (read-only)."),
    "copy": (
        "copy_",
        "Copy the whole index (chunks, vectors, file records) into another, empty store "
        "without re-embedding, then check it: counts, and a sample of searches give the same "
        "results. With --replace the checked copy takes the place of the existing sqlite "
        "index at --to-db, in one transaction: processes reading it (kb mcp, kb watch) go on,"
        " now on the copy.",
    ),
    "watch": (
        "watch",
        "Index files and folders as kb ingest does, then follow their changes until stopped: "
        "new, edited, deleted and renamed files and folders are applied in batches, each once"
        " its events have been quiet for half a second (one line per batch on stderr). The "
        "database's writer lock is taken per batch, so kb ingest, kb mcp and kb search run "
        "alongside. Ctrl-C or SIGTERM finishes the batch in flight and exits 0. A watched "
        "folder gone, or replaced by a link (renamed away, a link in its place), stops the "
        "watch with one line and exit 2, the index as it was; with --follow-symlinks the "
        "folder the link leads to is indexed and followed instead. Another folder made in its"
        " place is indexed again.",
    ),
}


def command_app() -> typer.Typer:
    """The application of one command module: its ``@app.command`` is the command."""
    return typer.Typer(add_completion=False, rich_markup_mode=None)


class HelpSections(Protocol):
    """What :meth:`KBGroup.format_commands` uses of click's help formatter."""

    def section(self, name: str) -> AbstractContextManager[None]: ...

    def write_dl(self, rows: list[tuple[str, str]]) -> None: ...


class KBGroup(TyperGroup):
    """kb's commands, each imported when it is named (click's lazy group: ``get_command`` and
    ``list_commands``), and the one place that turns errors into a message and an exit code."""

    context_class = typer.Context
    get_params = plain_params(TyperGroup.get_params)

    def list_commands(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        return list(COMMANDS)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Command | None:  # type: ignore[override]
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            # __import__, not importlib: python -X importtime (the tests, the benchmark) sees it
            module = __import__(f"{__package__}.{COMMANDS[cmd_name][0]}", fromlist=["app"])
            self.commands[cmd_name] = typer.main.get_command(module.app)
        command = self.commands.get(cmd_name)
        return command if isinstance(command, (TyperCommand, TyperGroup)) else None

    def resolve_command(  # type: ignore[override]
        self, ctx: typer.Context, args: list[str]
    ) -> tuple[str | None, Command | None, list[str]]:
        """The command named first in ``args``, with a ``--json`` given before it (``kb --json
        stats``); a misspelt name gets typer's suggestions from every command."""
        if args and args[0] not in COMMANDS:
            for known in COMMANDS:  # typer suggests from the commands it has
                self.get_command(ctx, known)
        name, command, rest = super().resolve_command(ctx, args)
        if ctx.params.get("json_first"):
            rest = ["--json", *rest]
        return name, command if isinstance(command, (TyperCommand, TyperGroup)) else None, rest

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]
        try:  # kb --version and kb --help print here
            return super().parse_args(ctx, args)
        except BrokenPipeError as exc:
            _reader_gone(exc)

    def format_commands(self, ctx: typer.Context, formatter: HelpSections) -> None:  # type: ignore[override]
        """Each command with its whole one-line description (Click cuts them at 45 chars),
        from :data:`COMMANDS`."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, line) for name, (_, line) in COMMANDS.items()])

    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]
        try:
            return self._invoke(ctx)
        finally:
            settle_stdout()  # what is still buffered, now: not at the interpreter's exit

    def _invoke(self, ctx: typer.Context) -> Any:
        # get_state(ctx).debug is read when the error comes: kb search x --debug sets it late
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            _reader_gone(exc, debug=get_state(ctx).debug)
        except KBError as exc:
            if get_state(ctx).debug:
                raise
            error(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            if get_state(ctx).debug:
                raise
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as exc:
            message = _environment_error(exc)
            if message is None or get_state(ctx).debug:
                raise
            error(message)
            raise typer.Exit(1) from None


def _reader_gone(exc: BrokenPipeError, debug: bool = False) -> NoReturn:
    """Stop quietly with :data:`EXIT_READER_GONE` when the reader of stdout has gone (``kb
    search x | head -1``), as ``rg`` does; any other broken pipe is an error of the machine."""
    if not reader_gone():
        if debug:
            raise exc
        error(_environment_error(exc) or str(exc))
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
    """A command whose parameters are kb's (:func:`.params.plain`) and whose contexts are
    ``typer.Context``."""

    context_class = typer.Context
    get_params = plain_params(TyperCommand.get_params)
