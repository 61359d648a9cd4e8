"""``kb stats``: what the index holds."""

from typing import Annotated

import typer

from .context import open_kb
from .group import KBCommand
from .options import example
from .root import app


@app.command(cls=KBCommand, epilog=example("kb stats", "kb --db team.db stats --json"))
def stats(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Show what the index holds: files, chunks, embedder, last ingest."""
    from .. import render

    kb = open_kb(ctx, create=False)
    try:
        figures = kb.store.stats()
    finally:
        kb.close()
    if json_out:
        render.print_json(figures)
    else:
        render.stats_table(figures)
