"""``kb list``: the stored chunks, oldest first."""

from pathlib import Path
from typing import Annotated, Any

import typer

from kbcli.cli import render
from kbcli.cli.context import catalog, open_kb, search_filter, source_candidates
from kbcli.cli.group import KBCommand, command_app
from kbcli.cli.options import (
    MAX_INT64,
    FilterOption,
    NullOption,
    example,
    files_format,
    output_format,
)
from kbcli.cli.state import global_options
from kbcli.filters.syntax import parse_filter_expressions

app = command_app()


@app.command(
    cls=KBCommand,
    name="list",
    epilog=example(
        "kb list --source notes/setup.md",
        "kb list --filter lang=en --limit 50 --json",
        "kb list --limit 0 --format files",
    ),
)
@global_options()
def list_(
    ctx: typer.Context,
    source: Annotated[
        Path | None,
        typer.Option("--source", metavar="PATH", help="Only chunks of this file."),
    ] = None,
    filter: FilterOption = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit", "-n", metavar="N", min=0, max=MAX_INT64, help="At most this many (0: all)."
        ),
    ] = 20,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help="table, json, jsonl, csv, md, or files (each source once; a name holding a "
            "newline or control character is shell-quoted: $'a\\nb.md').",
        ),
    ] = "table",
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Same as --format json: {id, text, metadata, created_at}."),
    ] = False,
    null: NullOption = False,
) -> None:
    """List stored chunks, oldest first."""

    fmt = files_format(output_format(fmt, json_out, render.SEARCH_FORMATS), null)
    where = search_filter(parse_filter_expressions(filter), None)
    kb = open_kb(ctx, create=False)
    try:
        docs: list[Any] = []
        for candidate in source_candidates(source) if source is not None else [None]:
            docs = list(catalog(kb).iter_documents(where, source=candidate, limit=limit or None))
            if docs:
                break
    finally:
        kb.close()
    if fmt != "table":
        render.documents_output(docs, fmt, null)
    if not docs:
        render.message("No chunks found.")
    elif fmt == "table":
        render.documents_table(docs)
