"""Text normalizers: one that keeps structure (before chunking), one that flattens (per chunk)."""

from __future__ import annotations

import re
import unicodedata

_BREAKS = re.compile(r"\r\n?|[\x0b\x0c\x85\u2028\u2029]")
# Control characters other than tab and newline, plus the zero-width space and stray BOMs that
# PDF and Word text often carries.
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f\u200b\ufeff]")
_BREAK_CHARS = "\r\x0b\x0c\x85\u2028\u2029"
_TRAILING_CHARS = " \t\u00a0\u3000"
_BLANK_RUNS = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")
_WHITESPACE = re.compile(r"\s+")


class WhitespaceNormalizer:
    """Strip the text and collapse every run of whitespace (newlines included) to one space.

    Used on each chunk after chunking; running it before chunking would erase the line breaks
    the structure-aware chunker needs.
    """

    def normalize(self, text: str) -> str:
        """Return ``text`` stripped, with each whitespace run replaced by a single space."""
        return _WHITESPACE.sub(" ", text).strip()


class StructurePreservingNormalizer:
    """Clean text but keep its lines, paragraphs and headings.

    Turns ``\\r\\n``, ``\\r``, form feeds and Unicode line separators into
    ``\\n``, removes other control characters, strips trailing spaces on every line, collapses
    runs of blank lines into one blank line, drops blank lines at the start and end and
    applies Unicode NFC.
    Idempotent: normalising twice gives the same text, which is what keeps chunk offsets valid
    when the loader has already normalised a file.
    """

    def normalize(self, text: str) -> str:
        """Return the cleaned ``text`` (see the class docstring for the steps)."""
        # Each step first checks (with fast substring tests where a regex search would be slow)
        # whether it has anything to do, so a clean 50 MB text is neither copied nor rescanned.
        if any(c in text for c in _BREAK_CHARS):
            text = _BREAKS.sub("\n", text)
        if _CONTROL.search(text):
            text = _CONTROL.sub("", text)
        if text.endswith(tuple(_TRAILING_CHARS)) or any(c + "\n" in text for c in _TRAILING_CHARS):
            # line by line: a regex "[ \t]+$" rescans a long run of spaces from each of its
            # characters (quadratic on a line holding megabytes of spaces)
            text = "\n".join([line.rstrip(_TRAILING_CHARS) for line in text.split("\n")])
        if _BLANK_RUNS.search(text):
            text = _BLANK_RUNS.sub("\n\n", text)
        # NFC last: removing a control character can bring a letter and an accent together.
        if not text.isascii() and not unicodedata.is_normalized("NFC", text):
            text = unicodedata.normalize("NFC", text)
        return text.strip("\n")
