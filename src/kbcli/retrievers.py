"""Retrievers: BM25 (keyword), dense (semantic) and hybrid (fusion of both)."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from .analysis import Analyzer, has_cjk, keyword_text
from .filters import matches, validate_filter
from .scoring import (
    MAX_SCORED_TERMS,
    bm25_idf,
    bm25_term,
    keyword_first_fusion,
    min_max,
    rrf_fusion,
    weighted_fusion,
)
from .types import Document, SearchOptions, SearchResult

# Candidates recalled per route before fusion: enough that fusion can promote a document that
# one route ranks modestly, small enough to stay fast.
FUSION_POOL_MIN = 50
FUSION_POOL_FACTOR = 2
# Dense weight used when the embedder is weak (spelling, not meaning) and the search does not
# set alpha: keyword ranking decides, the dense route only breaks (near-)ties and ranks what the
# keywords did not find. Measured: any larger weight (0.02, 0.05) already lost to keyword
# ranking on Cranfield (docs/quality.md).
WEAK_DENSE_ALPHA = 0.001
# Language codes that make an embedder's ``languages`` cover Chinese/Japanese script queries.
CJK_LANGUAGES = frozenset({"zh", "ja", "multilingual"})
# Extra hits fetched so that collapsing duplicates still leaves k results.
DEDUPE_MARGIN = 10


class _MemoryBM25Index:
    """An in-memory inverted index over documents, for stores without their own.

    Scores like :meth:`SQLiteStore.keyword_search`: chunk BM25 plus ``source_weight`` times
    the BM25 of the chunk's source (``metadata["source"]``; a chunk without one is its own).
    """

    def __init__(self, docs: list[Document], analyzer: Analyzer):
        self.docs = docs
        self.lengths: list[int] = []
        self.postings: dict[str, list[tuple[int, int]]] = {}
        self.source_of: list[int] = []
        source_ids: dict[str, int] = {}
        for i, doc in enumerate(docs):
            counts = Counter(analyzer.terms(keyword_text(doc.text, doc.metadata)))
            self.lengths.append(sum(counts.values()))
            for term, tf in counts.items():
                self.postings.setdefault(term, []).append((i, tf))
            source = doc.metadata.get("source")
            key = str(source) if source is not None else f"\0{i}"
            self.source_of.append(source_ids.setdefault(key, len(source_ids)))
        self.source_lengths = [0] * len(source_ids)
        for i, length in enumerate(self.lengths):
            self.source_lengths[self.source_of[i]] += length
        self.source_df = {
            term: len({self.source_of[i] for i, _ in plist})
            for term, plist in self.postings.items()
        }
        self.avgdl = sum(self.lengths) / len(docs) if docs else 0.0
        self.avgsl = sum(self.lengths) / len(source_ids) if source_ids else 0.0

    def search(
        self,
        query_counts: Counter[str],
        k: int,
        filter: dict[str, Any] | None,
        k1: float,
        b: float,
        source_weight: float,
    ) -> list[SearchResult]:
        n, n_sources = len(self.docs), len(self.source_lengths)
        found = sorted((len(self.postings[t]), t) for t in query_counts if t in self.postings)[
            :MAX_SCORED_TERMS
        ]
        chunk: dict[int, float] = {}
        source: dict[int, float] = {}
        for _, term in found:
            visible = [
                (i, tf)
                for i, tf in self.postings[term]
                if not filter or matches(self.docs[i].metadata, filter)
            ]
            idf = bm25_idf(n, len(self.postings[term])) * query_counts[term]
            per_source: Counter[int] = Counter()
            for i, tf in visible:
                chunk[i] = chunk.get(i, 0.0) + idf * bm25_term(
                    tf, self.lengths[i], self.avgdl, k1, b
                )
                per_source[self.source_of[i]] += tf
            source_idf = bm25_idf(n_sources, self.source_df[term]) * query_counts[term]
            for src, tf in per_source.items():
                source[src] = source.get(src, 0.0) + source_idf * bm25_term(
                    tf, self.source_lengths[src], self.avgsl, k1, b
                )
        scores = {
            i: (c + source_weight * source[self.source_of[i]], c, source[self.source_of[i]])
            for i, c in chunk.items()
        }
        best = sorted(scores.items(), key=lambda item: (-item[1][0], item[0]))[:k]
        return [
            SearchResult(
                self.docs[i],
                total,
                {"bm25_chunk": c, "bm25_source": s, "source_weight": source_weight},
            )
            for i, (total, c, s) in best
        ]


class BM25Retriever:
    """Okapi BM25 keyword search (Lucene idf, ``k1`` and ``b`` as in the reference), with
    source context: a chunk scores its own BM25 plus ``source_weight`` times its source's
    (``None``: ``limits.source_weight`` from the configuration, 2.0 by default).

    Uses the store's persistent index when it has one (``keyword_search``); otherwise indexes
    ``store.list_all()`` in memory, rebuilt only when the store's ``version`` changes.
    """

    def __init__(
        self,
        store: Any,
        k1: float = 1.5,
        b: float = 0.75,
        analyzer: Analyzer | None = None,
        source_weight: float | None = None,
    ):
        if source_weight is not None and source_weight < 0:
            raise ValueError(f"source_weight must be 0 or more, got {source_weight}")
        self.store = store
        self.k1 = k1
        self.b = b
        self.source_weight = source_weight
        self.analyzer = analyzer or getattr(store, "analyzer", None) or Analyzer()
        self._cache: tuple[Any, _MemoryBM25Index] | None = None

    def search(
        self, query: str, k: int = 5, options: SearchOptions | None = None
    ) -> list[SearchResult]:
        """The ``k`` best BM25 matches among documents passing ``options.filter``."""
        filter = validate_filter(options.filter if options else None)
        weight = self.default_source_weight()
        if options is not None and options.source_weight is not None:
            weight = options.source_weight
        if hasattr(self.store, "keyword_search"):
            return self.store.keyword_search(
                query, k, filter, k1=self.k1, b=self.b, source_weight=weight
            )
        query_counts = self.analyzer.query_counts(query)
        if not query_counts:
            return []
        return self._index().search(query_counts, k, filter, self.k1, self.b, weight)

    def default_source_weight(self) -> float:
        """The constructor's ``source_weight``, else ``limits.source_weight`` (2.0 by default)."""
        if self.source_weight is not None:
            return self.source_weight
        from .config import get_config

        return get_config().limits.source_weight

    def _index(self) -> _MemoryBM25Index:
        version = getattr(self.store, "version", None)
        if self._cache is None or version is None or self._cache[0] != version:
            self._cache = (version, _MemoryBM25Index(self.store.list_all(), self.analyzer))
        return self._cache[1]


class DenseRetriever:
    """Semantic search: embeds the query and asks the store for the nearest vectors."""

    def __init__(self, store: Any, embedder: Any):
        self.store = store
        self.embedder = embedder

    def search(
        self, query: str, k: int = 5, options: SearchOptions | None = None
    ) -> list[SearchResult]:
        """The ``k`` nearest documents (cosine) among those passing ``options.filter``."""
        filter = validate_filter(options.filter if options else None)
        if not query.strip():
            return []
        check = getattr(self.store, "check_embedder", None)
        if check is not None:
            from .embedders.base import embedder_info

            check(embedder_info(self.embedder))
        return self.store.search(self.embedder.embed_query(query), k, filter)


class HybridRetriever:
    """Keyword, semantic or hybrid search over one store, chosen per query by ``options.mode``.

    Hybrid recalls a candidate pool from both routes and fuses them: ``weighted`` min-max
    normalises each route and combines ``alpha * dense + (1 - alpha) * keyword``; ``rrf`` sums
    ``1 / (60 + rank)``. A document found by one route only still counts.

    Alpha: ``options.alpha`` when the search sets it; otherwise, with a *weak* embedder (one
    with ``weak = True``, such as the built-in simple embedder, or one whose ``languages`` do
    not include the query's script, see :meth:`weak_for`) :data:`WEAK_DENSE_ALPHA`, so the
    keyword ranking decides and the dense route only breaks near-ties and fills up; otherwise
    the constructor's ``alpha``, else ``limits.rerank_alpha`` from the configuration.
    ``source_weight`` goes to the keyword route (:class:`BM25Retriever`).

    After fusion, chunks with identical text collapse to the best one (``options.dedupe``) and
    ``options.mmr`` re-orders the candidate pool for diversity (see :mod:`kbcli.diversity`).
    """

    def __init__(
        self,
        store: Any,
        embedder: Any = None,
        alpha: float | None = None,
        source_weight: float | None = None,
    ):
        if embedder is None:
            from .embedders import SimpleEmbedder

            embedder = SimpleEmbedder()
        if alpha is not None and not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
        self.store = store
        self.embedder = embedder
        self.alpha = alpha
        self.keyword = BM25Retriever(store, source_weight=source_weight)
        self.dense = DenseRetriever(store, embedder)

    def default_alpha(self) -> float:
        """The alpha used when neither the options nor the constructor set one."""
        if self.alpha is not None:
            return self.alpha
        from .config import get_config

        return get_config().limits.rerank_alpha

    @property
    def weak_embedder(self) -> bool:
        """True when the embedder says its vectors capture spelling rather than meaning."""
        return bool(getattr(self.embedder, "weak", False))

    def weak_for(self, query: str) -> bool:
        """True when the dense route cannot be trusted for ``query``: the embedder is weak, or
        it declares the ``languages`` it knows, none of them Chinese or Japanese, and the query
        is written in those scripts (all-MiniLM-L6-v2 on Chinese: CMRC nDCG@10 0.10)."""
        if self.weak_embedder:
            return True
        languages = getattr(self.embedder, "languages", None)
        if languages is None or set(languages) & CJK_LANGUAGES:
            return False
        return has_cjk(query)

    def effective_alpha(self, options: SearchOptions, query: str = "") -> float:
        """The dense weight weighted fusion uses for ``options`` and ``query`` (see the class
        docstring)."""
        if options.alpha is not None:
            return options.alpha
        if self.weak_for(query):
            return WEAK_DENSE_ALPHA
        return self.default_alpha()

    def search(
        self, query: str, k: int = 5, options: SearchOptions | None = None
    ) -> list[SearchResult]:
        """Search in ``options.mode`` (hybrid by default) and return the ``k`` best results."""
        options = options or SearchOptions(k=k)
        fetch = k
        if options.mmr is not None:
            fetch = max(k * FUSION_POOL_FACTOR, FUSION_POOL_MIN)
        elif options.dedupe:
            fetch = k + max(k, DEDUPE_MARGIN)
        if options.mode == "keyword":
            hits = self._label(self.keyword.search(query, fetch, options), "keyword", options)
        elif options.mode == "semantic":
            hits = self._label(self.dense.search(query, fetch, options), "dense", options)
        else:
            pool = max(k * FUSION_POOL_FACTOR, FUSION_POOL_MIN, fetch)
            keyword_hits = self.keyword.search(query, pool, options)
            weak = options.alpha is None and self.weak_for(query)
            if weak and options.fusion != "rrf" and len(keyword_hits) >= fetch:
                # A weak dense route could only break exact keyword ties here: skip it (no
                # vector load, no numpy), it is needed only to fill up a short keyword list.
                dense_hits = []
            else:
                dense_hits = self.dense.search(query, pool, options)
            alpha = self.effective_alpha(options, query)
            hits = fuse(keyword_hits, dense_hits, fetch, options, alpha, keyword_first=weak)
        if options.dedupe:
            from .diversity import collapse_duplicates

            hits = collapse_duplicates(hits, explain=options.explain)
        if options.mmr is not None:
            hits = self._mmr(hits, k, options)
        return hits[:k]

    def _mmr(self, hits: list[SearchResult], k: int, options: SearchOptions) -> list[SearchResult]:
        from .diversity import mmr_rerank

        vectors = None
        if options.mode != "keyword" and hasattr(self.store, "get"):
            ids = [h.document.id for h in hits]
            by_id = {d.id: d.embedding for d in self.store.get(ids, with_embeddings=True)}
            vectors = [by_id.get(i) for i in ids]
        analyzer = getattr(self.store, "analyzer", None) or self.keyword.analyzer
        return mmr_rerank(
            hits, options.mmr or 0.0, k, vectors=vectors, analyzer=analyzer, explain=options.explain
        )

    @staticmethod
    def _label(hits: list[SearchResult], route: str, options: SearchOptions) -> list[SearchResult]:
        for rank, hit in enumerate(hits, start=1):
            if options.explain:
                detail = {"rank": rank, "score": hit.score, **(hit.explain or {})}
                hit.explain = {route: detail, "fused": hit.score}
            else:
                hit.explain = None
        return hits


def fuse(
    keyword_hits: list[SearchResult],
    dense_hits: list[SearchResult],
    k: int,
    options: SearchOptions,
    default_alpha: float,
    *,
    keyword_first: bool = False,
) -> list[SearchResult]:
    """Combine two ranked lists as ``options.fusion`` says; ties broken by document id.

    ``options.alpha`` overrides ``default_alpha`` for weighted fusion; ``keyword_first`` (weak
    dense route) uses :func:`~kbcli.scoring.keyword_first_fusion` instead of min-max for the
    keyword side. With ``options.explain`` each hit records each route's rank and raw score
    (None when that route missed it), the fused score, the fusion and (weighted) the alpha.
    """
    docs = {hit.document.id: hit.document for hit in keyword_hits + dense_hits}
    keyword_scores = {hit.document.id: hit.score for hit in keyword_hits}
    dense_scores = {hit.document.id: hit.score for hit in dense_hits}
    alpha = options.alpha if options.alpha is not None else default_alpha
    if options.fusion == "rrf":
        fused = rrf_fusion(
            [h.document.id for h in dense_hits], [h.document.id for h in keyword_hits]
        )
    elif keyword_first:
        fused = keyword_first_fusion(dense_scores, keyword_scores, alpha)
    else:
        fused = weighted_fusion(dense_scores, keyword_scores, alpha)
    tie_break = min_max(dense_scores) if keyword_first and options.fusion != "rrf" else {}
    best = sorted(fused.items(), key=lambda item: (-item[1], -tie_break.get(item[0], 0.0), item[0]))
    best = best[:k]
    results = [SearchResult(docs[doc_id], score) for doc_id, score in best]
    if options.explain:
        keyword_rank = {h.document.id: r for r, h in enumerate(keyword_hits, start=1)}
        dense_rank = {h.document.id: r for r, h in enumerate(dense_hits, start=1)}
        keyword_parts = {h.document.id: h.explain or {} for h in keyword_hits}
        for hit in results:
            doc_id = hit.document.id
            keyword = _route(keyword_rank, keyword_scores, doc_id)
            if keyword is not None:
                keyword.update(keyword_parts[doc_id])
            hit.explain = {
                "keyword": keyword,
                "dense": _route(dense_rank, dense_scores, doc_id),
                "fused": hit.score,
                "fusion": options.fusion,
            }
            if options.fusion == "weighted":
                hit.explain["alpha"] = alpha
                if keyword_first:
                    hit.explain["keyword_first"] = True
    return results


def _route(ranks: dict[str, int], scores: dict[str, float], doc_id: str) -> dict[str, Any] | None:
    if doc_id not in ranks:
        return None
    score = scores[doc_id]
    return {"rank": ranks[doc_id], "score": score if math.isfinite(score) else None}
