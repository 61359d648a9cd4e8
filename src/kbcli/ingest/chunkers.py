"""Chunkers: split loaded text into pieces small enough to embed and index.

Both chunkers return chunks that are exact slices of their input. ``chunk_sections`` gives each
chunk the metadata of its section plus ``char_start`` / ``char_end``: offsets into the
sections' texts joined by ``"\\n\\n"`` (the text :meth:`DefaultDocumentLoader.load` returns),
so ``joined[char_start:char_end] == chunk.text``. A chunk never spans two sections (so ``page``
stays exact). Collapse whitespace per chunk *after* chunking, if at all.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator

from kbcli.config.registry import CHUNKERS, is_class_path, load_class
from kbcli.errors import InvalidOptionError
from kbcli.ingest.markdown import Heading, find_headings
from kbcli.ingest.normalizers import StructurePreservingNormalizer
from kbcli.protocols import SectionChunkerProtocol, TextChunkerProtocol
from kbcli.types import Section

SECTION_SEPARATOR = "\n\n"

_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r]*\n\s*")
_CLOSERS = "\"'”’)\\]}」』》）】〉"
_SENTENCE_END = re.compile(rf"(?:[.!?]+[{_CLOSERS}]*(?=\s|$)|[。！？；]+[{_CLOSERS}]*)")
_SPACE = re.compile(r"\s")

Span = tuple[int, int]


def _check_sizes(chunk_size: int, overlap: int, overlap_name: str) -> None:
    for name, value in (("chunk_size", chunk_size), (overlap_name, overlap)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidOptionError(f"{name} must be a whole number, got {value!r}")
    if chunk_size < 1:
        raise InvalidOptionError(f"chunk_size must be at least 1, got {chunk_size}")
    if overlap < 0:
        raise InvalidOptionError(f"{overlap_name} must be 0 or more, got {overlap}")
    if overlap >= chunk_size:
        raise InvalidOptionError(
            f"{overlap_name} must be smaller than chunk_size ({overlap} >= {chunk_size})"
        )


def _strip(text: str, start: int, end: int) -> Span:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _heading_blocks(
    text: str, label: str | None, detect: bool
) -> list[tuple[int, int, int, str | None]]:
    """Split ``text`` at markdown headings: (start, body start, end, heading label) per block.

    The body starts after the heading line (and a setext underline), so that an overlap
    never begins inside a heading. A heading with nothing under it before the next heading
    ("# Guide" right above "## Install") is not a block of its own: it opens the next one,
    whose first chunk then reads "# Guide ## Install ..." (a lone title is no answer, yet
    it can match a question by meaning alone).
    """
    headings: list[Heading] = find_headings(text) if detect else []
    blocks = []
    start = body = 0
    titled = False  # whether the block at ``start`` opens with a heading
    for heading in headings:
        bare = titled and not text[body : heading.start].strip()
        if heading.start > start and not bare:
            blocks.append((start, body, heading.start, label))
            start = heading.start
        elif not titled:
            start = heading.start
        label, titled = heading.label, True
        body = _line_end(text, heading.start)
        if not text[heading.start : body].lstrip().startswith("#"):
            body = _line_end(text, body + 1)  # setext: skip the underline too
    blocks.append((start, body, len(text), label))
    return blocks


def _join_bare_headings(sections: list[Section]) -> list[Section]:
    """``sections`` with each one that holds nothing but its own heading joined to the next
    one on the same page (the text joined by :data:`SECTION_SEPARATOR`, so offsets into the
    joined document stay the same; the next one's metadata)."""
    out: list[Section] = []
    pending: Section | None = None
    for section in sections:
        if pending is not None:
            if pending.metadata.get("page") == section.metadata.get("page"):
                section = Section(pending.text + SECTION_SEPARATOR + section.text, section.metadata)
            else:
                out.append(pending)
            pending = None
        heading = section.metadata.get("heading")
        title = str(heading).rsplit(" > ", 1)[-1].strip() if heading else ""
        if title and section.text.strip() == title:
            pending = section
        else:
            out.append(section)
    if pending is not None:
        out.append(pending)
    return out


def _line_end(text: str, pos: int) -> int:
    end = text.find("\n", pos)
    return len(text) if end < 0 else end


class _BaseChunker:
    # Whether the ingest pipeline normalises text before chunking it (the reference order) or
    # chunks the text as loaded and normalises each chunk (structure must survive to be seen).
    normalize_first = False

    def chunk(self, text: str) -> list[str]:
        """Return the chunks of ``text`` in order (never empty or whitespace-only)."""
        return [c.text for c in self.chunk_sections([Section(text)])]

    def chunk_sections(self, sections: list[Section]) -> list[Section]:
        """Chunk each section; chunks carry its metadata plus ``char_start``/``char_end``.

        Offsets are into ``"\\n\\n".join(s.text for s in sections)``.
        """
        chunks: list[Section] = []
        offset = 0
        for section in sections:
            text = section.text
            for start, end, heading in self._spans(text, section.metadata.get("heading")):
                metadata = dict(section.metadata)
                if heading:
                    metadata["heading"] = heading
                metadata["char_start"] = offset + start
                metadata["char_end"] = offset + end
                chunks.append(Section(text[start:end], metadata))
            offset += len(text) + len(SECTION_SEPARATOR)
        return chunks

    def _spans(self, text: str, heading: str | None) -> Iterator[tuple[int, int, str | None]]:
        raise NotImplementedError


class SimpleTextChunker(_BaseChunker):
    """Fixed windows of ``chunk_size`` characters; each next window starts ``overlap``
    characters before the previous one ended. Windows of only whitespace are dropped.
    As in the reference, text is normalised before it is cut (``normalize_first``)."""

    normalize_first = True

    def __init__(self, chunk_size: int = 500, overlap: int = 0):
        _check_sizes(chunk_size, overlap, "overlap")
        self.chunk_size = chunk_size
        self.overlap = overlap

    def _spans(self, text: str, heading: str | None) -> Iterator[tuple[int, int, str | None]]:
        # Headings are only looked up in the text when the loader gave none for the section.
        headings = find_headings(text) if heading is None else []
        starts = [h.start for h in headings]
        start, n = 0, len(text)
        while start < n:
            end = min(start + self.chunk_size, n)
            if not text[start:end].isspace():
                at = bisect.bisect_right(starts, start) - 1
                yield start, end, headings[at].label if at >= 0 else heading
            if end == n:
                break
            start = end - self.overlap


class StructureAwareChunker(_BaseChunker):
    """Split at headings, then blank lines, then sentences; pack pieces up to ``chunk_size``.

    * A chunk never crosses a heading (markdown ``#``/setext headings found in the text, or the
      section's ``heading`` from the loader); its heading path goes to ``metadata["heading"]``.
    * Paragraphs are kept whole when they fit, else split into sentences (``. ! ?`` followed by
      whitespace or the end, and ``。！？；``, with closing quotes/brackets kept). A sentence is cut
      only when it alone is longer than ``chunk_size``: at whitespace if possible, else hard.
    * Each chunk after the first in a block starts with up to ``chunk_overlap`` characters of the
      previous chunk, from a sentence start when one is in reach (else a word start).
    * Every chunk has at most ``chunk_size`` characters and is an exact, stripped slice.
    """

    def __init__(self, chunk_size: int = 500, chunk_overlap: int = 50):
        _check_sizes(chunk_size, chunk_overlap, "chunk_overlap")
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap

    def chunk_sections(self, sections: list[Section]) -> list[Section]:
        """As :meth:`_BaseChunker.chunk_sections`, a section that is only its heading (a DOCX
        or HTML title above the first sub-heading) opening the next section of its page."""
        return super().chunk_sections(_join_bare_headings(sections))

    def _spans(self, text: str, heading: str | None) -> Iterator[tuple[int, int, str | None]]:
        for lo, body, hi, label in _heading_blocks(text, heading, detect=heading is None):
            for start, end in self._pack(text, self._units(text, lo, hi), body):
                yield start, end, label

    def _units(self, text: str, lo: int, hi: int) -> Iterator[Span]:
        """Paragraphs that fit, else their sentences, else pieces of an over-long sentence."""
        pos = lo
        for m in _PARAGRAPH_BREAK.finditer(text, lo, hi):
            yield from self._paragraph(text, pos, m.start(), self.chunk_size)
            pos = m.end()
        yield from self._paragraph(text, pos, hi, self.chunk_size)

    def _paragraph(self, text: str, lo: int, hi: int, size: int) -> Iterator[Span]:
        lo, hi = _strip(text, lo, hi)
        if lo >= hi:
            return
        if hi - lo <= size:
            yield lo, hi
            return
        pos = lo
        for m in _SENTENCE_END.finditer(text, lo, hi):
            yield from self._sentence(text, pos, m.end(), size)
            pos = m.end()
        yield from self._sentence(text, pos, hi, size)

    @staticmethod
    def _sentence(text: str, lo: int, hi: int, size: int) -> Iterator[Span]:
        lo, hi = _strip(text, lo, hi)
        while hi - lo > size:
            limit = lo + size
            cut = max(
                text.rfind(" ", lo + 1, limit + 1),
                text.rfind("\n", lo + 1, limit + 1),
                text.rfind("\t", lo + 1, limit + 1),
            )
            if cut <= lo:
                cut = limit
            yield _strip(text, lo, cut)
            lo, hi = _strip(text, cut, hi)
        if lo < hi:
            yield lo, hi

    def _pack(self, text: str, units: Iterator[Span], body: int) -> Iterator[Span]:
        start = end = -1
        for lo, hi in units:
            if start < 0:
                start, end = lo, hi
            elif hi - start <= self.chunk_size:
                end = hi
            else:
                yield start, end
                start, end = self._overlap_start(text, max(start, body), end, lo, hi), hi
        if start >= 0:
            yield start, end

    def _overlap_start(self, text: str, prev_start: int, prev_end: int, lo: int, hi: int) -> int:
        """Where the chunk holding unit [lo, hi) starts once the previous chunk's tail is added."""
        if not self.chunk_overlap:
            return lo
        floor = max(prev_start + 1, prev_end - self.chunk_overlap, hi - self.chunk_size)
        if floor >= prev_end:
            return lo
        # The earliest sentence start (after a terminator or a paragraph break) in the window.
        scan = max(prev_start, floor - 8)
        best = prev_end
        for pattern in (_SENTENCE_END, _PARAGRAPH_BREAK):
            for m in pattern.finditer(text, scan, prev_end):
                candidate = _strip(text, m.end(), prev_end)[0]
                if candidate >= floor:
                    best = min(best, candidate)
                    break
        if best < prev_end:
            return best
        # No whole sentence fits: start at a word, or hard at the floor (e.g. Chinese).
        if text[floor - 1].isspace():
            candidate = floor
        else:
            space = _SPACE.search(text, floor, prev_end)
            candidate = _strip(text, space.end() if space else floor, prev_end)[0]
        return candidate if candidate < prev_end else lo


def _chunker_name(chunker: str) -> str:
    name = str(chunker).strip()
    if is_class_path(name):
        return name
    name = name.lower()
    if name not in CHUNKERS:
        raise InvalidOptionError(
            f"Unknown chunker {chunker!r}: choose one of {', '.join(CHUNKERS)}, "
            "or give a class path as 'package.module:Class'"
        )
    return name


def make_chunker(
    chunker: str = "structure", chunk_size: int = 500, chunk_overlap: int = 50
) -> TextChunkerProtocol | SectionChunkerProtocol:
    """Build the chunker named in ``rag.chunker`` (a registered name or a
    ``package.module:Class`` path) with ``limits.chunk_size``/``chunk_overlap``."""
    name = _chunker_name(chunker)
    if name == "simple":
        return SimpleTextChunker(chunk_size=chunk_size, overlap=chunk_overlap)
    if name == "structure":
        return StructureAwareChunker(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    built: TextChunkerProtocol | SectionChunkerProtocol = load_class(
        name, CHUNKERS, kind="chunker"
    )(chunk_size, chunk_overlap)
    return built


def make_normalizer(chunker: str = "structure") -> StructurePreservingNormalizer:
    """The normalizer to run on text before ``chunker`` (line breaks must survive for both)."""
    _chunker_name(chunker)
    return StructurePreservingNormalizer()
