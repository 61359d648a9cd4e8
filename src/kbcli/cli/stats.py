"""``kb stats``: what the index holds."""

from typing import Annotated

import typer

from kbcli.cli import render
from kbcli.cli.context import catalog, open_kb
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import example
from kbcli.cli.state import global_options

app = command_app()


@app.command(cls=KBCommand, epilog=example("kb stats", "kb --db team.db stats --json"))
@global_options()
def stats(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Show what the index holds: files, chunks, embedder, last ingest."""

    kb = open_kb(ctx, create=False)
    try:
        figures = catalog(kb).stats()
    finally:
        kb.close()
    if json_out:
        render.print_json(figures)
    else:
        render.stats_table(figures)
