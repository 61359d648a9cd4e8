"""Which line a hit is for: :func:`locate_lines` places each shown hit on the line of its chunk
holding the most query-term weight (each term weighs its idf in the keyword index,
:class:`TermIdf`), read from the file itself when it still has the indexed bytes (a stored
chunk's text has its whitespace collapsed), so ``$EDITOR +LINE path`` and ``kb get path:LINE``
land on the line the hit is for. How a place is written is :mod:`kbcli.search.place`.
"""

from __future__ import annotations

import os
import re
import stat
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbcli.errors import KBError
from kbcli.filters.model import and_filters
from kbcli.ingest.lines import clean_line, file_lines
from kbcli.protocols import DocumentCatalog, KeywordIndex, supports
from kbcli.search.phrases import flat, parse_query
from kbcli.search.place import hit_page
from kbcli.search.retrievers import takes_scope
from kbcli.system.paths import source_path
from kbcli.text.analysis import Analyzer, keyword_counts
from kbcli.text.bm25 import bm25_idf
from kbcli.types import LineMatch, SearchResult, note_author
from kbcli.views import KnowledgeView, Source

#: Query terms weighed to place a hit (one keyword lookup each, only for terms a shown hit holds).
MAX_PLACED_TERMS = 64
#: A file larger than this is not read again to place a hit: its chunk's first line stands.
MAX_PLACE_BYTES = 8 << 20
#: Bytes of files read to place the hits of one search, at most (later hits keep their chunk's
#: first line).
MAX_PLACE_TOTAL = 64 << 20
#: Lines of a chunk weighed, and characters of a line analysed, at most.
MAX_PLACE_LINES = 2000
MAX_LINE_CHARS = 4000
#: Neighbours of the best line kept for a snippet (blank lines skipped), and their length.
CONTEXT_ABOVE = 1
CONTEXT_BELOW = 2
CONTEXT_CHARS = 1000

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\u2028\u2029\ufeff]")


class _Unaskable(Exception):
    """The keyword index cannot be asked for this term alone (no text analyses to it)."""


class TermIdf:
    """The BM25 idf of terms in a store's keyword index inside ``filter`` (and an access
    ``scope``, whose statistics are its own), looked up with one single-term keyword search per
    term (``k1 = b = 0``, no source part, so the best hit scores exactly ``idf``) and kept. A
    composite term (a CJK bigram, ``foo_bar``) is looked up with its parts and their weights
    subtracted. ``text`` is what the terms came from (a stemmed term is asked with its word)."""

    def __init__(
        self,
        store: object,
        analyzer: Analyzer,
        text: str,
        filter: dict[str, Any] | None = None,
        scope: dict[str, Any] | None = None,
    ) -> None:
        self.store = store
        self.analyzer = analyzer
        self.filter = filter
        self.scope = scope
        self._surface = re.findall(r"\w+", unicodedata.normalize("NFKC", text).lower())
        self._idf: dict[str, float | None] = {}  # None: in no passage inside the filter

    def weights(self, terms: Iterable[str]) -> dict[str, float]:
        """Each term's idf; a term no passage inside the filter holds weighs the most any term
        can (the idf of a term in no chunk); a term the index cannot be asked about alone is
        left out. Without a keyword index every term weighs 1."""
        terms = list(terms)
        if not supports(self.store, KeywordIndex):
            return {t: 1.0 for t in terms}
        found: dict[str, float | None] = {}
        for term in terms:
            try:
                found[term] = self._lookup(term)
            except _Unaskable:
                continue
        if supports(self.store, DocumentCatalog):
            absent = bm25_idf(self.store.count(self.scope), 0)
        else:
            absent = max((w for w in found.values() if w), default=1.0)
        return {t: absent if idf is None else idf for t, idf in found.items()}

    def _search(self, text: str) -> list[SearchResult]:
        store = self.store
        if not supports(store, KeywordIndex):
            return []
        if self.scope is None:
            return store.keyword_search(text, 1, self.filter, k1=0.0, b=0.0, source_weight=0.0)
        if takes_scope(store):
            return store.keyword_search(
                text, 1, self.filter, k1=0.0, b=0.0, source_weight=0.0, scope=self.scope
            )
        both = and_filters(self.scope, self.filter)
        return store.keyword_search(text, 1, both, k1=0.0, b=0.0, source_weight=0.0)

    def _lookup(self, term: str, seen: frozenset[str] = frozenset()) -> float | None:
        """``idf`` of ``term`` inside the filter; None when no passage there holds it."""
        if term in self._idf:
            return self._idf[term]
        probe, parts = self._probe(term)
        if probe is None or term in seen:
            raise _Unaskable(term)
        hits = self._search(probe)
        value: float | None
        if not hits:
            value = None
        elif parts == Counter({term: 1}):
            value = hits[0].score
        elif term not in keyword_counts(
            self.analyzer, hits[0].document.text, hits[0].document.metadata
        ):
            value = None  # the best hit holds the parts, not the term itself
        else:  # every passage holding the term holds its parts: the best one holds all
            others = sum(
                (self._lookup(part, seen | {term}) or 0.0) * count
                for part, count in parts.items()
                if part != term
            )
            value = max(0.0, hits[0].score - others) / parts[term]
        self._idf[term] = value
        return value

    def _probe(self, term: str) -> tuple[str | None, Counter[str]]:
        """A text whose analysis is ``term`` alone, else the term itself when it is among its
        own terms (composite), else None."""
        parts = self.analyzer.query_counts(term)
        if parts == Counter({term: 1}):
            return term, parts
        for word in self._surface:  # the stemmer is not idempotent: ask with the word itself
            if self.analyzer.query_counts(word) == Counter({term: 1}):
                return word, Counter({term: 1})
        return (term, parts) if term in parts else (None, parts)


def best_line(
    lines: Sequence[str],
    weights: Mapping[str, float],
    analyzer: Analyzer,
    phrases: Sequence[str] = (),
) -> int | None:
    """The index of the line of ``lines`` holding the most query-term weight: the weights of
    the distinct terms of ``weights`` it holds (as ``analyzer`` splits it), plus, for each of
    ``phrases`` the line holds whole (case and spacing ignored), the weight of that phrase's
    terms again. Ties go to the earliest line; None when no line holds a query term.

    At most :data:`MAX_PLACE_LINES` lines and :data:`MAX_LINE_CHARS` characters of each are
    read."""
    lines = lines[:MAX_PLACE_LINES]
    held = [{t for t in analyzer.terms(line[:MAX_LINE_CHARS]) if t in weights} for line in lines]
    return _best(lines, held, weights, analyzer, phrases)


def _best(
    lines: Sequence[str],
    held: Sequence[set[str]],
    weights: Mapping[str, float],
    analyzer: Analyzer,
    phrases: Sequence[str],
) -> int | None:
    """:func:`best_line` over ``lines`` whose query terms (``held``) are known."""
    wanted = [(flat(p), [t for t in analyzer.query_terms(p) if t in weights]) for p in phrases]
    best, best_score = None, 0.0
    for index, terms in enumerate(held):
        score = sum(weights.get(t, 0.0) for t in terms)
        if score and wanted:
            line = flat(lines[index][:MAX_LINE_CHARS])
            score += sum(sum(weights[t] for t in ts) for p, ts in wanted if p in line)
        if score > best_score:
            best, best_score = index, score
    return best


@dataclass
class _Region:
    """A chunk's lines as its file numbers them: ``lines`` (the file's, or the chunk's own),
    ``first`` the number of ``lines[0]``, and the chunk's span inside them."""

    lines: list[str]
    first: int
    start: int  # index in lines of the chunk's first line
    stop: int  # index past its last


def locate_lines(
    kb: Source | KnowledgeView,
    query: str,
    results: Sequence[SearchResult],
    filter: dict[str, Any] | None = None,
    scope: dict[str, Any] | None = None,
    *,
    weights: Mapping[str, float] | None = None,
) -> None:
    """Set each result's ``match``: the line of its chunk with the most query-term weight
    (:func:`best_line`; a semantic hit with no term in common keeps its chunk's first line)
    and its neighbours for a snippet.

    A stored chunk's text has its whitespace collapsed, so its lines are read from its file
    (decoded as the text loader decodes it; a regular file at most :data:`MAX_PLACE_BYTES`,
    at most :data:`MAX_PLACE_TOTAL` bytes per call, each file once) while the lines the chunk
    says it spans still hold its text; else from the chunk's text when it kept its line
    breaks; otherwise (a page of a PDF, a file changed there, another format) the result is
    left as it is. Only the hits given are read: call it for the hits shown, never a pool.

    ``kb`` is a knowledge base or a view of one (its scope then confines the idf too);
    ``weights`` are the terms' weights when the caller has them (``kb ask``'s), else each
    term a shown line holds is weighed by its idf inside ``filter`` (:class:`TermIdf`).
    An agent's note (``note_by``) is never placed: it names a source, it is no part of it.
    """
    if not results:
        return
    base: Source
    if isinstance(kb, KnowledgeView):
        base, scope = kb.kb, and_filters(kb.filter, scope)
    else:
        base = kb
    analyzer = kb.analyzer
    parsed = parse_query(query)
    terms = set(weights) if weights is not None else set(analyzer.query_terms(parsed.text or query))
    if not terms:
        return
    budget = [MAX_PLACE_TOTAL]
    files: dict[str, list[str] | None] = {}
    regions: list[tuple[SearchResult, _Region, list[set[str]]]] = []
    for result in results:
        region = _region(result, files, budget)
        if region is None:
            continue
        span = region.lines[region.start : region.stop][:MAX_PLACE_LINES]
        held = [{t for t in analyzer.terms(line[:MAX_LINE_CHARS]) if t in terms} for line in span]
        regions.append((result, region, held))
    if weights is None:
        present = {t for _, _, held in regions for line in held for t in line}
        if len(present) > 1:
            ordered = [t for t in analyzer.query_terms(parsed.text or query) if t in present]
            idf = TermIdf(base.store, analyzer, query, filter, scope)
            known = idf.weights(ordered[:MAX_PLACED_TERMS])
            weights = {t: known.get(t, 1.0) for t in present}
        else:
            weights = {t: 1.0 for t in present}
    for result, region, held in regions:
        span = region.lines[region.start : region.stop]
        found = _best(span, held, weights, analyzer, parsed.phrases) if weights else None
        index = region.start + (found if found is not None else 0)
        result.match = LineMatch(
            region.first + index,
            _context(region, index, matched=found is not None),
            matched=found is not None,
        )


def _region(
    result: SearchResult, files: dict[str, list[str] | None], budget: list[int]
) -> _Region | None:
    """The lines of ``result``'s chunk (see :func:`locate_lines`), or None."""
    meta = result.document.metadata
    first, last = _number(meta.get("line")), _number(meta.get("line_end", meta.get("line")))
    if first is None or last is None or last < first or hit_page(meta) is not None:
        return None
    if note_author(meta) is not None:  # a note names a source; it is no part of that file
        return None
    source = meta.get("source")
    text = result.document.text
    if isinstance(source, str):
        if source not in files:
            files[source] = _file_lines(source, budget)
        lines = files[source]
        if lines is not None and last <= len(lines) and _holds(lines[first - 1 : last], text):
            return _Region(lines, 1, first - 1, last)
    own = text.split("\n")
    if len(own) > 1 and len(own) == last - first + 1:  # the chunk kept its line breaks
        return _Region(own, first, 0, len(own))
    return None


def _file_lines(source: str, budget: list[int]) -> list[str] | None:
    """The lines of the file at ``source`` as an editor numbers them, decoded as the text
    loader decodes it, when it is a regular file that fits what is left of ``budget`` (and
    :data:`MAX_PLACE_BYTES`); None otherwise."""
    path = source_path(source)
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    limit = min(MAX_PLACE_BYTES, budget[0])
    if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
        return None
    budget[0] -= info.st_size
    try:
        return file_lines(Path(path), max_bytes=limit)
    except (OSError, KBError):  # not text (a binary format), too large now, unreadable
        return None


def _holds(lines: Sequence[str], text: str) -> bool:
    """True when the file ``lines`` still hold the chunk ``text`` (whitespace and the
    characters ingest cleans ignored): the file has not changed there since it was indexed."""
    flat = " ".join(text.split())
    return bool(flat) and flat in " ".join(" ".join(clean_line(n) for n in lines).split())


def _context(region: _Region, index: int, matched: bool) -> tuple[tuple[int, str], ...]:
    """Line ``index`` of ``region`` with :data:`CONTEXT_ABOVE` non-blank lines above it (when
    it matched; from the chunk's first line otherwise) and :data:`CONTEXT_BELOW` below (more
    below when none is above), each without control characters and cut to
    :data:`CONTEXT_CHARS`."""
    lines = region.lines
    above: list[int] = []
    at = index - 1
    while matched and at >= 0 and len(above) < CONTEXT_ABOVE:
        if lines[at].strip():
            above.insert(0, at)
        at -= 1
    below: list[int] = []
    want = CONTEXT_BELOW + CONTEXT_ABOVE - len(above)
    at = index + 1
    while at < len(lines) and len(below) < want and at - index <= 4 * want:
        if lines[at].strip():
            below.append(at)
        at += 1
    return tuple(
        (region.first + n, _CONTROL.sub("", lines[n][:CONTEXT_CHARS]).expandtabs(4))
        for n in (*above, index, *below)
    )


def _number(value: Any) -> int | None:
    """``value`` when it is a line number (a whole number from 1), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None
