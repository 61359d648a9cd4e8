"""What a search box promises on top of ranking: ``"quoted phrases"`` that must appear,
``-word`` exclusions, results by file, and where each hit starts (``path:line``).

:func:`parse_query` splits a query into the text the retrievers rank, the phrases every hit
must contain and the words no hit may contain; :func:`search` runs it through a knowledge base
(recalling a deeper pool when phrases, exclusions or grouping can drop hits) and returns
:class:`Hit` objects, one per chunk or one per file (its best chunk and how many of its chunks
matched).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .types import SearchOptions, SearchResult, note_author, note_label

if TYPE_CHECKING:  # pragma: no cover
    from .views import Source

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
        if any(
            not analyzer.terms(word) and _flat(word) in lowered for word in parsed.excluded
        ):
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
        """The first line of the chunk in its file's indexed text (1-based), if recorded (a
        note has none)."""
        line = self.result.document.metadata.get("line")
        if self.note or not isinstance(line, int) or isinstance(line, bool):
            return None
        return line

    @property
    def location(self) -> str:
        """``path:line`` (or the path, or ``-``): what ``$EDITOR +LINE path`` needs; a note is
        ``note by NAME`` (``note by NAME: source``), never a file's place."""
        source = self.source
        note = note_label(self.result.document.metadata)
        if note is not None:
            return note if source is None else f"{note}: {source}"
        if source is None:
            return "-"
        return f"{source}:{self.line}" if self.line is not None else source


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


def search(kb: Source, query: str, options: SearchOptions, by: str = "file") -> Hits:
    """Search ``kb`` (anything with ``search_with(query, options, pool=)`` and ``analyzer``)
    for ``query`` with its phrase and exclusion syntax, returning hits by ``file`` or by
    ``chunk``.

    Hits failing a phrase or an exclusion never reach a reranker. With a reranker its pool
    is ``candidates`` chunks (at least 2×k) whatever ``by``: by file, the pool holds the best
    recalled chunk of each of the first k files (recalled deeper when the first chunks come
    from fewer files) and the best other chunks; the reranked pool is then grouped by file."""
    if by not in UNITS:
        from .errors import InvalidOptionError

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
