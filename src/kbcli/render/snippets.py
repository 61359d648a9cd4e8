"""A hit's text as an excerpt around the query's terms, highlighted."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

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


def rich_snippet(text: str, pattern: re.Pattern[str] | None, width: int = SNIPPET_WIDTH) -> Any:
    from rich.text import Text

    plain, spans = snippet(text, pattern, width)
    rich_text = Text(plain)
    for start, end in spans:
        rich_text.stylize(HIGHLIGHT_STYLE, start, end)
    return rich_text
