"""``kb add``: store one piece of text as a chunk."""

import sys
from typing import Annotated

import typer

from .context import open_kb
from .group import KBCommand
from .options import MetaOption, example
from .root import app


@app.command(
    cls=KBCommand,
    epilog=example(
        'kb add "The VPN gateway is vpn.example.com" --meta topic=network',
        "cat note.txt | kb add - --id note-1",
    ),
)
def add(
    ctx: typer.Context,
    text: Annotated[
        str, typer.Argument(metavar="TEXT", help="The text to store; '-' reads standard input.")
    ],
    meta: MetaOption = None,
    id: Annotated[
        str | None,
        typer.Option("--id", help="Store under this id (replacing it) [default: a random id]."),
    ] = None,
) -> None:
    """Store one piece of text as a single chunk and print its id."""
    from .. import render
    from ..errors import InvalidOptionError
    from ..filter_syntax import parse_meta

    metadata = parse_meta(meta)
    if text == "-":
        text = sys.stdin.read()
    if not text.strip():
        raise InvalidOptionError("Nothing to add: the text is empty")
    kb = open_kb(ctx, create=True)
    try:
        new_id = kb.add(text, metadata, id=id)
    finally:
        kb.close()
    render.result(new_id)
