"""``kb get``: a file's indexed text with line numbers, or one chunk by id."""

from typing import Annotated

import typer

from kbcli.agent.get import read_target
from kbcli.cli import render
from kbcli.cli.context import open_kb
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import example
from kbcli.cli.state import global_options

app = command_app()


@app.command(
    cls=KBCommand,
    epilog=example(
        "kb get docs/guide.md",
        "kb get docs/guide.md:40:10",
        "kb get docs/manual.pdf#page=1",
        "kb get guide.md",
        "kb get 3f2a9c0d1e8b4a7f9c6d5e4b3a2f1e0d",
    ),
)
@global_options()
def get(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            metavar="PATH[:LINE[:COUNT]]|PATH#page=N|ID",
            help="An indexed file, or the end of its path that only it has (lsof.md), "
            "optionally from LINE, COUNT lines, or its page N (as kb search shows a PDF's "
            "hits); or a chunk id.",
        ),
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show a file's indexed text with line numbers, or one chunk by id."""

    kb = open_kb(ctx, create=False)
    try:
        shown = read_target(kb, target)
    finally:
        kb.close()
    if json_out:
        render.print_json(shown.to_dict())
        return
    for note in shown.notes:
        render.message(note)
    render.numbered(shown)
