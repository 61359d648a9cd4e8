"""A hit's text as an excerpt around the query's terms, highlighted."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kbcli.types import SearchResult

if TYPE_CHECKING:
    from rich.text import Text

SNIPPET_WIDTH = 160
HIGHLIGHT_STYLE = "bold yellow"


_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def term_pattern(terms: Sequence[str]) -> re.Pattern[str] | None:
    """A case-insensitive pattern for query terms: a word-like term matches at the start of a
    word (``password`` highlights ``passwords``); CJK terms match anywhere."""
    alternatives = []
    for term in sorted({t for t in terms if t}, key=len, reverse=True):
        escaped = re.escape(term)
        if _CJK.search(term) or not re.match(r"\w", term):
            alternatives.append(escaped)
        else:
            alternatives.append(rf"(?<!\w){escaped}\w*")
    if not alternatives:
        return None
    return re.compile("|".join(alternatives), re.IGNORECASE)


def snippet(
    text: str, pattern: re.Pattern[str] | None = None, width: int = SNIPPET_WIDTH
) -> tuple[str, list[tuple[int, int]]]:
    """About ``width`` characters of ``text`` around the first match of ``pattern`` (the start
    when nothing matches), whitespace collapsed, ``…`` where cut. Returns the snippet and the
    spans of every match inside it."""
    flat = " ".join(text.split())
    first = pattern.search(flat) if pattern else None
    start = 0
    if first and first.start() > width // 3:
        start = first.start() - width // 3
        space = flat.rfind(" ", 0, start + 1)
        start = space + 1 if space > start - 20 else start
    end = min(len(flat), start + width)
    if end < len(flat):
        space = flat.rfind(" ", start + width // 2, end)
        end = space if space > 0 else end
    body = flat[start:end]
    prefix = "…" if start > 0 else ""
    suffix = "…" if end < len(flat) else ""
    out = prefix + body + suffix
    spans = []
    if pattern:
        spans = [(m.start() + len(prefix), m.end() + len(prefix)) for m in pattern.finditer(body)]
    return out, [s for s in spans if s[1] > s[0]]


# --- a hit's own lines ----------------------------------------------------------------------


def cells(char: str) -> int:
    """Terminal cells of one character: 0 for a combining mark or a zero-width format
    character, 2 for a wide (CJK) one, else 1."""
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def cut_line(
    line: str, pattern: re.Pattern[str] | None, width: int = SNIPPET_WIDTH
) -> tuple[str, list[tuple[int, int]]]:
    """``line`` in at most ``width`` terminal cells: whole when it fits, else the part around
    its first match of ``pattern`` (from its start when nothing matches or the match is near
    it), with ``…`` where cut. A cut never falls between a character and its combining marks
    or inside a wide character. Returns the text and the spans of the matches inside it."""
    widths = [cells(c) for c in line]
    if sum(widths) <= width:
        return line, _spans(line, pattern, 0)
    room = max(1, width - 2)  # one cell for each ellipsis
    first = pattern.search(line) if pattern else None
    start = 0
    if first is not None and sum(widths[: first.start()]) > room // 3:
        start = first.start()
        lead = 0
        while start > 0 and lead + widths[start - 1] <= room // 3:
            start -= 1
            lead += widths[start]
        space = line.rfind(" ", 0, first.start())
        if start <= space < first.start() and space - start < 20:
            start = space + 1
    while start > 0 and widths[start] == 0:  # not between a character and its marks
        start -= 1
    lead = 1 if start > 0 else 0  # the cell of the leading ellipsis
    if sum(widths[start:]) + lead <= width:
        end = len(line)  # the rest fits: no trailing ellipsis
    else:
        room = width - lead - 1
        end, used = start, 0
        while end < len(line) and used + widths[end] <= room:
            used += widths[end]
            end += 1
    while end < len(line) and end > start + 1 and widths[end] == 0:
        end -= 1  # keep a character with all its marks, or leave it out
    prefix = "…" if start > 0 else ""
    suffix = "…" if end < len(line) else ""
    return prefix + line[start:end] + suffix, _spans(line[start:end], pattern, len(prefix))


def _spans(text: str, pattern: re.Pattern[str] | None, shift: int) -> list[tuple[int, int]]:
    if pattern is None:
        return []
    return [
        (m.start() + shift, m.end() + shift) for m in pattern.finditer(text) if m.end() > m.start()
    ]


def snippet_lines(
    result: SearchResult, pattern: re.Pattern[str] | None, width: int = SNIPPET_WIDTH
) -> list[tuple[int | None, str, list[tuple[int, int]]]]:
    """What a hit's snippet shows, as ``(line number, text, match spans)`` lines: the line it
    is for with its neighbours, their line breaks kept (the file's own lines, each cut to
    ``width`` cells), when it was located; else one line of its chunk's text around the
    first match (whitespace collapsed, as stored), numbered None."""
    match = result.match
    if match is not None and match.context:
        out: list[tuple[int | None, str, list[tuple[int, int]]]] = []
        for number, text in match.context:
            cut, spans = cut_line(text, pattern, width)
            out.append((number, cut, spans))
        return out
    flat, spans = snippet(result.document.text, pattern, width)
    return [(None, flat, spans)]


def rich_lines(
    result: SearchResult, pattern: re.Pattern[str] | None, width: int = SNIPPET_WIDTH
) -> Text:
    """A hit's snippet (:func:`snippet_lines`) as Rich text, one line a line, the query's
    terms highlighted and the neighbours of the line it is for dimmed."""
    from rich.text import Text

    best = None if result.match is None else result.match.line
    out = Text()
    for n, (number, text, spans) in enumerate(snippet_lines(result, pattern, width)):
        if n:
            out.append("\n")
        line = Text(text, style="dim" if number is not None and number != best else "")
        for start, end in spans:
            line.stylize(HIGHLIGHT_STYLE, start, end)
        out.append_text(line)
    return out
