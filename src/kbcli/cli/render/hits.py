"""Search hits: JSON, CSV, Markdown, ``--format files`` and the table (or blocks on a narrow
terminal)."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kbcli.cli.render.explain import explain_facts, shared_facts
from kbcli.cli.render.messages import print_json, print_jsonl, result, rich_console
from kbcli.cli.render.names import chunk_location, file_names, needs_quoting, quote_name
from kbcli.cli.render.snippets import rich_lines, snippet_lines, term_pattern
from kbcli.types import SearchResult, SearchResults, note_author

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from kbcli.search.query import Hit

    _Row = tuple[str, str, str, str, Text]  # rank, score, location, chunk(s), snippet


def search_json(results: Sequence[SearchResult], explain: bool = False) -> list[dict[str, Any]]:
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


def no_results_text(results: Sequence[SearchResult]) -> str:
    """What an empty search says; a reranker's refusal also says why."""
    if isinstance(results, SearchResults) and results.refused:
        best = results.best_relevance
        return (
            f"No relevant knowledge found: none of the {results.candidates} candidates reached "
            f"min_relevance {results.min_relevance:g}"
            + (f" (best {best:.3f})." if best is not None else ".")
        )
    return "No relevant knowledge found."


SEARCH_FORMATS = ("table", "json", "jsonl", "csv", "md", "files")


# The short marker the table shows on a hit that is not ``current`` (what each means: NOTES).
MARKERS = {
    "changed": "changed",
    "missing": "missing",
    "vectors_pending": "no vector",
    "not_a_file": "note",
}
MARKER_NOTES = {
    "changed": "changed = the file differs from what was indexed",
    "missing": "missing = the file is gone or unreadable",
    "vectors_pending": "no vector = found by keyword, semantic search cannot find it yet",
    "not_a_file": "note = text added to the index, no file behind it",
}


def freshness_marker(result_: SearchResult) -> str | None:
    """The table's marker for a hit that is not ``current`` (None: current, or unknown)."""
    fresh = result_.freshness
    return None if fresh is None else MARKERS.get(fresh.state)


def freshness_note(hits: Sequence[Hit]) -> str | None:
    """The one line under the table saying what its markers mean and what to run (None: no
    hit is marked)."""
    marked = [(h, h.result.freshness) for h in hits if freshness_marker(h.result) is not None]
    states = {fresh.state for _, fresh in marked if fresh is not None}
    if not states:
        return None
    said = "; ".join(MARKER_NOTES[s] for s in MARKERS if s in states)
    stale = [
        h.source
        for h, fresh in marked
        if fresh is not None and fresh.stale and h.source is not None
    ]
    if stale:
        from pathlib import Path

        folder = str(Path(stale[0]).parent)
        shown = quote_name(folder) if needs_quoting(folder) else shlex.quote(folder)
        return f"{said}. Run: kb ingest {shown}"
    if "vectors_pending" in states:
        return f"{said}. kb ingest (or the one running) fills in the vectors."
    return f"{said}."


def hit_json(
    hit: Hit, unit: str, explain: bool = False, index: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One search hit as JSON: ``{id, score, text, metadata, unit, location, line, note_by,
    freshness, index}`` (``note_by``: the writer of an agent's note, else null), with
    ``matched_chunks`` for file hits and ``explain`` when asked. ``line`` and ``location`` are
    the line the hit is for (its best-matching line; ``path#page=N`` for a page); the chunk's
    own first line stays in ``metadata``. ``freshness`` is ``{state, indexed_at}`` (null when
    the store keeps no ledger), ``index`` the index's watermark (``{changed_at, syncing,
    vectors_pending}``), the same on every hit."""
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
        "freshness": None if r.freshness is None else r.freshness.as_json(),
        "index": index,
    }
    if unit == "file":
        item["matched_chunks"] = hit.matched
    if explain:
        item["explain"] = r.explain
    return item


def search_output(
    hits: Sequence[Hit],
    fmt: str,
    unit: str,
    explain: bool,
    null: bool = False,
    index: dict[str, Any] | None = None,
) -> None:
    """Search hits on stdout as ``fmt`` (every format but ``table``); ``null``: ``files``
    separated by NUL bytes; ``index``: the watermark each JSON hit carries."""
    if fmt == "json":
        print_json([hit_json(h, unit, explain, index) for h in hits])
    elif fmt == "jsonl":
        print_jsonl([hit_json(h, unit, explain, index) for h in hits])
    elif fmt == "files":
        file_names([h.source for h in hits if h.source is not None and not h.note], null)
    elif fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["rank", "score", "location", "source", "line", "chunk", "matched", "id"]
                        + ["text", "freshness", "indexed_at"])  # fmt: skip
        for rank, h in enumerate(hits, 1):
            meta = h.result.document.metadata
            fresh = h.result.freshness
            writer.writerow(
                [rank, f"{h.result.score:.4f}", h.location, h.source or "", h.line or "",
                 meta.get("chunk_index", ""), h.matched, h.result.document.id,
                 " ".join(h.result.document.text.split()),
                 fresh.state if fresh else "", (fresh.indexed_at or "") if fresh else ""]
            )  # fmt: skip
    elif fmt == "md":
        result(f"| # | Score | Location | {'Chunks' if unit == 'file' else 'Chunk'} | Text |")
        result("|---:|---:|---|---:|---|")
        for rank, h in enumerate(hits, 1):
            meta = h.result.document.metadata
            lines = [_md_code(text) for _, text, _ in snippet_lines(h.result, None)]
            count = str(h.matched) if unit == "file" else chunk_label(meta, h.page is None)
            marker = freshness_marker(h.result)
            place = f"`{h.location}`" + (f" ({marker})" if marker else "")
            cells = [str(rank), f"{h.result.score:.3f}", place, count]
            row = [c.replace("|", "\\|") for c in cells]
            result("| " + " | ".join([*row, "<br>".join(lines)]) + " |")
    else:
        raise ValueError(f"unknown format {fmt!r}")


MIN_SNIPPET = 20  # narrower than this, the snippet goes under the location instead
# The snippet column must also hold this many cells (or the snippet's longest line, when
# shorter): narrower, its lines (commands) would wrap, and blocks give them the whole width.
SNIPPET_ROOM = 60


def search_table(
    hits: Sequence[Hit],
    terms: Sequence[str],
    explain: bool = False,
    unit: str = "chunk",
    console: Console | None = None,
) -> None:
    """Rank, score, location, chunk (or matched chunks) and a snippet for each hit: the line
    the hit is for with its neighbours, line breaks kept, terms highlighted. The location
    (``path:line``, ``path#page=N``) is never cut or wrapped (``$EDITOR +LINE path`` must copy
    whole) and the snippet column is as wide as its longest line when the terminal has room
    (a command stays on one line); when less than :data:`MIN_SNIPPET` columns would be left,
    each hit is a block instead, its location on a line of its own. ``explain`` follows the
    hits, a few lines per hit (:func:`explain_blocks`)."""
    console = console or rich_console()
    pattern = term_pattern(terms)
    rows: list[_Row] = []
    for rank, hit in enumerate(hits, 1):
        r = hit.result
        meta = r.document.metadata
        location = chunk_location(meta, hit.line, page=hit.page)
        count = str(hit.matched) if unit == "file" else chunk_label(meta, hit.page is None)
        body = rich_lines(r, pattern)
        marker = freshness_marker(r)
        if marker is not None:  # the location stays whole (it is copied): the snippet says it
            from rich.text import Text

            body = Text(f"({marker})\n", style="yellow") + body
        rows.append((str(rank), f"{r.score:.3f}", location, count, body))
    header = ("#", "Score", "Location", "Chunks" if unit == "file" else "Chunk")
    longest = max((line.cell_len for row in rows for line in row[4].split("\n")), default=0)
    room = max(MIN_SNIPPET, min(longest, SNIPPET_ROOM))
    if table_fits(console.width, header, [row[:4] for row in rows], room):
        _hits_table(console, header, rows)
    else:
        _hits_blocks(console, unit, rows)
    note = freshness_note(hits)
    if note is not None:
        from rich.text import Text

        console.print(Text(note, style="dim"), soft_wrap=True)
    if explain:
        explain_blocks(
            console, [(row[0], row[2], hit.result.explain) for row, hit in zip(rows, hits)]
        )


def table_fits(
    width: int, header: Sequence[str], rows: Sequence[Sequence[str]], room: int = MIN_SNIPPET
) -> bool:
    """True when columns as wide as their longest cell leave ``room`` cells for a last
    column (a Rich table: one space of padding each side, a rule between columns)."""
    from rich.cells import cell_len

    widths = [max(cell_len(str(cell)) for cell in column) for column in zip(header, *rows)]
    borders = len(widths) + 2
    return sum(widths) + 2 * (len(widths) + 1) + borders + room <= width


def _hits_table(console: Console, header: Sequence[str], rows: Sequence[_Row]) -> None:
    """The table: every column but the snippet as wide as its cells, never wrapped; the
    snippet as wide as its longest line, up to what is left of the terminal (then its lines
    wrap at spaces)."""
    from rich.cells import cell_len
    from rich.table import Table

    table = Table(show_lines=True, expand=False)
    table.add_column(header[0], justify="right", no_wrap=True)
    table.add_column(header[1], justify="right", no_wrap=True)
    longest = max(cell_len(row[2]) for row in rows)
    table.add_column(header[2], no_wrap=True, min_width=longest)
    table.add_column(header[3], justify="right", no_wrap=True)
    table.add_column("Snippet", overflow="fold", min_width=MIN_SNIPPET)
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _hits_blocks(console: Console, unit: str, rows: Sequence[_Row]) -> None:
    """A narrow terminal: ``#1  0.873  2 chunks``, the location alone on the next line (the
    terminal may fold it, the text stays one line), the snippet indented under it."""
    from rich.text import Text

    for number, (rank, score, location, count, body) in enumerate(rows):
        if number:
            console.print()
        what = f"chunks {count}" if unit == "file" else f"chunk {count}"
        console.print(Text(f"#{rank}  {score}  {what}", style="bold"), soft_wrap=True)
        console.print(Text(location), soft_wrap=True)
        indented(console, body)


def indented(console: Console, text: Text, indent: int = 3) -> None:
    """``text`` (Rich text) under an ``indent``, each line wrapped at spaces to the width left
    (a word longer than it folded), no spaces added after a line."""
    from rich.text import Text

    width = max(1, console.width - indent)
    for line in text.wrap(console, width, overflow="fold"):
        line.rstrip()
        console.print(Text(" " * indent) + line, soft_wrap=True)


def explain_blocks(
    console: Console, hits: Sequence[tuple[str, str, dict[str, Any] | None]]
) -> None:
    """``--explain`` under the hits: the facts every hit shares once (the fusion, alpha and
    why), then each hit's ``#rank location`` and its own facts, indented, one a line (a long
    one wraps under its indent)."""
    from rich.text import Text

    explains = [explain for _, _, explain in hits]
    shared = shared_facts(explains)
    console.print()
    console.print(Text("How each score was made", style="bold"))
    if shared:
        indented(console, Text("every hit: " + "; ".join(shared), style="dim"))
    for rank, location, explain in hits:
        own = [fact for _, fact in explain_facts(explain) if fact not in shared]
        console.print(Text(f"#{rank} {location}"), soft_wrap=True)
        indented(console, Text("\n".join(own) if own else "as above" if shared else "-"))


def _md_code(text: str) -> str:
    """A snippet line for a Markdown table cell: ``|`` escaped, ``<``, ``>`` and ``&`` as
    entities (a line of HTML or a ``<br>`` in the text stays text)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|")


def chunk_label(meta: dict[str, Any], page: bool = True) -> str:
    """A chunk's number, with ``(p. N)`` when it has a page (``page`` False: the location
    already says it)."""
    index = meta.get("chunk_index")
    label = "-" if index is None else str(index)
    if page and meta.get("page") is not None:
        label += f" (p. {meta['page']})"
    return label
