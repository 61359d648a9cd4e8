"""The search pipeline: (rewrite) -> recall -> fuse -> rerank -> threshold -> top k."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from kbcli.config.schema import Config, RerankConfig, RewriteConfig
from kbcli.errors import InvalidOptionError
from kbcli.protocols import RerankerProtocol, RetrieverProtocol
from kbcli.search.diversity import collapse_duplicates
from kbcli.search.fusion import FUSION_WINDOW, rrf_fusion
from kbcli.search.pool import Pool
from kbcli.search.rerank import build_reranker
from kbcli.types import Document, SearchOptions, SearchResult, SearchResults

__all__ = ["Pool", "RAGPipeline", "Rewriter"]


class Rewriter(Protocol):
    """Extra recall routes for a query (:class:`~kbcli.search.rewrite.QueryRewriter`); one that has
    ``with_mode(mode)`` can also serve a search that asks for another rewrite mode."""

    def routes(self, query: str, search_mode: str) -> list[tuple[str, str, str]]:
        """``(label, text, mode)`` routes to recall beside ``query``."""
        ...


class RAGPipeline:
    """Search pipeline: (rewrite) -> recall -> fuse -> rerank -> threshold -> top k.

    Without a reranker: ``retriever`` recalls ``k`` hits (routes added by a ``rewriter`` are
    recalled too and fused with reciprocal rank fusion; the original query is always one of
    them) and hits below ``options.min_score`` are dropped.

    With a ``reranker`` (any object with ``rerank(query, results)``): a candidate pool of
    ``candidates`` hits (``options.candidates``, else the constructor's, else
    ``rag.rerank.candidates``, 50; never fewer than 2×k) is recalled and fused first, the
    reranker rescores it against the original query, hits scoring below ``min_relevance`` are
    dropped, then ``min_score``, then the best ``k`` are returned with the reranker's scores.
    When candidates were found but none reached ``min_relevance`` the answer is empty with
    ``refused=True`` (:class:`~kbcli.types.SearchResults`): better no answer than weak evidence.
    With ``options.explain`` each hit's ``explain`` adds ``recall_rank``, ``fused`` (its recall
    score) and ``rerank``.

    ``config`` (a :class:`~kbcli.config.lookup.Config`, handed in by whoever builds the
    pipeline: ``KnowledgeBase.from_config``) supplies ``rag.rerank`` and ``rag.rewrite``
    defaults and, with :meth:`configured`, the reranker and rewriter themselves, built on first
    use; without one the defaults of :class:`~kbcli.config.schema.Config` apply. The pipeline
    reads no configuration itself.
    """

    def __init__(
        self,
        retriever: RetrieverProtocol,
        reranker: RerankerProtocol | None = None,
        *,
        candidates: int | None = None,
        min_relevance: float | None = None,
        rewriter: Rewriter | None = None,
        config: Config | None = None,
    ) -> None:
        self.retriever = retriever
        self._reranker = reranker
        self._rewriter = rewriter
        # the configuration to build them from on first use (see configured)
        self._pending_reranker: Config | None = None
        self._pending_rewriter: Config | None = None
        self.candidates = candidates
        self.min_relevance = min_relevance
        self.config = config

    @classmethod
    def configured(
        cls,
        retriever: RetrieverProtocol,
        config: Config,
        reranker: RerankerProtocol | None = None,
    ) -> RAGPipeline:
        """A pipeline whose reranker (unless given) and rewriter come from ``config``'s
        ``rag.rerank`` / ``rag.rewrite``; they are built when a search first needs them, so
        commands that never rerank never load a model or fail on a reranker setting."""
        pipeline = cls(retriever, reranker, config=config)
        if reranker is None and config.rag.rerank.provider != "none":
            pipeline._pending_reranker = config
        if config.rag.rewrite.mode != "none":
            pipeline._pending_rewriter = config
        return pipeline

    @property
    def reranker(self) -> RerankerProtocol | None:
        """The reranker (None: searches are single-stage)."""
        if self._pending_reranker is not None:
            config, self._pending_reranker = self._pending_reranker, None
            self._reranker = build_reranker(config)
        return self._reranker

    @reranker.setter
    def reranker(self, value: RerankerProtocol | None) -> None:
        self._pending_reranker = None
        self._reranker = value

    @property
    def has_reranker(self) -> bool:
        """True when searches rerank by default (without building the reranker)."""
        return self._pending_reranker is not None or self._reranker is not None

    @property
    def rewriter(self) -> Rewriter | None:
        """The query rewriter (None: the query is recalled as written)."""
        if self._pending_rewriter is not None:
            # lazy: the chat client behind a rewrite (~36 ms to import) stays off a search's start
            from kbcli.search.rewrite import build_rewriter

            config, self._pending_rewriter = self._pending_rewriter, None
            self._rewriter = build_rewriter(config)
        return self._rewriter

    @rewriter.setter
    def rewriter(self, value: Rewriter | None) -> None:
        self._pending_rewriter = None
        self._rewriter = value

    def _rerank_settings(self) -> RerankConfig:
        return self.config.rag.rerank if self.config is not None else RerankConfig()

    def _rewrite_settings(self) -> RewriteConfig:
        return self.config.rag.rewrite if self.config is not None else RewriteConfig()

    def search(
        self, query: str, options: SearchOptions | None = None, *, pool: Pool | None = None
    ) -> SearchResults:
        """Run the search described by ``options`` (default :class:`SearchOptions`).

        ``pool`` says what a caller that groups or filters hits afterwards (``kb search``:
        results by file, quoted phrases) will do with them (:class:`~kbcli.search.pool.Pool`):
        the pipeline then recalls as deep as the pool needs and passes on the hits it chooses;
        with a reranker those are the candidate pool (``candidates``, at least 2×k), all
        reranked. Every hit left is returned (the caller cuts to its k)."""
        options = options or SearchOptions()
        k = options.k
        reranker = self._reranker_for(options)
        rewriter = self._rewriter_for(options)
        if reranker is None:
            if pool is None:
                hits = self._recall(query, k, options, rewriter)
            else:
                hits = self._pooled(query, options, rewriter, pool, None, options.min_score)
            results = SearchResults(hits)
        else:
            settings = self._rerank_settings()
            candidates = options.candidates or self.candidates or settings.candidates
            size = max(candidates, 2 * k)
            if pool is None:
                hits = self._recall(query, size, options, rewriter)
            else:
                hits = self._pooled(query, options, rewriter, pool, size, None)[:size]
            threshold = options.min_relevance
            if threshold is None:
                threshold = (
                    self.min_relevance if self.min_relevance is not None else settings.min_relevance
                )
            results = self._rerank(reranker, query, hits, threshold, options.explain)
        if options.min_score is not None:
            kept = [r for r in results if r.score >= options.min_score]
        else:
            kept = list(results)
        return replace(results, hits=kept[:k] if pool is None else kept)

    def _pooled(
        self,
        query: str,
        options: SearchOptions,
        rewriter: Rewriter | None,
        pool: Pool,
        size: int | None,
        floor: float | None,
    ) -> list[SearchResult]:
        """The hits ``pool`` chooses, recalled as deep as it needs (hits under ``floor``, the
        search's ``min_score`` when nothing reranks, do not count)."""
        depth = pool.first_depth(size)
        while True:
            recalled = self._recall(query, depth, options, rewriter)
            if floor is not None:
                recalled = [h for h in recalled if h.score >= floor]
            chosen = pool.choose(recalled, size)
            if pool.enough(recalled, depth, chosen, size):
                return chosen
            depth = pool.deeper(depth)

    def _reranker_for(self, options: SearchOptions) -> RerankerProtocol | None:
        if options.rerank is False:
            if options.min_relevance is not None:
                raise InvalidOptionError("min_relevance needs reranking: drop --no-rerank")
            return None
        if not self.has_reranker:
            if options.rerank or options.min_relevance is not None:
                raise InvalidOptionError(
                    "No reranker is configured: set rag.rerank.provider in jianmu.yaml "
                    "(cross-encoder, api, llm) or pass reranker= to KnowledgeBase"
                )
            return None
        return self.reranker

    def _rewriter_for(self, options: SearchOptions) -> Rewriter | None:
        mode = options.rewrite
        if mode is None:
            return self.rewriter
        if mode == "none":
            return None
        current = self.rewriter
        with_mode = getattr(current, "with_mode", None)
        if current is not None and callable(with_mode):
            changed: Rewriter = with_mode(mode)
            return changed
        # lazy: the chat client behind a rewrite (~36 ms to import) stays off a search's start
        from kbcli.search.rewrite import rewriter_from

        return rewriter_from(self._rewrite_settings(), mode)

    def _recall(
        self, query: str, pool: int, options: SearchOptions, rewriter: Rewriter | None
    ) -> list[SearchResult]:
        routes = rewriter.routes(query, options.mode) if rewriter is not None else []
        if not routes:
            return self.retriever.search(query, pool, options)
        # every route recalls at least the window RRF reads, so its fused scores (and the
        # order) are the same at any k
        depth = max(pool, FUSION_WINDOW)
        ranked = [("query", self.retriever.search(query, depth, options))]
        for label, text, mode in routes:
            ranked.append((label, self.retriever.search(text, depth, replace(options, mode=mode))))
        # each route's first FUSION_WINDOW ranks count (kbcli.search.fusion): the same at any depth;
        # past every window, by the better route rank
        fused = rrf_fusion(*[[h.document.id for h in hits] for _, hits in ranked])
        docs: dict[str, Document] = {}
        first: dict[str, int] = {}
        for _, hits in ranked:
            for place, hit in enumerate(hits, start=1):
                docs.setdefault(hit.document.id, hit.document)
                first[hit.document.id] = min(place, first.get(hit.document.id, place))
        order = sorted(fused, key=lambda doc_id: (-fused[doc_id], first[doc_id], doc_id))
        out: list[SearchResult] = []
        for doc_id in order:
            explain: dict[str, Any] | None = None
            if options.explain:
                explain = {}
                for label, hits in ranked:
                    rank = next((i for i, h in enumerate(hits, 1) if h.document.id == doc_id), None)
                    explain[label] = (
                        None if rank is None else {"rank": rank, "score": hits[rank - 1].score}
                    )
                explain.update(fused=fused[doc_id], fusion="rrf")
            out.append(SearchResult(docs[doc_id], fused[doc_id], explain))
        if options.dedupe:
            out = collapse_duplicates(out, explain=options.explain)
        return out[:pool]

    @staticmethod
    def _rerank(
        reranker: RerankerProtocol,
        query: str,
        hits: list[SearchResult],
        threshold: float | None,
        explain: bool,
    ) -> SearchResults:
        recall = {h.document.id: (rank, h.score, h.explain) for rank, h in enumerate(hits, 1)}
        reranked = [
            r
            for r in (reranker.rerank(query, list(hits)) if hits else [])
            if r.document.id in recall  # a reranker must not invent documents
        ]
        best = max((r.score for r in reranked), default=None)
        kept = []
        for hit in reranked:
            if threshold is not None and hit.score < threshold:
                continue
            if explain:
                rank, fused, before = recall[hit.document.id]
                base = hit.explain if hit.explain is not None else before
                hit.explain = {
                    **(base or {}),
                    "recall_rank": rank,
                    "fused": fused,
                    "rerank": hit.score,
                }
            kept.append(hit)
        return SearchResults(
            kept,
            refused=bool(reranked) and not kept,
            candidates=len(hits),
            best_relevance=best,
            min_relevance=threshold,
        )
