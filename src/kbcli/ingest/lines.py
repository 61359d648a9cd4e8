"""Line numbers in the file on disk for text files (markdown, plain text), so ``kb search``'s
``path:line`` opens the right line in an editor.

Chunk offsets point into the text as loaded, which :class:`StructurePreservingNormalizer` has
cleaned: runs of blank lines folded to one, leading blank lines dropped, trailing spaces and
control characters removed. :func:`file_line_map` aligns those lines with the file's own.
"""

from __future__ import annotations

import re
import unicodedata
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kbcli.errors import UnsupportedFormatError
from kbcli.ingest.loaders.text_encoding import read_text

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x84\x86-\x9f\u200b\ufeff]")
LOOKAHEAD = 200  # raw lines searched for the next loaded line before guessing


def clean_line(line: str) -> str:
    """A file's line as the text loader's normaliser leaves it: control characters removed,
    trailing spaces stripped, NFC."""
    line = _CONTROL.sub("", line).rstrip(" \t\u00a0\u3000")
    return line if line.isascii() else unicodedata.normalize("NFC", line)


def file_line_map(raw: str, loaded: str) -> list[int] | None:
    """For each line of ``loaded`` (0-based index), its 1-based line in ``raw``; None when the
    two have the same lines (nothing to map).

    Both texts are walked line by line with a window of :data:`LOOKAHEAD` raw lines, never
    split whole: a 150 MB file's two line lists alone would cost about 500 MB.
    """
    raw_lines = _lines(raw)
    window: deque[str] = deque()  # raw lines j, j+1, ... already read
    out: list[int] = []
    same = True
    j = 0  # the raw line (0-based) the next loaded line is looked for from
    for line in _lines(loaded):
        while len(window) < LOOKAHEAD:
            nxt = next(raw_lines, None)
            if nxt is None:
                break
            window.append(nxt)
        found = next((k for k, r in enumerate(window) if clean_line(r) == line), None)
        same = same and bool(window) and window[0] == line
        if found is None:
            # no match ahead: stay on line j (or the last line), as the whole-list version did
            found = 0 if window else -1
        out.append(j + found + 1)
        for _ in range(found + 1):
            window.popleft()
        j += found + 1
    if same and not window and next(raw_lines, None) is None:
        return None
    return out


def _lines(text: str) -> Iterator[str]:
    """``text``'s lines, split as ``_LINE_BREAK.split`` splits them, one at a time."""
    start = 0
    for match in _LINE_BREAK.finditer(text):
        yield text[start : match.start()]
        start = match.end()
    yield text[start:]


def is_text_file(path: str | Path) -> bool:
    """True when the built-in loader reads ``path`` as plain text (one section, no parser)."""
    # lazy: the loaders (zipfile, html.parser, email) stay off a search's start
    from kbcli.ingest.loaders.registry import TextLoader, loader_for

    try:
        return isinstance(loader_for(path), TextLoader)
    except UnsupportedFormatError:
        return False


def map_file_lines(raw: str, loaded: str, chunks: list[Any]) -> None:
    """Rewrite the ``line``/``line_end`` of ``chunks`` (offsets into ``loaded``) as lines of
    ``raw``, the file's text as decoded from disk (see :func:`file_line_map`)."""
    mapping = file_line_map(raw, loaded)
    if mapping is None:
        return
    for chunk in chunks:
        meta = chunk.metadata
        for key in ("line", "line_end"):
            value = meta.get(key)
            if isinstance(value, int) and 1 <= value <= len(mapping):
                meta[key] = mapping[value - 1]


def file_lines(path: Path, encoding: str = "utf-8", max_bytes: int | None = None) -> list[str]:
    """The lines of a text file as an editor numbers them (LoaderError past ``max_bytes``)."""
    lines = _LINE_BREAK.split(read_text(path, encoding, max_bytes=max_bytes))
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start another
    return lines
