"""Reading an indexed file by its own line numbers, or one chunk by id: ``kb get`` and the
``knowledge_get`` tool.

``PATH#page=N`` (the location ``kb search`` gives a hit on a page of a PDF or an image) shows
that page: the lines its indexed chunks span.

Line numbers are those the chunks record at ingest (``line``/``line_end``, computed from their
``char_start`` offsets in the file's text as loaded, and for text files mapped onto the
file's own lines by :mod:`kbcli.ingest.lines`), so ``kb search`` output (``path:line``),
``kb get path:line``, ``knowledge_get`` and ``$EDITOR +LINE path`` agree. When the file on disk
still has the bytes that were indexed (its SHA-256 matches the file ledger) its text is read
again and shown line by line (a text file as an editor numbers it, other formats as ingest
loaded them); otherwise (changed, moved, or a store without a ledger) the indexed chunks are
shown, each at the line it starts on.

Every read goes through a :class:`~kbcli.views.KnowledgeView` (a scope, or all of it): a file or
chunk the scope hides is not found, exactly like an unknown one, and a file is read again from
disk only when every indexed chunk of it is in the scope (else the chunks in scope are shown).

A file is named by its path (as given, then absolute), or by the end of it when that end is
unique: ``lsof.md`` or ``common/lsof.md`` for ``/notes/common/lsof.md``, on whole path
components (``sof.md`` is not its end). An end that several files in the scope share is
refused, naming at most :data:`MAX_CANDIDATES` of them, all in the scope
(:func:`path_suffix_match`, the rule of ``kb get``, ``knowledge_get`` and ``kb eval``).
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbcli.agent.seams import FileSource
from kbcli.errors import InvalidOptionError, KBError, NotFoundError
from kbcli.ingest import DefaultDocumentLoader
from kbcli.ingest.lines import file_lines, is_text_file
from kbcli.protocols import DocumentCatalog, DocumentLoaderProtocol, FileLedger, supports
from kbcli.search.freshness import check_hits, hash_limit, store_of
from kbcli.system.paths import source_forms, source_name, source_path
from kbcli.types import Document, Freshness, SearchResult, note_author
from kbcli.views import KnowledgeView, Reader, Source, as_view

DEFAULT_COUNT = 20  # lines shown from PATH:LINE when no COUNT is given
MAX_CANDIDATES = 10  # files named when the end of a path matches several
SCOPE_BATCH = 500  # sources checked against a scope in one query


class AmbiguousPathError(InvalidOptionError):
    """The end of a path matches several indexed files (``candidates``: the first few)."""

    def __init__(self, path: str, candidates: list[str], more: bool):
        count = f"more than {len(candidates)}" if more else str(len(candidates))
        shown = ", ".join(candidates) + (", ..." if more else "")
        super().__init__(f"{path!r} matches {count} indexed files ({shown}): give more of the path")
        self.path = path
        self.candidates = candidates


_TARGET = re.compile(r"^(?P<path>.*?)(?::(?P<line>\d+)(?::(?P<count>\d+))?)?$", re.DOTALL)
_PAGE = re.compile(r"^(?P<path>.+)#page=(?P<page>\d+)$", re.DOTALL)


@dataclass
class Shown:
    """What ``kb get`` prints: numbered lines of a file (``origin`` ``file``), of its chunks
    (``chunks``: one entry per chunk, numbered by its first line; ``documents`` holds those
    chunks) or of one chunk (``chunk``)."""

    source: str | None
    origin: str
    lines: list[tuple[int, str]]
    total: int
    id: str | None = None
    metadata: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    documents: list[Document] = field(default_factory=list)
    following: int | None = None  # chunks: the first line of the next chunk past the range
    freshness: Freshness | None = None  # the file's (a chunk's) state against the disk

    def to_dict(self) -> dict[str, Any]:
        """The ``kb get --json`` object (``freshness``: ``{state, indexed_at}`` or null)."""
        return {
            "source": self.source,
            "origin": self.origin,
            "id": self.id,
            "metadata": self.metadata,
            "start_line": self.lines[0][0] if self.lines else None,
            "end_line": self.lines[-1][0] if self.lines else None,
            "total_lines": self.total,
            "lines": [{"line": n, "text": t} for n, t in self.lines],
            "freshness": None if self.freshness is None else self.freshness.as_json(),
        }


def freshness_of(kb: Reader, doc: Document) -> Freshness | None:
    """The freshness of ``doc`` (a chunk) as a search hit would have it (one ledger lookup,
    one stat; :func:`~kbcli.search.freshness.check_hits`)."""
    hit = SearchResult(doc, 0.0)
    view = as_view(kb)
    check_hits(store_of(view), [hit], limit=hash_limit(getattr(view.kb, "config", None)))
    return hit.freshness


class LinesCache:
    """The lines of the last few files read again, by source, SHA-256 and loader, so paging
    through one file (a PDF's parse above all) reads it once. At most ``files`` entries and
    about ``chars`` characters are kept; safe to share between threads (and scopes: a file is
    read again only when the reader may see all of it)."""

    def __init__(self, files: int = 4, chars: int = 16_000_000):
        self.files = files
        self.chars = chars
        self._kept: OrderedDict[tuple[str, ...], tuple[list[str], int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, ...]) -> list[str] | None:
        """The lines kept for ``key``, or None."""
        with self._lock:
            entry = self._kept.get(key)
            if entry is None:
                return None
            self._kept.move_to_end(key)
            return entry[0]

    def put(self, key: tuple[str, ...], lines: list[str]) -> None:
        """Keep ``lines``; drop the least recently read files beyond the bounds."""
        size = sum(len(line) for line in lines)
        if size > self.chars:
            return
        with self._lock:
            self._kept[key] = (lines, size)
            self._kept.move_to_end(key)
            while (
                len(self._kept) > self.files
                or sum(kept for _, kept in self._kept.values()) > self.chars
            ):
                self._kept.popitem(last=False)


SHARED = LinesCache()  # what knowledge_get tools use unless given their own


def parse_target(target: str) -> tuple[str, int | None, int | None]:
    """``"docs/a.md:40:10"`` -> ``("docs/a.md", 40, 10)``; ``"docs/a.md"`` -> no range."""
    match = _TARGET.match(target)
    assert match is not None  # the pattern matches every string
    line = int(match["line"]) if match["line"] else None
    count = int(match["count"]) if match["count"] else None
    if line == 0 or count == 0:
        raise InvalidOptionError(f"Lines count from 1 in {target!r}: use PATH:LINE[:COUNT]")
    return match["path"], line, count


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def find_source(view: KnowledgeView, path: str) -> tuple[str, list[Document]] | None:
    """``(source, chunks in scope)`` of the indexed file at ``path`` (as given, then as an
    absolute path; a name that is not UTF-8 as kb records it; then the one source in the
    scope that ends with it), or None when nothing in the scope has that source. Notes that
    name the source are not the file's chunks. Raises :class:`AmbiguousPathError` when the end
    matches several."""
    candidates = dict.fromkeys([source_name(path), *source_forms(path)])
    for source in candidates:
        docs = [d for d in view.iter_documents(source=source) if note_author(d.metadata) is None]
        if docs:
            return source, docs
    found = path_suffix_match(path, _sources_ending(view, path))
    if found is None:
        return None
    docs = [d for d in view.iter_documents(source=found) if note_author(d.metadata) is None]
    return (found, docs) if docs else None


def path_suffix(path: str) -> str | None:
    """``path`` as the end of a source (``./common/lsof.md`` -> ``common/lsof.md``), or None
    when it cannot be one: empty, absolute, from the home folder, or holding ``..``."""
    text = source_name(path)
    if os.sep != "/":
        text = text.replace(os.sep, "/")
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if not parts or text.startswith(("/", "~")) or ".." in parts:
        return None
    return "/".join(parts)


def _ends_with(source: str, suffix: str) -> bool:
    if os.sep != "/":
        source = source.replace(os.sep, "/")
    return source == suffix or source.endswith("/" + suffix)


def path_suffix_match(path: str, sources: Iterable[str]) -> str | None:
    """The one source among ``sources`` whose path ends with ``path`` on whole components
    (``lsof.md`` and ``common/lsof.md`` end ``/notes/common/lsof.md``; ``sof.md`` does not), or
    None when none does. Several: :class:`AmbiguousPathError` naming the first
    :data:`MAX_CANDIDATES` (``sources`` is read no further than that)."""
    suffix = path_suffix(path)
    if suffix is None:
        return None
    found: list[str] = []
    for source in sources:
        if not _ends_with(source, suffix) or source in found:
            continue
        if len(found) == MAX_CANDIDATES:
            raise AmbiguousPathError(path, sorted(found), more=True)
        found.append(source)
    if len(found) > 1:
        raise AmbiguousPathError(path, sorted(found), more=False)
    return found[0] if found else None


def _sources_ending(view: KnowledgeView, path: str) -> Iterator[str]:
    """The indexed sources in ``view``'s scope that end with ``path``, sorted within each
    batch checked against the scope (a scope never yields a source it hides)."""
    suffix = path_suffix(path)
    if suffix is None:
        return
    store = view.kb.store
    if supports(store, DocumentCatalog):
        named = (name for name, _ in store.sources())
    else:  # a reference store: its documents, in the scope already
        named = (name for name, _ in view.sources())
    matching = [name for name in named if _ends_with(name, suffix)]
    if view.filter is None or not supports(store, DocumentCatalog):
        yield from matching
        return
    for start in range(0, len(matching), SCOPE_BATCH):
        batch = matching[start : start + SCOPE_BATCH]
        seen = {
            doc.metadata.get("source") for doc in view.iter_documents({"source": {"$in": batch}})
        }
        yield from sorted(s for s in seen if isinstance(s, str))


def _order(doc: Document) -> tuple[int, int]:
    meta = doc.metadata
    start, index = meta.get("char_start"), meta.get("chunk_index")
    return (start if isinstance(start, int) else -1, index if isinstance(index, int) else -1)


def chunk_lines(doc: Document, place: int) -> tuple[int, int]:
    """The first and last line a chunk covers, by its ``line``/``line_end``; a chunk without
    them (added by text, not from a file) counts as the line ``place``, its place among the
    file's chunks."""
    meta = doc.metadata
    start = meta.get("line")
    start = start if isinstance(start, int) else place
    stop = meta.get("line_end")
    return start, max(start, stop) if isinstance(stop, int) else start


def _file_lines(kb: Source, source: str, cache: LinesCache | None) -> list[str] | None:
    """The file's lines as ingest loaded them, when it still has the indexed bytes."""
    store = kb.store
    if not supports(store, FileLedger):
        return None
    record = store.file_records().get(source)
    path = Path(source_path(source))
    try:
        if record is None or not path.is_file():
            return None
        digest = _sha256(path)
        if digest != record.sha256:
            return None
        if not isinstance(kb, FileSource):
            return None
        loader = kb.loader
        key = (source, digest, type(loader).__qualname__, str(getattr(loader, "encoding", "")))
        kept = cache.get(key) if cache is not None else None
        if kept is not None:
            return kept
        if isinstance(loader, DefaultDocumentLoader) and is_text_file(path):
            lines = file_lines(path, loader.encoding)  # numbered as an editor numbers them
        elif isinstance(loader, DocumentLoaderProtocol):
            lines = loader.load(path).split("\n")
        else:
            return None
    except (OSError, KBError):  # unreadable now: fall back to the indexed chunks
        return None
    if cache is not None:
        cache.put(key, lines)
    return lines


def read_chunk(kb: Reader, chunk_id: str) -> Shown | None:
    """One chunk by id (``origin`` ``chunk``), or None when it is unknown or hidden."""
    docs = as_view(kb).get([chunk_id])
    if not docs:
        return None
    doc = docs[0]
    meta = doc.metadata
    line = meta.get("line")
    source = meta.get("source")
    fresh = freshness_of(kb, doc)
    notes = []
    if fresh is not None and fresh.stale:
        gone = "is gone" if fresh.state == "missing" else "changed"
        notes.append(
            f"{source} {gone} since this chunk was indexed ({fresh.indexed_at}): run kb "
            "ingest to refresh"
        )
    return Shown(
        str(source) if source is not None else None,
        "chunk",
        [(line if isinstance(line, int) else 1, doc.text)],
        1,
        id=doc.id,
        metadata=meta,
        notes=notes,
        documents=[doc],
        freshness=fresh,
    )


def read_file(
    kb: Reader,
    path: str,
    first: int = 1,
    last: int | None = None,
    *,
    cache: LinesCache | None = None,
) -> Shown:
    """Lines ``first`` to ``last`` (inclusive; None: to the end) of the indexed file at
    ``path`` in ``kb`` (a knowledge base or a scope); see the module docstring.

    Raises :class:`NotFoundError` for a file that is not indexed or not in the scope, and
    :class:`InvalidOptionError` for a range past its end.
    """
    view = as_view(kb)
    found = find_source(view, path)
    if found is None:
        raise NotFoundError(f"No indexed file {path!r}: see 'kb list' for sources and ids")
    return _read(view, *found, first, last, cache)


def _read(
    view: KnowledgeView,
    source: str,
    docs: list[Document],
    first: int,
    last: int | None,
    cache: LinesCache | None,
) -> Shown:
    # A file part of which is outside the scope is never read again: only its chunks in it.
    whole = view.filter is None or as_view(view.kb).count({"source": source}) == len(docs)
    # Recognised text (OCR) is shown as indexed: loading the file again would recognise it again.
    recognised = any(doc.metadata.get("ocr") is True for doc in docs)
    lines = _file_lines(view.kb, source, cache) if whole and not recognised else None
    fresh = freshness_of(view, docs[0]) if docs else None
    if lines is not None:
        total = len(lines)
        if first > total:
            raise InvalidOptionError(f"Line {first} is past the end of {source} ({total} lines)")
        end = total if last is None else min(last, total)
        numbered = [(n, lines[n - 1]) for n in range(first, end + 1)]
        return Shown(source, "file", numbered, total, freshness=fresh)
    chosen, entries, later = [], [], []
    for place, doc in enumerate(sorted(docs, key=_order), start=1):
        start, stop = chunk_lines(doc, place)
        if stop >= first and (last is None or start <= last):
            chosen.append(doc)
            entries.append((start, doc.text))
        elif last is not None and start > last:
            later.append(start)
    if not chosen:
        raise InvalidOptionError(f"No indexed chunk of {source} covers line {first}")
    notes = []
    if recognised:
        notes.append(f"{source}: showing the text OCR recognised when it was indexed, by chunk")
    elif whole:
        notes.append(
            f"{source} changed or is gone since it was indexed: showing its indexed chunks "
            "(run kb ingest to refresh)"
        )
    return Shown(
        source,
        "chunks",
        entries,
        len(docs),
        notes=notes,
        documents=chosen,
        following=min(later, default=None),
        freshness=fresh,
    )


def page_lines(source: str, docs: list[Document], page: int) -> tuple[int, int]:
    """The first and last line the chunks of page ``page`` of ``source`` span (``docs``: its
    chunks). InvalidOptionError, naming the pages that are indexed, when none is on it."""
    on_page = [d for d in docs if d.metadata.get("page") == page]
    if not on_page:
        pages = sorted({p for d in docs if isinstance(p := d.metadata.get("page"), int)})
        listed = ", ".join(map(str, pages[:10])) + (", ..." if len(pages) > 10 else "")
        held = f"its indexed pages are {listed}" if pages else "it was not read by pages"
        raise InvalidOptionError(f"No indexed text on page {page} of {source}: {held}")
    place = {id(d): n for n, d in enumerate(sorted(docs, key=_order), start=1)}
    spans = [chunk_lines(d, place[id(d)]) for d in on_page]
    return min(a for a, _ in spans), max(b for _, b in spans)


def find_page(view: KnowledgeView, target: str) -> tuple[str, list[Document], int] | None:
    """``(source, its chunks in scope, page)`` when ``target`` is ``PATH#page=N`` of an
    indexed file (and is not itself the name of one), else None."""
    paged = _PAGE.match(target)
    if paged is None or find_source(view, target) is not None:
        return None
    found = find_source(view, paged["path"])
    return None if found is None else (*found, int(paged["page"]))


def read_page(view: KnowledgeView, source: str, docs: list[Document], page: int) -> Shown:
    """The text of page ``page`` of the indexed file ``source`` (a PDF's page, an image's
    frame; what ``path#page=N`` names): the lines its chunks span (:func:`page_lines`), read
    as :func:`read_file` reads them."""
    first, last = page_lines(source, docs, page)
    shown = _read(view, source, docs, first, last, None)
    if shown.origin == "chunks":  # only the page's own chunks, not a neighbour sharing a line
        kept = [
            (e, d) for e, d in zip(shown.lines, shown.documents) if d.metadata.get("page") == page
        ]
        shown.lines = [e for e, _ in kept]
        shown.documents = [d for _, d in kept]
    return shown


def read_target(kb: Reader, target: str) -> Shown:
    """What ``kb get TARGET`` shows (see the module docstring); raises NotFoundError."""
    if target and "/" not in target and ":" not in target:
        shown = read_chunk(kb, target)
        if shown is not None:
            return shown
    view = as_view(kb)
    paged = find_page(view, target)
    if paged is not None:
        return read_page(view, *paged)
    found = find_source(view, target)
    line = count = None
    if found is None:
        path, line, count = parse_target(target)
        found = find_source(view, path) if path else None
    if found is None:
        raise NotFoundError(
            f"No indexed file or chunk id {target!r}: see 'kb list' for sources and ids"
        )
    first = line or 1
    last = None if line is None else first + (count or DEFAULT_COUNT) - 1
    return _read(view, *found, first, last, None)
