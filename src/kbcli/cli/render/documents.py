"""Listed chunks (``kb list``) and a file's lines (``kb get``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kbcli.cli.render.hits import MIN_SNIPPET, chunk_label, table_fits
from kbcli.cli.render.messages import print_json, print_jsonl, result, rich_console
from kbcli.cli.render.names import chunk_location, file_names
from kbcli.cli.render.snippets import snippet
from kbcli.types import Document, note_author

if TYPE_CHECKING:
    from rich.console import Console

    from kbcli.agent.get import Shown


def numbered(shown: Shown) -> None:
    """``kb get`` output: a ``path:line`` header for a chunk, then ``NUMBER  text`` lines."""
    if shown.origin == "chunk":
        meta = shown.metadata or {}
        line = meta.get("line") if isinstance(meta.get("line"), int) else None
        if line is not None and isinstance(meta.get("line_end"), int):
            line = f"{line}-{meta['line_end']}"
        where = chunk_location(meta, line, path=str)
        what = "note" if note_author(meta) else f"chunk {chunk_label(meta)}"
        result(f"{where} ({what}, id {shown.id})")
        result(shown.lines[0][1] if shown.lines else "")
        return
    width = len(str(max((n for n, _ in shown.lines), default=1)))
    out = sys.stdout
    for number, text in shown.lines:
        out.write(f"{number:>{width}}  {text}\n")
    out.flush()


def documents_json(docs: Sequence[Document]) -> list[dict[str, Any]]:
    """The JSON shape of listed chunks: ``{id, text, metadata, created_at}``."""
    return [
        {
            "id": d.id,
            "text": d.text,
            "metadata": d.metadata,
            "created_at": d.created_at.isoformat() if d.created_at else None,
        }
        for d in docs
    ]


def documents_output(docs: Sequence[Document], fmt: str, null: bool = False) -> None:
    """Listed chunks on stdout as ``fmt`` (every format but ``table``); ``null``: ``files``
    separated by NUL bytes."""
    items = documents_json(docs)
    if fmt == "json":
        print_json(items)
    elif fmt == "jsonl":
        print_jsonl(items)
    elif fmt == "files":  # the files chunks come from: not the sources notes name
        sources = (d.metadata.get("source") for d in docs if not note_author(d.metadata))
        file_names([str(source) for source in sources if source is not None], null)
    elif fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["id", "source", "line", "chunk", "created_at", "text"])
        for d, item in zip(docs, items):
            meta = d.metadata
            writer.writerow(
                [d.id, meta.get("source", ""), meta.get("line", ""), meta.get("chunk_index", ""),
                 item["created_at"] or "", " ".join(d.text.split())]
            )  # fmt: skip
    elif fmt == "md":
        result("| ID | Location | Chunk | Text |")
        result("|---|---|---:|---|")
        for d in docs:
            meta = d.metadata
            line = meta.get("line") if isinstance(meta.get("line"), int) else None
            where = chunk_location(meta, line, path=str)
            text, _ = snippet(d.text, None, 80)
            cells = [f"`{d.id}`", f"`{where}`", chunk_label(meta), text]
            result("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    else:
        raise ValueError(f"unknown format {fmt!r}")


def documents_table(docs: Sequence[Document], console: Console | None = None) -> None:
    """Id, source, chunk index and the start of each chunk; the source is never cut (as in
    :func:`search_table`: a narrow terminal gets one block per chunk)."""
    from rich.cells import cell_len
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    console = console or rich_console()
    rows = [
        (d.id, chunk_location(d.metadata), chunk_label(d.metadata),
         snippet(d.text, None, 80)[0])
        for d in docs
    ]  # fmt: skip
    header = ("ID", "Source", "Chunk")
    if not table_fits(console.width, header, [row[:3] for row in rows]):
        for number, (doc_id, source, chunk, text) in enumerate(rows):
            if number:
                console.print()
            console.print(Text(f"{doc_id}  chunk {chunk}", style="bold"), soft_wrap=True)
            console.print(Text(source), soft_wrap=True)
            console.print(Padding(Text(text), (0, 0, 0, 3), expand=False))
        return
    table = Table()
    table.add_column("ID", no_wrap=True)
    table.add_column("Source", no_wrap=True, min_width=max(cell_len(row[1]) for row in rows))
    table.add_column("Chunk", justify="right", no_wrap=True)
    table.add_column("Snippet", overflow="fold", ratio=1, min_width=MIN_SNIPPET)
    for row in rows:
        table.add_row(*row)
    console.print(table)
