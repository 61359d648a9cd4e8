"""What a search box promises on top of ranking: ``"quoted phrases"`` that must appear,
``-word`` exclusions, results by file, and where each hit is (``path:line``).

:func:`parse_query` splits a query into the text the retrievers rank, the phrases every hit
must contain and the words no hit may contain; :func:`search` runs it through a knowledge base
(recalling a deeper pool when phrases, exclusions or grouping can drop hits) and returns
:class:`Hit` objects, one per chunk or one per file (its best chunk and how many of its chunks
matched).

Where a hit is (:func:`locate_lines`): the line of its chunk holding the most query-term
weight (each term weighs its idf in the keyword index, :class:`TermIdf`), read from the file
itself when it still has the indexed bytes (a stored chunk's text has its whitespace
collapsed), so ``$EDITOR +LINE path`` and ``kb get path:LINE`` land on the line the hit is for;
a chunk read from a page (a PDF's, an image's) is located by its page, ``path#page=N``
(:func:`location`).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbcli.types import LineMatch, SearchOptions, SearchResult, note_author, note_label

if TYPE_CHECKING:  # pragma: no cover
    from kbcli.views import Source

UNITS = ("file", "chunk")
# Extra chunks recalled per wanted hit when hits may be dropped or grouped afterwards. When
# the pool still leaves fewer than k hits (one long file fills it, or few chunks hold the
# phrase) and more chunks matched, the pool grows by POOL_FACTOR up to POOL_DEEPEST chunks.
POOL_FACTOR = 4
POOL_MIN = 50
POOL_MAX = 1000
POOL_DEEPEST = 16000

_PHRASE = re.compile(r'"([^"]*)"')
_SPACE = re.compile(r"\s+")


@dataclass
class ParsedQuery:
    """A query split into the ranked ``text``, required ``phrases`` and ``excluded`` words."""

    text: str
    phrases: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)

    @property
    def plain(self) -> bool:
        """True when nothing beyond ranking is asked for."""
        return not self.phrases and not self.excluded


def parse_query(query: str) -> ParsedQuery:
    """``'"reset link" password -sms'`` -> text ``reset link password``, phrases
    ``["reset link"]``, excluded ``["sms"]``.

    A word starting with ``-`` (and longer than the dash) is excluded; an unbalanced quote is
    taken literally. A query made only of exclusions keeps them as its text, so it still ranks
    something rather than nothing.
    """
    phrases = [" ".join(p.split()) for p in _PHRASE.findall(query) if p.strip()]
    rest = _PHRASE.sub(lambda m: f" {m.group(1)} ", query)
    words, excluded = [], []
    for word in rest.split():
        if len(word) > 1 and word.startswith("-") and not word[1:].startswith("-"):
            excluded.append(word[1:])
        else:
            words.append(word)
    if not words and excluded and not phrases:
        return ParsedQuery(query.strip())
    return ParsedQuery(" ".join(words), phrases, excluded)


def _flat(text: str) -> str:
    return _SPACE.sub(" ", text).casefold()


def passes(text: str, parsed: ParsedQuery, analyzer: Any) -> bool:
    """True when ``text`` contains every phrase (case and whitespace ignored) and no excluded
    word (compared as analyzer terms, so ``-passwords`` also excludes ``password``)."""
    if parsed.phrases:
        flat = _flat(text)
        if not all(_flat(p) in flat for p in parsed.phrases):
            return False
    if parsed.excluded:
        banned = {t for word in parsed.excluded for t in analyzer.terms(word)}
        if banned and banned & set(analyzer.terms(text)):
            return False
        lowered = _flat(text)
        if any(not analyzer.terms(word) and _flat(word) in lowered for word in parsed.excluded):
            return False
    return True


@dataclass
class Hit:
    """One search result as shown: the (best) chunk, its rank score, and for file results how
    many of the file's chunks matched."""

    result: SearchResult
    matched: int = 1

    @property
    def source(self) -> str | None:
        source = self.result.document.metadata.get("source")
        return None if source is None else str(source)

    @property
    def note(self) -> bool:
        """True for an agent's note (``note_by``): a chunk of no file."""
        return note_author(self.result.document.metadata) is not None

    @property
    def line(self) -> int | None:
        """The line the hit is for (1-based, the file's numbering): its best-matching line when
        located (:func:`locate_lines`), else its chunk's first line, if recorded (a note has
        none)."""
        return hit_line(self.result)

    @property
    def page(self) -> int | None:
        """The page of a file read by pages (PDF, image) the hit is on, else None."""
        return hit_page(self.result.document.metadata)

    @property
    def location(self) -> str:
        """``path:line``, ``path#page=N`` for a page, the path, or ``-``; a note is ``note by
        NAME`` (``note by NAME: source``), never a file's place: see :func:`location`."""
        meta = self.result.document.metadata
        return location(self.source, self.line, self.page, note_label(meta))


def group_by_file(results: list[SearchResult], k: int) -> list[Hit]:
    """One hit per source, in the order of each source's best chunk, at most ``k``; a chunk
    without a source is its own group."""
    groups: dict[str, Hit] = {}
    for result in results:
        source = result.document.metadata.get("source")
        key = f"source:{source}" if source is not None else f"id:{result.document.id}"
        if key in groups:
            groups[key].matched += 1
        else:
            groups[key] = Hit(result)
    return list(groups.values())[:k]


class Hits(list):
    """The hits of :func:`search`; ``results`` is what the knowledge base answered (a
    reranker's refusal is recorded there)."""

    results: Any = None


def search(
    kb: Source, query: str, options: SearchOptions, by: str = "file", *, locate: bool = True
) -> Hits:
    """Search ``kb`` (anything with ``search_with(query, options, pool=)`` and ``analyzer``)
    for ``query`` with its phrase and exclusion syntax, returning hits by ``file`` or by
    ``chunk``, each located on its best-matching line (:func:`locate_lines`; ``locate`` False:
    not, for callers that only rank).

    Hits failing a phrase or an exclusion never reach a reranker. With a reranker its pool
    is ``candidates`` chunks (at least 2×k) whatever ``by``: by file, the pool holds the best
    recalled chunk of each of the first k files (recalled deeper when the first chunks come
    from fewer files) and the best other chunks; the reranked pool is then grouped by file."""
    if by not in UNITS:
        from kbcli.errors import InvalidOptionError

        raise InvalidOptionError(f"Unknown result unit {by!r}: choose file or chunk")
    parsed = parse_query(query)
    k = options.k
    if not parsed.text.strip():
        hits = Hits()
        hits.results = []
        return hits
    analyzer = kb.analyzer if not parsed.plain else None

    def keep(results: list[SearchResult]) -> list[SearchResult]:
        if analyzer is None:
            return results
        return [r for r in results if passes(r.document.text, parsed, analyzer)]

    def pool(recall: Any, size: int | None) -> list[SearchResult]:
        deep = by == "file" or not parsed.plain
        if size is None:  # no reranker: as deep as the hits need
            depth = min(max(k * POOL_FACTOR, POOL_MIN), max(POOL_MAX, k)) if deep else k
        else:
            depth = size
        while True:
            recalled = recall(depth)
            kept = keep(recalled)
            chosen = kept if size is None else _candidates(kept, size, k, by)
            if len(recalled) < depth or depth >= POOL_DEEPEST or _enough(chosen, size, k, by):
                return chosen
            depth = min(depth * POOL_FACTOR, POOL_DEEPEST)

    answered = kb.search_with(parsed.text, options, pool=pool)
    results = list(answered)
    chosen = group_by_file(results, k) if by == "file" else [Hit(r) for r in results[:k]]
    if locate:
        locate_lines(kb, query, [hit.result for hit in chosen], options.filter, options.scope)
    hits = Hits(chosen)
    hits.results = answered
    return hits


def _source_key(result: SearchResult) -> str:
    source = result.document.metadata.get("source")
    return f"source:{source}" if source is not None else f"id:{result.document.id}"


def _enough(chosen: list[SearchResult], size: int | None, k: int, by: str) -> bool:
    """True when ``chosen`` needs no deeper recall: ``size`` chunks for a reranker (and k
    files among them by file), else k hits."""
    if size is not None and len(chosen) < size:
        return False
    if by == "file":
        return len({_source_key(r) for r in chosen}) >= k
    return len(chosen) >= k


def _candidates(kept: list[SearchResult], size: int, k: int, by: str) -> list[SearchResult]:
    """The rerank pool out of ``kept`` (in recall order): by chunk its first ``size``; by file
    the best chunk of each of its first k files, then the best others up to ``size``."""
    if by != "file" or size <= k:
        return kept[:size]
    firsts: dict[str, int] = {}
    for index, result in enumerate(kept):
        if len(firsts) == k:
            break
        firsts.setdefault(_source_key(result), index)
    reserved = set(firsts.values())
    others = [i for i in range(len(kept)) if i not in reserved][: size - len(reserved)]
    return [kept[i] for i in sorted(reserved | set(others))]


def line_of(text: str, offset: int) -> int:
    """The 1-based line of character ``offset`` in ``text``."""
    return text.count("\n", 0, max(0, offset)) + 1


# --- where a hit is ------------------------------------------------------------------------------

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


def location_suffix(line: int | None, page: int | None) -> str:
    """``#page=N`` for a page (a viewer opens a PDF there, ``kb get`` reads it), else
    ``:LINE`` (``$EDITOR +LINE``, ``kb get path:LINE``), else nothing."""
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
        store: Any,
        analyzer: Any,
        text: str,
        filter: dict[str, Any] | None = None,
        scope: dict[str, Any] | None = None,
    ):
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
        from kbcli.protocols import DocumentCatalog, KeywordIndex, supports

        terms = list(terms)
        if not supports(self.store, KeywordIndex):
            return {t: 1.0 for t in terms}
        found: dict[str, float | None] = {}
        for term in terms:
            try:
                found[term] = self._lookup(term)
            except _Unaskable:
                continue
        from kbcli.text.bm25 import bm25_idf

        if supports(self.store, DocumentCatalog):
            absent = bm25_idf(self.store.count(self.scope), 0)
        else:
            absent = max((w for w in found.values() if w), default=1.0)
        return {t: absent if idf is None else idf for t, idf in found.items()}

    def _search(self, text: str) -> list[SearchResult]:
        from kbcli.filters.model import and_filters
        from kbcli.search.retrievers import takes_scope

        flat = {"k1": 0.0, "b": 0.0, "source_weight": 0.0}
        if self.scope is None:
            return self.store.keyword_search(text, 1, self.filter, **flat)
        if takes_scope(self.store):
            return self.store.keyword_search(text, 1, self.filter, scope=self.scope, **flat)
        return self.store.keyword_search(text, 1, and_filters(self.scope, self.filter), **flat)

    def _lookup(self, term: str, seen: frozenset[str] = frozenset()) -> float | None:
        """``idf`` of ``term`` inside the filter; None when no passage there holds it."""
        from kbcli.text.analysis import keyword_counts

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
    analyzer: Any,
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
    analyzer: Any,
    phrases: Sequence[str],
) -> int | None:
    """:func:`best_line` over ``lines`` whose query terms (``held``) are known."""
    wanted = [(_flat(p), [t for t in analyzer.query_terms(p) if t in weights]) for p in phrases]
    best, best_score = None, 0.0
    for index, terms in enumerate(held):
        score = sum(weights.get(t, 0.0) for t in terms)
        if score and wanted:
            flat = _flat(lines[index][:MAX_LINE_CHARS])
            score += sum(sum(weights[t] for t in ts) for p, ts in wanted if p in flat)
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
    kb: Any,
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
    from kbcli.views import KnowledgeView, and_filters

    if not results:
        return
    base = kb
    if isinstance(kb, KnowledgeView):
        base, scope = kb.kb, and_filters(kb.filter, scope)
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
    import os
    import stat

    from kbcli.errors import KBError
    from kbcli.ingest.lines import file_lines
    from kbcli.system.paths import source_path

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
    from kbcli.ingest.lines import clean_line

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
