"""How a hit's place is written, the one form every surface shows: ``path:line`` for a chunk
of a text file, ``path#page=N`` for a page of a PDF or an image, ``note by NAME`` for an
agent's note (:func:`location`). Pure functions of a hit's metadata:
:mod:`kbcli.search.location` finds the line itself.
"""

from __future__ import annotations

from typing import Any

from kbcli.types import SearchResult, note_author


def hit_page(metadata: dict[str, Any]) -> int | None:
    """The page a chunk was read from (``page`` metadata: only loaders that read a file by
    pages, a PDF or an image's frames, set it; neither ``--meta`` nor a note can), else
    None."""
    page = metadata.get("page")
    if not isinstance(page, int) or isinstance(page, bool) or page < 1:
        return None
    if metadata.get("source") is None or note_author(metadata) is not None:
        return None
    return page


def hit_line(result: SearchResult) -> int | None:
    """The line ``result`` is for: its best-matching line when located, else its chunk's first
    line (``line`` metadata), if recorded; None for an agent's note (no place in a file)."""
    meta = result.document.metadata
    if note_author(meta) is not None:
        return None
    if result.match is not None:
        return result.match.line
    line = meta.get("line")
    return line if isinstance(line, int) and not isinstance(line, bool) else None


def location_suffix(line: int | str | None, page: int | None) -> str:
    """``#page=N`` for a page (a viewer opens a PDF there, ``kb get`` reads it), else
    ``:LINE`` (``$EDITOR +LINE``, ``kb get path:LINE``; ``kb get`` shows a chunk's span as
    ``"12-15"``), else nothing."""
    if page is not None:
        return f"#page={page}"
    return f":{line}" if line is not None else ""


def location(
    source: str | None, line: int | None, page: int | None = None, note: str | None = None
) -> str:
    """Where a hit is, the one form every surface shows: ``path:line``, ``path#page=N`` for a
    page of a PDF or an image (a line of recognised text is nothing an editor can open), the
    path alone, or ``-`` without a source; an agent's note (``note``: its label, ``note by
    NAME``) is that label (``note by NAME: source``), never a file's place."""
    if note is not None:
        return note if source is None else f"{note}: {source}"
    if source is None:
        return "-"
    return source + location_suffix(line, page)
