"""What a search box promises on top of ranking: ``"quoted phrases"`` that must appear,
``-word`` exclusions, results by file, and where each hit is (``path:line``).

:func:`search` is the entry: it parses the query (:mod:`kbcli.search.phrases`), hands the
knowledge base a :class:`~kbcli.search.pool.Pool` saying what it will drop and group (the
pipeline recalls as deep as that needs), and returns :class:`Hits`, one per chunk or one per
file (its best chunk and how many of its chunks matched), each located on its best-matching
line (:mod:`kbcli.search.location`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload

from kbcli.errors import InvalidOptionError
from kbcli.search.freshness import hash_limit, settle, store_of
from kbcli.search.location import locate_lines
from kbcli.search.phrases import parse_query
from kbcli.search.place import hit_line, hit_page, location
from kbcli.search.pool import UNITS, Pool, source_key
from kbcli.types import SearchOptions, SearchResult, note_author, note_label
from kbcli.views import Source


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
        located (:func:`~kbcli.search.location.locate_lines`), else its chunk's first line, if
        recorded (a note has none)."""
        return hit_line(self.result)

    @property
    def page(self) -> int | None:
        """The page of a file read by pages (PDF, image) the hit is on, else None."""
        return hit_page(self.result.document.metadata)

    @property
    def location(self) -> str:
        """``path:line``, ``path#page=N`` for a page, the path, or ``-``; a note is ``note by
        NAME`` (``note by NAME: source``), never a file's place: see
        :func:`~kbcli.search.place.location`."""
        meta = self.result.document.metadata
        return location(self.source, self.line, self.page, note_label(meta))


@dataclass
class Hits(Sequence[Hit]):
    """The hits of :func:`search` (``hits``, readable as a sequence) and ``results``, what the
    knowledge base answered (a reranker's refusal is recorded there)."""

    hits: list[Hit] = field(default_factory=list)
    results: Sequence[SearchResult] = field(default_factory=list)

    @overload
    def __getitem__(self, index: int) -> Hit: ...
    @overload
    def __getitem__(self, index: slice) -> list[Hit]: ...
    def __getitem__(self, index: int | slice) -> Hit | list[Hit]:
        return self.hits[index]

    def __len__(self) -> int:
        return len(self.hits)

    def __iter__(self) -> Iterator[Hit]:
        return iter(self.hits)


def group_by_file(results: Sequence[SearchResult], k: int) -> list[Hit]:
    """One hit per source, in the order of each source's best chunk, at most ``k``; a chunk
    without a source is its own group."""
    groups: dict[str, Hit] = {}
    for result in results:
        key = source_key(result)
        if key in groups:
            groups[key].matched += 1
        else:
            groups[key] = Hit(result)
    return list(groups.values())[:k]


def search(
    kb: Source,
    query: str,
    options: SearchOptions,
    by: str = "file",
    *,
    locate: bool = True,
    fresh: bool = True,
) -> Hits:
    """Search ``kb`` (a knowledge base or a view of one) for ``query`` with its phrase and
    exclusion syntax, returning hits by ``file`` or by ``chunk``, each located on its
    best-matching line (:func:`~kbcli.search.location.locate_lines`; ``locate`` False: not,
    for callers that only rank).

    Hits failing a phrase or an exclusion never reach a reranker. With a reranker its pool
    is ``candidates`` chunks (at least 2×k) whatever ``by`` (see
    :class:`~kbcli.search.pool.Pool`); the reranked pool is then grouped by file.

    Each hit returned says how fresh it is (:func:`~kbcli.search.freshness.settle`, under
    ``options.stale``; ``fresh`` False: not checked, for callers that only rank)."""
    if by not in UNITS:
        raise InvalidOptionError(f"Unknown result unit {by!r}: choose file or chunk")
    parsed = parse_query(query)
    k = options.k
    if not parsed.text.strip():
        return Hits()
    analyzer = kb.analyzer if not parsed.plain else None
    answers: list[Sequence[SearchResult]] = []

    def ranked(depth: int) -> list[Hit]:
        opts = options if depth == k else dataclasses.replace(options, k=depth)
        answered = kb.search_with(parsed.text, opts, pool=Pool(parsed, depth, by, analyzer))
        answers.append(answered)
        return (
            group_by_file(answered, depth) if by == "file" else [Hit(r) for r in answered[:depth]]
        )

    if fresh:
        limit = hash_limit(getattr(kb, "config", None))
        chosen = settle(store_of(kb), k, options.stale, ranked, _result, limit=limit)
    else:
        chosen = ranked(k)
    if locate:
        locate_lines(kb, query, [hit.result for hit in chosen], options.filter, options.scope)
    return Hits(chosen, answers[-1])


def _result(hit: Hit) -> SearchResult:
    return hit.result
