"""``kb stats``: what the index holds."""

from typing import Annotated

import typer

from kbcli.cli.context import open_kb
from kbcli.cli.group import KBCommand
from kbcli.cli.options import example
from kbcli.cli.root import app


@app.command(cls=KBCommand, epilog=example("kb stats", "kb --db team.db stats --json"))
def stats(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Show what the index holds: files, chunks, embedder, last ingest."""
    from kbcli.cli import render

    kb = open_kb(ctx, create=False)
    try:
        figures = kb.store.stats()
    finally:
        kb.close()
    if json_out:
        render.print_json(figures)
    else:
        render.stats_table(figures)
