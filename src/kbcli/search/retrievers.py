"""Retrievers: BM25 (keyword), dense (semantic) and hybrid (fusion of both)."""

from __future__ import annotations

import inspect
import json
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kbcli.embedders.base import capabilities_of, embedder_info
from kbcli.embedders.simple import SimpleEmbedder
from kbcli.errors import InvalidOptionError
from kbcli.filters.model import and_filters, matches
from kbcli.protocols import (
    DocumentCatalog,
    EmbedderProtocol,
    KeywordIndex,
    VectorStoreProtocol,
    supports,
)
from kbcli.search.calibration import (
    Floors,
    calibrate,
    dense_cutoff,
    probe_vectors,
    probes_for,
    stored_floors,
)
from kbcli.search.combine import (
    by_source,
    confidence_reason,
    fuse,
    named_hit,
    option_alpha,
    tied,
)
from kbcli.search.diversity import collapse_duplicates, mmr_rerank
from kbcli.search.fusion import FUSION_WINDOW, confident_alpha, keyword_margin
from kbcli.stores.common import keyword_hit
from kbcli.stores.memory.keyword import index_documents
from kbcli.text.analysis import Analyzer, has_cjk
from kbcli.text.bm25 import SOURCE_WEIGHT
from kbcli.types import DEFAULT_ALPHA, Document, SearchOptions, SearchResult

if TYPE_CHECKING:  # numpy is imported when a pool's vectors are read, not by the keyword path
    import numpy as np
    from numpy.typing import NDArray

# Candidates recalled per route before fusion (and MMR's pool): enough that fusion can promote
# a document that one route ranks modestly, small enough to stay fast. Hybrid search recalls
# at least the window fusion reads as well (scoring.FUSION_WINDOW), so every fused score is
# the same at any k.
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
SCOPE_FLOORS = 16  # scopes whose relevance floors are kept per index generation
VECTOR_SLICE = 1024  # stored vectors read per call when MMR needs a pool's vectors


@runtime_checkable
class _Listable(Protocol):
    """A plain store that can at least list its documents (the reference ``list_all``)."""

    def list_all(self) -> list[Document]: ...


class KBWarning(UserWarning):
    """Something kbcli worked around, worth telling the developer once."""


_SCOPE_TAKERS: dict[type, bool] = {}
_UNSCOPED_NOTED: set[type] = set()


def takes_scope(store: KeywordIndex) -> bool:
    """True when ``store.keyword_search`` takes ``scope`` (every built-in store; a user's own
    may predate it). Asked of the class once."""
    cls = type(store)
    if cls not in _SCOPE_TAKERS:
        try:
            params = list(inspect.signature(cls.keyword_search).parameters.values())
        except (TypeError, ValueError):
            params = []
        _SCOPE_TAKERS[cls] = any(
            p.name == "scope" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params
        )
    return _SCOPE_TAKERS[cls]


def _note_unscoped(store: object) -> None:
    if type(store) not in _UNSCOPED_NOTED:
        _UNSCOPED_NOTED.add(type(store))
        warnings.warn(
            f"{type(store).__name__}.keyword_search takes no scope: scoped searches are "
            "filtered but scored with the whole index's statistics",
            KBWarning,
            stacklevel=4,
        )


class BM25Retriever:
    """Okapi BM25 keyword search (Lucene idf, ``k1`` and ``b`` as in the reference), with
    source context: a chunk scores its own BM25 plus ``source_weight`` times its source's
    (``None``: :data:`~kbcli.text.bm25.SOURCE_WEIGHT`, 2.0; a knowledge base built from the
    configuration hands in ``limits.source_weight``).

    Uses the store's keyword index (:class:`~kbcli.protocols.KeywordIndex`). A plain store
    that can only ``list_all`` is indexed in memory on each search (for small custom stores);
    a store that cannot list its documents has no keyword route (:attr:`available` is False
    and :meth:`search` raises :class:`~kbcli.errors.InvalidOptionError`).
    """

    def __init__(
        self,
        store: VectorStoreProtocol,
        k1: float = 1.5,
        b: float = 0.75,
        analyzer: Analyzer | None = None,
        source_weight: float | None = None,
    ) -> None:
        if source_weight is not None and source_weight < 0:
            raise ValueError(f"source_weight must be 0 or more, got {source_weight}")
        self.store = store
        self.k1 = k1
        self.b = b
        self.source_weight = source_weight
        if analyzer is None:
            analyzer = store.analyzer if supports(store, KeywordIndex) else Analyzer()
        self.analyzer = analyzer

    @property
    def available(self) -> bool:
        """True when the store can answer keyword searches."""
        return supports(self.store, KeywordIndex) or supports(self.store, _Listable)

    def search(
        self, query: str, k: int = 5, options: SearchOptions | None = None
    ) -> list[SearchResult]:
        """The ``k`` best BM25 matches among documents passing ``options.filter`` (and
        ``options.scope``, whose documents alone give the statistics)."""
        filter = options.checked_filter if options else None
        scope = options.checked_scope if options else None
        weight = self.default_source_weight()
        if options is not None and options.source_weight is not None:
            weight = options.source_weight
        store = self.store
        if supports(store, KeywordIndex):
            kwargs: dict[str, Any] = {"k1": self.k1, "b": self.b, "source_weight": weight}
            if scope is None:
                return store.keyword_search(query, k, filter, **kwargs)
            if takes_scope(store):
                return store.keyword_search(query, k, filter, scope=scope, **kwargs)
            _note_unscoped(store)
            return store.keyword_search(query, k, and_filters(scope, filter), **kwargs)
        if not supports(self.store, _Listable):
            raise InvalidOptionError(
                f"{type(self.store).__name__} has no keyword index and cannot list its "
                "documents: search it in semantic mode"
            )
        # indexed per search: a scope's documents alone make the index (its statistics)
        docs = [d for d in self.store.list_all() if matches(d.metadata, scope)]
        index = index_documents(docs, self.analyzer)
        allowed = (lambda i: matches(docs[i].metadata, filter)) if filter else None
        scored = index.search(query, k, k1=self.k1, b=self.b, source_weight=weight, allowed=allowed)
        return [keyword_hit(docs[s.doc], s, weight) for s in scored]

    def default_source_weight(self) -> float:
        """The constructor's ``source_weight``, else :data:`~kbcli.text.bm25.SOURCE_WEIGHT`."""
        return self.source_weight if self.source_weight is not None else SOURCE_WEIGHT


class DenseRetriever:
    """Semantic search: embeds the query and asks the store for the nearest vectors."""

    def __init__(self, store: VectorStoreProtocol, embedder: EmbedderProtocol) -> None:
        self.store = store
        self.embedder = embedder

    def search(
        self, query: str, k: int = 5, options: SearchOptions | None = None
    ) -> list[SearchResult]:
        """The ``k`` nearest documents (cosine) among those passing ``options.filter`` and
        ``options.scope`` (a dense score depends on no corpus statistic)."""
        filter = and_filters(options.checked_scope, options.checked_filter) if options else None
        if not query.strip():
            return []
        if supports(self.store, DocumentCatalog):
            self.store.check_embedder(embedder_info(self.embedder))
        return self.store.search(self.embedder.embed_query(query), k, filter)


class HybridRetriever:
    """Keyword, semantic or hybrid search over one store, chosen per query by ``options.mode``.

    Hybrid recalls a candidate pool from both routes and fuses them: ``weighted`` min-max
    scales each route over its best :data:`~kbcli.search.fusion.FUSION_WINDOW` hits and combines
    ``alpha * dense + (1 - alpha) * keyword``; ``rrf`` sums ``1 / (60 + rank)`` over the same
    window. A document found by one route only still counts. Each route is recalled at least
    that deep, so the ranking is the same at any ``k`` (:func:`fuse`).

    Alpha: ``options.alpha`` when the search chose it (``alpha_chosen``); otherwise, with a
    *weak* embedder (one with ``weak = True``, such as the built-in simple embedder, or one
    whose ``languages`` do not include the query's script, see :meth:`weak_for`)
    :data:`WEAK_DENSE_ALPHA`, so the keyword ranking decides and the dense route only breaks
    near-ties and fills up; otherwise the embedder's own ``alpha`` when it declares one (the
    static embedder: 0.3, measured), else the constructor's ``alpha``, else ``options.alpha``
    (:data:`~kbcli.types.DEFAULT_ALPHA` unless the search set one; a knowledge base built from
    the configuration hands the retriever ``limits.rerank_alpha``). That weight is then set
    per query by the keyword route's confidence
    (:func:`~kbcli.search.fusion.confident_alpha`): it falls to 0.001 as the keyword top-1
    file's lead over the second grows to
    :data:`~kbcli.search.fusion.KEYWORD_SURE_MARGIN` of its score, so a file the keyword route is
    sure of is not pushed down by look-alike vectors, and stays where the keyword route is
    unsure (``--explain`` prints the weight used and why).
    ``source_weight`` goes to the keyword route (:class:`BM25Retriever`).

    With a weak embedder a query none of whose words occurs in the index returns no hits in
    hybrid and semantic mode (its vectors match spelling, so they would fill the page with
    noise). Dense hits are held to the index's relevance floors for the embedder
    (:mod:`kbcli.search.calibration`, learned at ingest from nonsense queries,
    :func:`~kbcli.search.calibration.dense_cutoff`): a query that reaches no better dense score than
    nonsense does and whose words the keyword route does not find gets no hits, and a document
    only the dense route found is dropped under the hit floor (keyword hits always stay), so
    short lists are not filled up with look-alikes. A keyword hit whose title is the query (a
    command name, a file named after it) ranks first in hybrid mode: the keyword route is sure
    there, and dense vectors of one short word are not (see :func:`fuse`, docs/quality.md).

    After fusion, chunks with identical text collapse to the best one (``options.dedupe``) and
    ``options.mmr`` re-orders the candidate pool for diversity (see :mod:`kbcli.search.diversity`).
    """

    def __init__(
        self,
        store: VectorStoreProtocol,
        embedder: EmbedderProtocol | None = None,
        alpha: float | None = None,
        source_weight: float | None = None,
    ) -> None:
        if embedder is None:
            embedder = SimpleEmbedder()
        if alpha is not None and not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
        self.store = store
        self.embedder = embedder
        self.alpha = alpha
        self.keyword = BM25Retriever(store, source_weight=source_weight)
        self.dense = DenseRetriever(store, embedder)
        self._noted = False
        self._scope_floors: dict[tuple[str, int], Floors | None] = {}  # scope_floors
        self._probe_vectors: dict[str, Sequence[float]] = {}

    def default_alpha(self) -> float:
        """The alpha used when neither the options nor the constructor set one."""
        return self.alpha if self.alpha is not None else DEFAULT_ALPHA

    @property
    def weak_embedder(self) -> bool:
        """True when the embedder says its vectors capture spelling rather than meaning."""
        return capabilities_of(self.embedder).weak

    def weak_for(self, query: str) -> bool:
        """True when the dense route cannot be trusted for ``query``: the embedder is weak, or
        it declares the ``languages`` it knows, none of them Chinese or Japanese, and the query
        is written in those scripts (all-MiniLM-L6-v2 on Chinese: CMRC nDCG@10 0.10)."""
        if self.weak_embedder:
            return True
        languages = capabilities_of(self.embedder).languages
        if languages is None or set(languages) & CJK_LANGUAGES:
            return False
        return has_cjk(query)

    def effective_alpha(
        self,
        options: SearchOptions,
        query: str = "",
        keyword_hits: list[SearchResult] | None = None,
    ) -> float:
        """The dense weight weighted fusion uses for ``options`` and ``query`` (see the class
        docstring); given the query's ``keyword_hits``, the per-query weight."""
        if options.alpha_chosen:
            return option_alpha(options)
        if self.weak_for(query):
            return WEAK_DENSE_ALPHA
        base = self.base_alpha(options)
        sure = self.sure_margin
        if keyword_hits is None or sure is None:
            return base
        return confident_alpha(base, keyword_margin(by_source(keyword_hits)), sure)

    @property
    def sure_margin(self) -> float | None:
        """The keyword lead at which this embedder's dense weight has fallen to the least
        (:func:`~kbcli.search.fusion.confident_alpha`), when the embedder declares one
        (``keyword_sure_margin``, measured per model); None: a fixed weight for every query."""
        return capabilities_of(self.embedder).keyword_sure_margin

    def base_alpha(self, options: SearchOptions) -> float:
        """The dense weight before the per-query rule: the embedder's own measured ``alpha``
        (the static embedder's), else the constructor's, else ``options.alpha``."""
        hint = capabilities_of(self.embedder).alpha
        if hint is not None:
            return hint
        return self.alpha if self.alpha is not None else option_alpha(options)

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
            if self._nothing_matches(query, options):
                return []
            found = self.dense.search(query, fetch, options)
            floor = None
            if not self.weak_embedder:  # a weak one's semantic mode is gated by words (above)
                best = found[0].score if found else 0.0
                floors = self.relevance_floors(options)
                floor = dense_cutoff(
                    floors,
                    best,
                    floors is not None
                    and best < floors.floor
                    and self.keyword.available
                    and bool(self.keyword.search(query, 1, options)),
                    self.weak_for(query),
                )
            hits = [h for h in found if floor is None or h.score >= floor]
            hits = self._label(hits, "dense", options)
            if options.explain and floor is not None:
                for hit in hits:
                    hit.explain["floor"] = floor  # type: ignore[index]
        else:
            # one past fetch: whether the last hit wanted ties with the next (see below)
            pool = max(k * FUSION_POOL_FACTOR, FUSION_POOL_MIN, FUSION_WINDOW, fetch + 1)
            if not self.keyword.available:
                self._note_semantic_only()
                return self._finish(
                    self._label(self.dense.search(query, fetch, options), "dense", options),
                    k,
                    options,
                )
            keyword_hits = self.keyword.search(query, pool, options)
            if not keyword_hits and self.weak_embedder:
                return []  # a weak embedder's vectors alone are noise, not hits
            weak = not options.alpha_chosen and self.weak_for(query)
            if (
                weak
                and options.fusion != "rrf"
                and len(keyword_hits) > fetch
                and not tied(keyword_hits[: min(fetch + 1, FUSION_WINDOW)])
            ):
                # A weak dense route could only break exact keyword ties in the keyword
                # window here (fuse), and the hits wanted (and the next) have none there: skip
                # it (no vector load, no numpy). It is needed to fill up a short keyword list
                # or to order tied hits, at every k.
                dense_hits = []
            else:
                dense_hits = self.dense.search(query, pool, options)
            # What the keyword route is sure of, and the page named by the query, come from
            # its window only (scoring.FUSION_WINDOW): the same at any recall depth.
            window = keyword_hits[:FUSION_WINDOW]
            alpha = self.effective_alpha(options, query, window)
            hits = fuse(
                keyword_hits,
                dense_hits,
                fetch,
                options,
                alpha,
                keyword_first=weak,
                floor=dense_cutoff(
                    self.relevance_floors(options) if dense_hits else None,
                    max((h.score for h in dense_hits), default=0.0),
                    bool(keyword_hits),
                    weak,
                ),
                named=self.named_hit(query, window),
            )
            if options.explain:
                notes: dict[str, Any] = {}
                if weak and options.fusion == "weighted":
                    notes["alpha_note"] = self.keyword_first_reason(query, options)
                elif (
                    options.fusion == "weighted"
                    and not options.alpha_chosen
                    and self.sure_margin is not None
                ):
                    margin = keyword_margin(by_source(window))
                    notes["keyword_margin"] = round(margin, 4)
                    notes["alpha_note"] = confidence_reason(
                        self.base_alpha(options), margin, self.sure_margin
                    )
                # index-wide counts: never shown inside a scope
                coverage = None if options.scope else self.vector_coverage()
                if coverage:
                    notes["dense_note"] = coverage
                for hit in hits:
                    hit.explain.update(notes)  # type: ignore[union-attr]
        return self._finish(hits, k, options)

    def relevance_floors(self, options: SearchOptions | None = None) -> Floors | None:
        """The index's calibrated floors for this embedder's dense scores (None: the store
        keeps no index metadata, or no ingest has calibrated them yet). Under a scope
        (``options.scope``) of a calibrated index they are calibrated over the scope's vectors
        alone (:meth:`scope_floors`): hidden chunks must not move them."""
        if not supports(self.store, DocumentCatalog):
            return None
        floors = stored_floors(self.store, embedder_info(self.embedder))
        scope = options.scope if options is not None else None
        if floors is None or not scope:
            return floors
        return self.scope_floors(scope)

    def scope_floors(self, scope: dict[str, Any]) -> Floors | None:
        """The floors :func:`~kbcli.search.calibration.calibrate_index` would record for an index of
        ``scope``'s chunks alone (None: none of them has a vector): the probes searched inside
        the scope, once per scope and index generation (the probes' vectors once)."""
        store = self.store
        if not supports(store, DocumentCatalog):
            return None
        key = (json.dumps(scope, sort_keys=True, default=str), store.version)
        if key not in self._scope_floors:
            probes = probes_for(capabilities_of(self.embedder).languages)
            vectors = self._probe_vectors
            missing = [p for p in probes if p not in vectors]
            if missing:  # those the ingest kept, else one batch (a search writes nothing)
                found_vectors = probe_vectors(store, self.embedder, probes, keep=False)
                vectors.update(zip(probes, found_vectors))
            found: list[bool] = []

            def search(vector: Sequence[float], k: int) -> list[SearchResult]:
                hits = self.store.search(list(vector), k, scope)
                found.append(bool(hits))
                return hits

            result = calibrate(vectors.__getitem__, search, probes)
            floors = Floors(result["floor"], result["hit_floor"]) if any(found) else None
            if len(self._scope_floors) >= SCOPE_FLOORS:
                self._scope_floors.pop(next(iter(self._scope_floors)))
            self._scope_floors[key] = floors
        return self._scope_floors[key]

    def named_hit(self, query: str, keyword_hits: list[SearchResult]) -> str | None:
        """:func:`named_hit` with this retriever's analyzer."""
        return named_hit(query, keyword_hits, self.keyword.analyzer)

    def vector_coverage(self) -> str | None:
        """For ``--explain``: how many chunks the dense route can see, when some still lack
        vectors (an ingest fills them in; keyword search has them all already)."""
        if not supports(self.store, DocumentCatalog):
            return None
        stats = self.store.stats()
        chunks, vectors = stats.get("chunks"), stats.get("vectors")
        if not isinstance(chunks, int) or not isinstance(vectors, int) or vectors >= chunks:
            return None
        return (
            f"the dense route saw {vectors:,} of {chunks:,} chunks: the others have no vector "
            "yet (kb ingest fills them in)"
        )

    def keyword_first_reason(self, query: str, options: SearchOptions) -> str:
        """Why weighted fusion ranks ``query`` keyword-first with a tiny alpha (what
        ``--explain`` prints beside it): the embedder is weak, or does not know the query's
        script."""
        name = embedder_info(self.embedder).provider
        configured = self.alpha if self.alpha is not None else option_alpha(options)
        if self.weak_embedder:
            why = f"the {name} embedder is weak"
            strong = "a strong embedder"
        else:
            why = f"the {name} embedder does not know Chinese or Japanese"
            strong = "queries in its languages"
        return f"keyword-first: {why}; limits.rerank_alpha {configured:g} applies to {strong}"

    def _nothing_matches(self, query: str, options: SearchOptions) -> bool:
        """True when the embedder is weak and no word of ``query`` occurs in any document
        passing the filter: its character-hash vectors would return look-alike noise."""
        if not self.weak_embedder or not self.keyword.available:
            return False
        return not self.keyword.search(query, 1, options)

    def _finish(
        self, hits: list[SearchResult], k: int, options: SearchOptions
    ) -> list[SearchResult]:
        if options.dedupe:
            hits = collapse_duplicates(hits, explain=options.explain)
        if options.mmr is not None:
            hits = self._mmr(hits, k, options)
        return hits[:k]

    def _note_semantic_only(self) -> None:
        if not self._noted:
            self._noted = True
            warnings.warn(
                f"{type(self.store).__name__} has no keyword index: hybrid search uses the "
                "semantic route only",
                KBWarning,
                stacklevel=3,
            )

    def _mmr(self, hits: list[SearchResult], k: int, options: SearchOptions) -> list[SearchResult]:
        vectors = None
        if options.mode != "keyword" and supports(self.store, DocumentCatalog):
            vectors = _pool_vectors(self.store, [h.document.id for h in hits])
        analyzer = self.keyword.analyzer
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


def _pool_vectors(store: DocumentCatalog, ids: list[str]) -> NDArray[np.float32] | None:
    """The stored vectors of ``ids`` as one float32 matrix, read a slice at a time (a
    pool's vectors as Python lists took 30 bytes a number), or None when one is missing
    or of another length."""
    import numpy as np

    matrix = None
    for start in range(0, len(ids), VECTOR_SLICE):
        part = ids[start : start + VECTOR_SLICE]
        found = {d.id: d.embedding for d in store.get(part, with_embeddings=True)}
        for row, doc_id in enumerate(part, start):
            vector = found.get(doc_id)
            if vector is None or not len(vector):
                return None
            if matrix is None:
                matrix = np.empty((len(ids), len(vector)), dtype=np.float32)
            if len(vector) != matrix.shape[1]:
                return None
            matrix[row] = vector
    return matrix
