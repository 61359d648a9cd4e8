"""BM25 with source context, written once: the formula, the ranking, the postings bookkeeping.

Every keyword index uses this module or is checked against it by the parity test
(``tests/keyword_reference.py``): the SQLite index runs the same arithmetic as SQL, the
in-memory index calls :func:`rank` directly.

**Scoring.** A chunk's score is ``chunk + source_weight * source``, where ``chunk`` is Okapi
BM25 of the chunk among all chunks and ``source`` is BM25 of its whole source (a file: all its
chunks taken as one text) among all sources, both with Lucene's idf. A chunk without a source is
a source of its own. Only the :data:`MAX_SCORED_TERMS` rarest query terms found in the index are
scored, each weighted by how often it occurs in the query. With a pre-filter, only chunks that
pass it are scored and only they add to their source's score (a hidden chunk never lifts a
visible one). Ties: lower internal id first.

**Scopes.** A search under a scope (an access scope: a tenant's view) scores as if the index
held only the scope's chunks: N, the total length, the sources (those with a chunk in scope),
each source's length (its chunks in scope), and each term's ``df`` and ``sdf`` are counted over
the scope only, and a term no chunk in scope holds is not found (:class:`ScopeStats`,
:func:`scoped_term`). A plain pre-filter keeps the index-wide statistics; inside a scope it only
narrows which chunks are ranked, as it would on an index of the scope alone.

**Bookkeeping.** A write's effect on the statistics (document frequency ``df``, source
frequency ``sdf``, source lengths and chunk counts, corpus size and length) is a
:class:`PostingsChange`, planned by :func:`plan_addition` or :func:`plan_removal` from the
chunks' terms and one lookup into the index as it was before the change; an index applies it in
the same transaction as the catalog's rows.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

K1 = 1.5
B = 0.75
# Keyword search scores a chunk as its own BM25 plus SOURCE_WEIGHT times the BM25 of its whole
# source (file). Chunks are short, so a query's words are often spread over a file's chunks;
# the source part lets the file's evidence count. Measured with 500-character chunks (nDCG@10,
# docs/quality.md): SciFact train 0.670 -> 0.696, Cranfield 0.358 -> 0.377 at 2.0.
SOURCE_WEIGHT = 2.0
# Query terms scored at most (the rarest ones found in the index). As many as the analyzer
# looks up (analysis.MAX_QUERY_TERMS): a cap of 32 cut more than half of the long English
# queries of a held-out set and most long Chinese ones, and scoring them all changed no usable
# split beyond noise (docs/quality.md); the SQL/packed choice bounds the cost.
MAX_SCORED_TERMS = 256

# A term as an executor keys it (its text, or its row id): any hashable value; Any, since
# mappings are invariant in their keys (a Counter[str] is not a Mapping[Hashable, int]).
Term = Any


# --- the formula -------------------------------------------------------------------------------


def bm25_idf(n_docs: int, df: int) -> float:
    """BM25 idf, Lucene form (never negative): ``ln((N - df + 0.5) / (df + 0.5) + 1)``."""
    return math.log((n_docs - df + 0.5) / (df + 0.5) + 1.0)


def bm25_term(tf: float, dl: float, avgdl: float, k1: float = K1, b: float = B) -> float:
    """BM25 term-frequency part: ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``."""
    norm = 1.0 - b + b * (dl / avgdl if avgdl > 0 else 0.0)
    return tf * (k1 + 1.0) / (tf + k1 * norm)


@dataclass(frozen=True)
class CorpusStats:
    """What the formula needs about the whole index: chunk count, total chunk length (terms)
    and source count."""

    chunks: int
    total_length: int
    sources: int

    @property
    def avgdl(self) -> float:
        """Mean chunk length."""
        return self.total_length / self.chunks if self.chunks else 0.0

    @property
    def avgsl(self) -> float:
        """Mean source length (a source's length is the sum of its chunks')."""
        return self.total_length / self.sources if self.sources else 0.0


@dataclass(frozen=True)
class QueryTerm:
    """One scored query term: its key in the index, its weight in the query (occurrences) and
    its chunk and source frequencies."""

    term: Term
    count: int
    df: int
    sdf: int

    def chunk_weight(self, stats: CorpusStats) -> float:
        """``idf(df) * count``: the factor of this term's chunk-level BM25."""
        return bm25_idf(stats.chunks, self.df) * self.count

    def source_weight(self, stats: CorpusStats) -> float:
        """``idf(sdf) * count`` over sources: the factor of its source-level BM25."""
        return bm25_idf(stats.sources, self.sdf) * self.count


def select_terms(found: Iterable[QueryTerm], limit: int = MAX_SCORED_TERMS) -> list[QueryTerm]:
    """The terms that are scored: the ``limit`` rarest (lowest df, then first found)."""
    return sorted(found, key=lambda t: t.df)[:limit]


# --- scopes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScopeStats:
    """The statistics of a scope's chunks alone: :class:`CorpusStats` and each source's length
    counted over its chunks in scope (sources without one are absent)."""

    stats: CorpusStats
    source_length: Mapping[int, int]


def scope_stats(chunks: Iterable[tuple[int, int]]) -> ScopeStats:
    """:class:`ScopeStats` of the chunks in scope, given as ``(src, length)`` pairs."""
    lengths: Counter[int] = Counter()
    n = 0
    for src, length in chunks:
        n += 1
        lengths[src] += length
    return ScopeStats(CorpusStats(n, sum(lengths.values()), len(lengths)), dict(lengths))


def scoped_term(term: Term, count: int, sources: Iterable[int]) -> QueryTerm | None:
    """``term`` with its frequencies inside a scope: ``sources`` holds the source of each chunk
    in scope that holds it (one entry per chunk); None when there is none."""
    srcs = list(sources)
    return QueryTerm(term, count, len(srcs), len(set(srcs))) if srcs else None


# --- the ranking (reference executor) -----------------------------------------------------------

Posting = tuple[int, int, int, int]  # (doc, src, tf, chunk length)


@dataclass(frozen=True)
class BM25Params:
    """The parameters of one ranking: ``k1``, ``b`` and the weight of the source part."""

    k1: float = K1
    b: float = B
    source_weight: float = SOURCE_WEIGHT


@dataclass(frozen=True)
class Scored:
    """One ranked chunk: internal id, total score and its two parts."""

    doc: int
    score: float
    chunk: float
    source: float


def rank(
    terms: Sequence[QueryTerm],
    postings: Callable[[Term], Iterable[Posting]],
    source_length: Callable[[int], int],
    stats: CorpusStats,
    k: int,
    *,
    k1: float = K1,
    b: float = B,
    source_weight: float = SOURCE_WEIGHT,
    allowed: Callable[[int], bool] | None = None,
) -> list[Scored]:
    """The ``k`` best chunks for ``terms`` (already chosen with :func:`select_terms`).

    ``postings(term)`` yields ``(doc, src, tf, dl)`` for every chunk holding ``term``;
    ``source_length(src)`` is a source's length; ``allowed(doc)`` is the pre-filter.
    """
    if k <= 0 or not terms or stats.chunks == 0:
        return []
    avgdl, avgsl = stats.avgdl, stats.avgsl
    chunk: dict[int, float] = {}
    source: dict[int, float] = {}
    source_of: dict[int, int] = {}
    for term in terms:
        cw = term.chunk_weight(stats)
        per_source: Counter[int] = Counter()
        for doc, src, tf, dl in postings(term.term):
            if allowed is not None and not allowed(doc):
                continue
            chunk[doc] = chunk.get(doc, 0.0) + cw * bm25_term(tf, dl, avgdl, k1, b)
            source_of[doc] = src
            per_source[src] += tf
        if source_weight:
            sw = term.source_weight(stats)
            for src, tf in per_source.items():
                part = sw * bm25_term(tf, source_length(src), avgsl, k1, b)
                source[src] = source.get(src, 0.0) + part
    scored = (
        Scored(
            doc,
            c + source_weight * source.get(source_of[doc], 0.0),
            c,
            source.get(source_of[doc], 0.0),
        )
        for doc, c in chunk.items()
    )
    return heapq.nsmallest(k, scored, key=lambda s: (-s.score, s.doc))


# --- bookkeeping -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkTerms:
    """A chunk as the keyword index sees it: internal id, source id and term frequencies."""

    doc: int
    src: int
    tf: Mapping[Term, int]

    @property
    def length(self) -> int:
        """The chunk's length in terms (BM25's ``dl``)."""
        return sum(self.tf.values())


@dataclass
class PostingsChange:
    """What one addition or removal does to a keyword index.

    ``chunks`` gain (addition) or lose (removal) their postings; ``df`` and ``sdf`` are
    per-term deltas, ``source_length`` / ``source_chunks`` per-source deltas; ``new_sources``
    had no chunk before, ``emptied_sources`` have none after; ``chunks_delta`` and
    ``length_delta`` change the corpus totals.
    """

    adding: bool
    chunks: list[ChunkTerms]
    df: Counter[Term] = field(default_factory=Counter)
    sdf: Counter[Term] = field(default_factory=Counter)
    source_length: Counter[int] = field(default_factory=Counter)
    source_chunks: Counter[int] = field(default_factory=Counter)
    new_sources: set[int] = field(default_factory=set)
    emptied_sources: set[int] = field(default_factory=set)
    chunks_delta: int = 0
    length_delta: int = 0

    @property
    def sources_delta(self) -> int:
        """Change in the number of sources."""
        return len(self.new_sources) - len(self.emptied_sources)


def _tally(change: PostingsChange) -> PostingsChange:
    """Fill in the deltas every change has: df, source lengths and chunk counts, totals."""
    for c in change.chunks:
        change.df.update(c.tf.keys())
        length = c.length
        change.source_length[c.src] += length
        change.source_chunks[c.src] += 1
        change.length_delta += length
    change.chunks_delta = len(change.chunks)
    return change


def _source_terms(chunks: Iterable[ChunkTerms]) -> dict[int, Counter[Term]]:
    """Per source, in how many of ``chunks`` each term occurs."""
    per: dict[int, Counter[Term]] = {}
    for c in chunks:
        per.setdefault(c.src, Counter()).update(c.tf.keys())
    return per


def plan_addition(
    chunks: Sequence[ChunkTerms],
    *,
    source_postings: Callable[[int, Term], int],
    new_sources: set[int] | frozenset[int] = frozenset(),
) -> PostingsChange:
    """The change of adding ``chunks``. ``source_postings(src, term)`` counts the chunks of
    ``src`` holding ``term`` before the change (never asked for ``new_sources``)."""
    change = _tally(PostingsChange(True, list(chunks), new_sources=set(new_sources)))
    for src, terms in _source_terms(chunks).items():
        if src in change.new_sources:
            change.sdf.update(terms.keys())
        else:
            change.sdf.update(t for t in terms if source_postings(src, t) == 0)
    return change


def plan_removal(
    chunks: Sequence[ChunkTerms],
    *,
    source_chunk_count: Callable[[int], int],
    source_postings: Callable[[int, Term], int],
) -> PostingsChange:
    """The change of removing ``chunks`` (each once). ``source_chunk_count(src)`` and
    ``source_postings(src, term)`` describe the index before the change; a source left
    without chunks loses every term without a lookup."""
    change = _tally(PostingsChange(False, list(chunks)))
    for src, terms in _source_terms(chunks).items():
        if source_chunk_count(src) <= change.source_chunks[src]:
            change.emptied_sources.add(src)
            change.sdf.update(terms.keys())
        else:
            change.sdf.update(t for t, n in terms.items() if source_postings(src, t) <= n)
    return change
