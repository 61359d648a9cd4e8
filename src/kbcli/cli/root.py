"""The ``kb`` application: its global options, ``--version`` and the console script's entry
point. Its group, :class:`.group.KBGroup`, loads a command's module when the command is named."""

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Annotated

import typer

from kbcli import __version__
from kbcli.cli.group import EXIT_INTERRUPTED, KBGroup
from kbcli.cli.render.messages import reader_gone, silence
from kbcli.cli.state import State
from kbcli.config.lookup import use_config_file
from kbcli.config.registry import EMBEDDER_NOTES, STORES  # names only: no backend is imported

app = typer.Typer(
    name="kb",
    cls=KBGroup,
    help="kb: a knowledge base on SQLite with keyword, semantic and hybrid search.",
    epilog=(
        "\b\nExample:\n  kb --db notes.db ingest ~/notes --embedder local\n"
        '  kb --db notes.db search "reset password"\n'
        "\b\nEmbedders (kb ingest --embedder NAME or $KB_EMBEDDER; an index keeps its own):\n"
        + "\n".join(f"  {name:<7} {note}" for name, note in EMBEDDER_NOTES.items())
    ),
    rich_markup_mode=None,
    add_completion=True,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 160},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kb {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    db: Annotated[
        Path | None,
        typer.Option(
            "--db",
            metavar="PATH",
            dir_okay=False,
            help="Knowledge database file [default: paths.knowledge_db in jianmu.yaml, or $KB_DB].",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="PATH",
            help="Configuration file [default: $KB_CONFIG, ./jianmu.yaml, ~/.config/kbcli/].",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "-q", "--quiet", help="No notes, warnings, progress or summaries; errors only."
        ),
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            metavar="NAME",
            help=f"Store backend: {', '.join(STORES)} [default: store.backend].",
        ),
    ] = None,
    json_first: Annotated[
        bool, typer.Option("--json", hidden=True, help="The command's --json, written before it.")
    ] = False,
) -> None:
    """kb: a knowledge base on SQLite with keyword, semantic and hybrid search."""
    use_config_file(config)  # defaults read deep in the library come from this file too
    ctx.obj = State(db=db, config=config, quiet=quiet, debug=debug, store=store)


# BLAS thread pools kb's own processes start with, unless the environment sets them: one kb
# command multiplies one query vector at a time (memory-bound), and OpenBLAS's default pool
# spins its threads up at numpy's import: about 100 ms of CPU per command on 2 cores for
# nothing (benchmarks/bench_startup.py; docs/benchmarks.md, "BLAS threads").
BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1"}


def limit_blas_threads(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set :data:`BLAS_THREADS` in ``environ`` where the user has not set them (before numpy
    is imported; the library alone never does this)."""
    for name, value in BLAS_THREADS.items():
        environ.setdefault(name, value)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``kb`` console script."""
    limit_blas_threads()
    try:
        app(args=argv, prog_name="kb")
    except KeyboardInterrupt:
        # Interrupted outside a command (while parsing or importing).
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError as exc:
        # click's usage error or "Aborted!" written to a stderr whose reader has gone (kb
        # search 2>&1 | true): the exit code that message was to come with, quietly
        for stream in (sys.stdout, sys.stderr):
            if reader_gone(stream):
                silence(stream)
        sys.exit(getattr(exc.__context__, "exit_code", 1))
