"""Search hits: JSON, CSV, Markdown, ``--format files`` and the table (or blocks on a narrow
terminal)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from ..types import note_author
from .explain import explain_text
from .messages import print_json, print_jsonl, result, rich_console
from .names import chunk_location, file_names
from .snippets import SNIPPET_WIDTH, rich_snippet, snippet, term_pattern


def search_json(results: Sequence[Any], explain: bool = False) -> list[dict[str, Any]]:
    """The JSON shape of search results: ``{id, score, text, metadata}`` (+ ``explain``)."""
    out = []
    for r in results:
        item = {
            "id": r.document.id,
            "score": r.score,
            "text": r.document.text,
            "metadata": r.document.metadata,
        }
        if explain:
            item["explain"] = r.explain
        out.append(item)
    return out


def no_results_text(results: Any) -> str:
    """What an empty search says; a reranker's refusal also says why."""
    if getattr(results, "refused", False):
        best = results.best_relevance
        return (
            f"No relevant knowledge found: none of the {results.candidates} candidates reached "
            f"min_relevance {results.min_relevance:g}"
            + (f" (best {best:.3f})." if best is not None else ".")
        )
    return "No relevant knowledge found."


SEARCH_FORMATS = ("table", "json", "jsonl", "csv", "md", "files")


def hit_json(hit: Any, unit: str, explain: bool = False) -> dict[str, Any]:
    """One search hit as JSON: ``{id, score, text, metadata, unit, location, line, note_by}``
    (``note_by``: the writer of an agent's note, else null), with ``matched_chunks`` for file
    hits and ``explain`` when asked."""
    r = hit.result
    item: dict[str, Any] = {
        "id": r.document.id,
        "score": r.score,
        "text": r.document.text,
        "metadata": r.document.metadata,
        "unit": unit,
        "location": hit.location,
        "line": hit.line,
        "note_by": note_author(r.document.metadata),
    }
    if unit == "file":
        item["matched_chunks"] = hit.matched
    if explain:
        item["explain"] = r.explain
    return item


def search_output(
    hits: Sequence[Any], fmt: str, unit: str, explain: bool, null: bool = False
) -> None:
    """Search hits on stdout as ``fmt`` (every format but ``table``); ``null``: ``files``
    separated by NUL bytes."""
    if fmt == "json":
        print_json([hit_json(h, unit, explain) for h in hits])
    elif fmt == "jsonl":
        print_jsonl([hit_json(h, unit, explain) for h in hits])
    elif fmt == "files":
        file_names([h.source for h in hits if h.source is not None and not h.note], null)
    elif fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["rank", "score", "location", "source", "line", "chunk", "matched", "id"]
                        + ["text"])  # fmt: skip
        for rank, h in enumerate(hits, 1):
            meta = h.result.document.metadata
            writer.writerow(
                [rank, f"{h.result.score:.4f}", h.location, h.source or "", h.line or "",
                 meta.get("chunk_index", ""), h.matched, h.result.document.id,
                 " ".join(h.result.document.text.split())]
            )  # fmt: skip
    elif fmt == "md":
        result(f"| # | Score | Location | {'Chunks' if unit == 'file' else 'Chunk'} | Text |")
        result("|---:|---:|---|---:|---|")
        for rank, h in enumerate(hits, 1):
            meta = h.result.document.metadata
            text, _ = snippet(h.result.document.text, None, SNIPPET_WIDTH)
            count = str(h.matched) if unit == "file" else chunk_label(meta)
            cells = [str(rank), f"{h.result.score:.3f}", f"`{h.location}`", count, text]
            result("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    else:
        raise ValueError(f"unknown format {fmt!r}")


MIN_SNIPPET = 20  # narrower than this, the snippet goes under the location instead


def search_table(
    hits: Sequence[Any],
    terms: Sequence[str],
    explain: bool = False,
    unit: str = "chunk",
    console: Any = None,
) -> None:
    """Rank, score, ``path:line``, chunk (or matched chunks) and a highlighted snippet for each
    hit. The location is never cut or wrapped (``$EDITOR +LINE path`` must copy whole): the
    snippet takes the width left; when less than :data:`MIN_SNIPPET` is left, each hit is a
    block instead, its location on a line of its own. ``explain`` goes under the snippet."""
    from rich.console import Group
    from rich.text import Text

    console = console or rich_console()
    pattern = term_pattern(terms)
    rows = []
    for rank, hit in enumerate(hits, 1):
        r = hit.result
        meta = r.document.metadata
        location = chunk_location(meta, hit.line)
        count = str(hit.matched) if unit == "file" else chunk_label(meta)
        if unit == "file" and meta.get("page") is not None:
            count += f" (p. {meta['page']})"
        body: Any = rich_snippet(r.document.text, pattern)
        if explain:
            body = Group(body, Text(explain_text(r.explain), style="dim"))
        rows.append((str(rank), f"{r.score:.3f}", location, count, body))
    header = ("#", "Score", "Location", "Chunks" if unit == "file" else "Chunk")
    if table_fits(console.width, header, [row[:4] for row in rows]):
        _hits_table(console, header, rows)
    else:
        _hits_blocks(console, unit, rows)


def table_fits(width: int, header: Sequence[str], rows: Sequence[Sequence[str]]) -> bool:
    """True when columns as wide as their longest cell leave :data:`MIN_SNIPPET` for a last
    column (a Rich table: one space of padding each side, a rule between columns)."""
    from rich.cells import cell_len

    widths = [max(cell_len(str(cell)) for cell in column) for column in zip(header, *rows)]
    borders = len(widths) + 2
    return sum(widths) + 2 * (len(widths) + 1) + borders + MIN_SNIPPET <= width


def _hits_table(console: Any, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    from rich.cells import cell_len
    from rich.table import Table

    table = Table(show_lines=True, expand=False)
    table.add_column(header[0], justify="right", no_wrap=True)
    table.add_column(header[1], justify="right", no_wrap=True)
    longest = max(cell_len(row[2]) for row in rows)
    table.add_column(header[2], no_wrap=True, min_width=longest)
    table.add_column(header[3], justify="right", no_wrap=True)
    table.add_column("Snippet", overflow="fold", ratio=1, min_width=MIN_SNIPPET)
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _hits_blocks(console: Any, unit: str, rows: Sequence[Sequence[Any]]) -> None:
    """A narrow terminal: ``#1  0.873  2 chunks``, the location alone on the next line (the
    terminal may fold it, the text stays one line), the snippet indented under it."""
    from rich.padding import Padding
    from rich.text import Text

    for number, (rank, score, location, count, body) in enumerate(rows):
        if number:
            console.print()
        what = f"chunks {count}" if unit == "file" else f"chunk {count}"
        console.print(Text(f"#{rank}  {score}  {what}", style="bold"), soft_wrap=True)
        console.print(Text(location), soft_wrap=True)
        console.print(Padding(body, (0, 0, 0, 3), expand=False))


def chunk_label(meta: dict[str, Any]) -> str:
    index = meta.get("chunk_index")
    label = "-" if index is None else str(index)
    if meta.get("page") is not None:
        label += f" (p. {meta['page']})"
    return label
