"""MemoryKeywordIndex: the BM25 index of :mod:`kbcli.text.bm25` in Python dicts.

Used by :class:`~kbcli.stores.InMemoryStore` (kept up to date on every write) and by
:class:`~kbcli.search.retrievers.BM25Retriever` for plain reference stores that can only list their
documents. Scores come from :func:`kbcli.text.bm25.rank` itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from kbcli.text.analysis import Analyzer, keyword_counts
from kbcli.text.bm25 import (
    ChunkTerms,
    CorpusStats,
    PostingsChange,
    QueryTerm,
    Scored,
    plan_addition,
    plan_removal,
    rank,
    scope_stats,
    scoped_term,
    select_terms,
)
from kbcli.types import Document


class MemoryKeywordIndex:
    """Postings per term, statistics per source; chunks are keyed by an integer id."""

    def __init__(self, analyzer: Analyzer | None = None):
        self.analyzer = analyzer or Analyzer()
        self.clear()

    def clear(self) -> None:
        """Forget every chunk."""
        self.postings: dict[str, dict[int, tuple[int, int]]] = {}  # term -> doc -> (src, tf)
        self.chunks: dict[int, ChunkTerms] = {}
        self.df: Counter[str] = Counter()
        self.sdf: Counter[str] = Counter()
        self.source_terms: dict[int, Counter[str]] = {}  # src -> term -> chunks holding it
        self.source_length: Counter[int] = Counter()
        self.source_chunks: Counter[int] = Counter()
        self.total_length = 0

    def terms_of(self, doc: Document) -> Counter[str]:
        """The term frequencies the index stores for ``doc`` (its weighted fields)."""
        return keyword_counts(self.analyzer, doc.text, doc.metadata)

    @property
    def stats(self) -> CorpusStats:
        """Chunk count, total length and source count."""
        return CorpusStats(len(self.chunks), self.total_length, len(self.source_chunks))

    def add(self, chunks: Iterable[ChunkTerms]) -> None:
        """Index ``chunks`` (ids not yet indexed)."""
        chunks = list(chunks)
        new = {c.src for c in chunks if c.src not in self.source_chunks}
        self.apply(plan_addition(chunks, source_postings=self._source_postings, new_sources=new))

    def remove(self, docs: Iterable[int]) -> None:
        """Drop the chunks with these ids (unknown ids are ignored)."""
        chunks = [self.chunks[d] for d in dict.fromkeys(docs) if d in self.chunks]
        if chunks:
            change = plan_removal(
                chunks,
                source_chunk_count=self.source_chunks.__getitem__,
                source_postings=self._source_postings,
            )
            self.apply(change)

    def _source_postings(self, src: int, term: str) -> int:
        return self.source_terms.get(src, Counter())[term]

    def apply(self, change: PostingsChange) -> None:
        """Apply a planned change (see :mod:`kbcli.text.bm25`)."""
        sign = 1 if change.adding else -1
        for c in change.chunks:
            per_source = self.source_terms.setdefault(c.src, Counter())
            for term, tf in c.tf.items():
                if change.adding:
                    self.postings.setdefault(term, {})[c.doc] = (c.src, tf)
                else:
                    self.postings[term].pop(c.doc, None)
                    if not self.postings[term]:
                        del self.postings[term]
                per_source[term] += sign
            if change.adding:
                self.chunks[c.doc] = c
            else:
                self.chunks.pop(c.doc, None)
        for counts, delta in ((self.df, change.df), (self.sdf, change.sdf)):
            for term, n in delta.items():
                counts[term] += sign * n
                if counts[term] <= 0:
                    del counts[term]
        for src, n in change.source_length.items():
            self.source_length[src] += sign * n
        for src, n in change.source_chunks.items():
            self.source_chunks[src] += sign * n
        for src in change.emptied_sources:
            self.source_chunks.pop(src, None)
            self.source_length.pop(src, None)
            self.source_terms.pop(src, None)
        self.total_length += sign * change.length_delta

    def search(
        self,
        query: str,
        k: int,
        *,
        k1: float,
        b: float,
        source_weight: float,
        allowed: Callable[[int], bool] | None = None,
        scope: Callable[[int], bool] | None = None,
    ) -> list[Scored]:
        """The ``k`` best chunks for ``query`` among those ``allowed`` lets through; with
        ``scope`` (which chunks are in it), among the scope's and scored with its statistics
        alone (see :mod:`kbcli.text.bm25`)."""
        counts = self.analyzer.query_counts(query)
        if scope is None:
            found = [
                QueryTerm(t, n, self.df[t], self.sdf[t]) for t, n in counts.items() if t in self.df
            ]
            stats, source_length = self.stats, self.source_length.__getitem__
        else:
            scoped = scope_stats((c.src, c.length) for d, c in self.chunks.items() if scope(d))
            held = (
                scoped_term(
                    t, n, (src for d, (src, _) in self.postings.get(t, {}).items() if scope(d))
                )
                for t, n in counts.items()
            )
            found = [t for t in held if t is not None]
            stats, source_length = scoped.stats, scoped.source_length.__getitem__
            inner = allowed
            allowed = scope if inner is None else (lambda d: scope(d) and inner(d))
        return rank(
            select_terms(found),
            lambda term: (
                (doc, src, tf, self.chunks[doc].length)
                for doc, (src, tf) in self.postings.get(term, {}).items()
            ),
            source_length,
            stats,
            k,
            k1=k1,
            b=b,
            source_weight=source_weight,
            allowed=allowed,
        )


def index_documents(docs: list[Document], analyzer: Analyzer) -> MemoryKeywordIndex:
    """A keyword index over ``docs``, chunk ids being their positions; a document's source is
    ``metadata["source"]`` (each document without one is a source of its own)."""
    index = MemoryKeywordIndex(analyzer)
    sources: dict[str, int] = {}
    chunks = []
    for i, doc in enumerate(docs):
        source = doc.metadata.get("source")
        key = str(source) if source is not None else f"\0{i}"
        src = sources.setdefault(key, len(sources))
        chunks.append(ChunkTerms(i, src, index.terms_of(doc)))
    index.add(chunks)
    return index
