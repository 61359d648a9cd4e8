"""``kb add``: store one piece of text as a chunk."""

import sys
from typing import Annotated

import typer

from kbcli.cli import render
from kbcli.cli.context import open_kb
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import MetaOption, example
from kbcli.cli.state import global_options
from kbcli.errors import InvalidOptionError
from kbcli.filters.syntax import parse_meta
from kbcli.protocols import FileLedger, supports
from kbcli.system.paths import normal_source, source_forms
from kbcli.types import NOTE_BY

app = command_app()


@app.command(
    cls=KBCommand,
    epilog=example(
        'kb add "The VPN gateway is vpn.example.com" --meta topic=network',
        "cat note.txt | kb add - --id note-1",
    ),
)
@global_options()
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
    """Store one piece of text as a single chunk and print its id.

    The text is yours: --meta may set any key (source, line, page too), except note_by (it
    marks an agent's note) and a source that is an indexed file's (the text would join that
    file's chunks and outlive its next ingest). A source is kept without ./ and ../ steps."""

    metadata = parse_meta(meta)
    if NOTE_BY in metadata:
        raise InvalidOptionError(
            f"--meta {NOTE_BY} marks a note an agent stored (kb mcp): leave it out"
        )
    source = metadata.get("source")
    if isinstance(source, str) and source:
        metadata["source"] = normal_source(source)
    if text == "-":
        text = sys.stdin.read()
    if not text.strip():
        raise InvalidOptionError("Nothing to add: the text is empty")
    kb = open_kb(ctx, create=True)
    try:
        if isinstance(source, str) and source and supports(kb.store, FileLedger):
            records = kb.store.file_records()
            indexed = next((form for form in source_forms(source) if form in records), None)
            if indexed is not None:
                raise InvalidOptionError(
                    f"--meta source={source} is the indexed file {indexed}: kb add cannot add "
                    "to a file's chunks (kb ingest indexes files); give another source"
                )
        new_id = kb.add(text, metadata, id=id)
    finally:
        kb.close()
    render.result(new_id)
