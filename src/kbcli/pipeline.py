"""The ingest pipeline (load -> normalise -> chunk -> embed -> store), the search pipeline
(recall -> fuse -> rerank -> threshold) and the KnowledgeBase facade over both."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .embedders.base import EmbedderInfo, embedder_info
from .protocols import (
    DocumentCatalog,
    EmbeddingCache,
    SectionChunkerProtocol,
    SectionLoaderProtocol,
    missing_methods,
)
from .types import Document, SearchOptions, SearchResult, SearchResults, Section

if TYPE_CHECKING:  # pragma: no cover
    from .answer import Answer

DEFAULT_BATCH = 64  # texts per embedding request when an embedder does not say


def _new_id() -> str:
    return uuid.uuid4().hex


class LazyEmbedder:
    """Resolves the configured embedder on first use, so keyword-only work never needs an API
    key or a model.

    With no provider named in the configuration, an index that already records an embedder
    keeps using that one (an API key appearing in the environment later must not switch it);
    otherwise the choice is automatic. ``on_note`` receives a one-line note when the choice was
    automatic and the index records no embedder yet (its first ingest), or when an API key in
    the environment would now choose another embedder than the one the index keeps; an index
    built with a local embedder and no key says nothing.
    """

    def __init__(
        self,
        config: Any = None,
        on_note: Callable[[str], None] | None = None,
        recorded: Callable[[], EmbedderInfo | None] | None = None,
    ):
        self._config = config
        self._on_note = on_note
        self._recorded = recorded
        self._embedder: Any = None

    @property
    def resolved(self) -> Any:
        """The real embedder (resolved now if needed)."""
        if self._embedder is None:
            from .config import get_config
            from .embedders.resolve import choose_embedder

            config = self._config or get_config()
            recorded = self._recorded() if self._recorded is not None else None
            if recorded is not None and not config.rag.embedding.provider_set:
                model = recorded.model if recorded.provider in ("openai", "gemini") else None
                embedder, _ = choose_embedder(config, recorded.provider, model)
                note = None
                automatic = _automatic_provider()
                if automatic != recorded.provider and automatic != "simple":
                    # Only when an API key now in the environment would choose another
                    # embedder; an index built with local, static or e5 and no key says
                    # nothing (that note came out on every search).
                    note = f"Using {recorded.describe()}, the embedder this index was built with"
            else:
                embedder, note = choose_embedder(config)
            if note and self._on_note:
                self._on_note(note)
            self._embedder = embedder
        return self._embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed passages with the resolved embedder."""
        return self.resolved.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        """Embed a query with the resolved embedder."""
        return self.resolved.embed_query(text)

    @property
    def info(self) -> EmbedderInfo:
        """Identity of the resolved embedder."""
        return embedder_info(self.resolved)

    @property
    def batch_size(self) -> int:
        """Texts the resolved embedder sends per request."""
        return int(getattr(self.resolved, "batch_size", DEFAULT_BATCH) or DEFAULT_BATCH)

    @property
    def weak(self) -> bool:
        """True when the resolved embedder captures spelling rather than meaning."""
        return bool(getattr(self.resolved, "weak", False))

    @property
    def languages(self) -> frozenset[str] | None:
        """The languages the resolved embedder knows (None: any)."""
        return getattr(self.resolved, "languages", None)

    @property
    def alpha(self) -> float | None:
        """The hybrid dense weight the resolved embedder asks for (None: the configured one)."""
        return getattr(self.resolved, "alpha", None)


def _remembered(store: Any) -> EmbedderInfo | None:
    """The embedder an ingest chose for ``store`` before storing any vector."""
    from .embedders.resolve import remembered_choice

    return remembered_choice(store)


def _automatic_provider() -> str:
    """The provider an automatic choice would pick now (by API keys), without building it."""
    from .embedders._settings import first_env
    from .embedders.resolve import AUTO_ORDER, KEY_ENV

    for candidate in AUTO_ORDER:
        if candidate == "simple" or first_env(*KEY_ENV[candidate])[1]:
            return candidate
    return "simple"


def _add_lines(chunks: list[Section], sections: list[Section]) -> None:
    """Give each chunk with ``char_start``/``char_end`` its ``line``/``line_end`` (1-based) in
    the text its offsets point into: the sections joined by a blank line, as loaded."""
    from .ingest.chunkers import SECTION_SEPARATOR

    text = SECTION_SEPARATOR.join(s.text for s in sections)
    at, line = 0, 1  # chunks come in order: count newlines once, incrementally
    for chunk in chunks:
        start, end = chunk.metadata.get("char_start"), chunk.metadata.get("char_end")
        if not isinstance(start, int) or not isinstance(end, int):
            continue
        if start < at:
            at, line = 0, 1
        line += text.count("\n", at, start)
        at = start
        chunk.metadata["line"] = line
        chunk.metadata["line_end"] = line + text.count("\n", start, max(start, end - 1))


class IngestPipeline:
    """Turns text and files into stored, embedded chunks.

    Defaults: :class:`~kbcli.embedders.SimpleEmbedder`, :class:`~kbcli.stores.InMemoryStore`,
    the default loader, and the configured chunker with ``limits.chunk_size`` /
    ``limits.chunk_overlap``. Structure-aware chunkers (with ``chunk_sections``) see the text as
    loaded and the normaliser cleans each chunk; plain chunkers get normalised text (reference).
    """

    def __init__(
        self,
        embedder: Any = None,
        store: Any = None,
        loader: Any = None,
        normalizer: Any = None,
        chunker: Any = None,
        *,
        config: Any = None,
    ):
        self.config = config  # None: the configuration found by the default lookup
        if embedder is None:
            from .embedders import SimpleEmbedder

            embedder = SimpleEmbedder()
        if store is None:
            from .stores import InMemoryStore

            store = InMemoryStore()
        self.embedder = embedder
        self.store = store
        # Loader, normaliser and chunker defaults are built on first use: constructing a
        # pipeline (every KnowledgeBase does) must stay cheap and need no parser.
        self._loader = loader
        self._normalizer = normalizer
        self._chunker = chunker

    @property
    def loader(self) -> Any:
        """The document loader (default: :class:`~kbcli.ingest.DefaultDocumentLoader`)."""
        if self._loader is None:
            from .ingest import DefaultDocumentLoader

            config = self._config()
            limits = config.limits
            self._loader = DefaultDocumentLoader(
                max_file_mb=limits.max_file_mb, timeout=limits.file_timeout, ocr=config.ocr
            )
        return self._loader

    @property
    def chunker(self) -> Any:
        """The chunker (default: ``rag.chunker`` with ``limits.chunk_size/chunk_overlap``)."""
        if self._chunker is None:
            from .ingest import make_chunker

            config = self._config()
            self._chunker = make_chunker(
                config.rag.chunker, config.limits.chunk_size, config.limits.chunk_overlap
            )
        return self._chunker

    def _config(self) -> Any:
        if self.config is None:
            from .config import get_config

            return get_config()
        return self.config

    @property
    def normalizer(self) -> Any:
        """The normaliser applied to each chunk (default: whitespace collapsing)."""
        if self._normalizer is None:
            from .ingest import WhitespaceNormalizer

            self._normalizer = WhitespaceNormalizer()
        return self._normalizer

    # --- chunking ----------------------------------------------------------------------------

    def chunk_sections(self, sections: list[Section]) -> list[Section]:
        """Chunk loaded sections; each chunk keeps its section's metadata (page, heading...).

        A chunker that reads structure (``normalize_first`` False) sees the text as loaded and
        each chunk is normalised; otherwise each section is normalised, then chunked (the
        reference order)."""
        chunker = self.chunker
        if isinstance(chunker, SectionChunkerProtocol) and not chunker.normalize_first:
            chunks = chunker.chunk_sections(sections)
            _add_lines(chunks, sections)
            cleaned = [Section(self.normalizer.normalize(c.text), dict(c.metadata)) for c in chunks]
        else:
            normalize = self.normalizer.normalize
            normalized = [Section(normalize(s.text), dict(s.metadata)) for s in sections]
            if isinstance(chunker, SectionChunkerProtocol):
                cleaned = chunker.chunk_sections(normalized)
                _add_lines(cleaned, normalized)
            else:
                cleaned = [
                    Section(c, dict(section.metadata))
                    for section in normalized
                    for c in chunker.chunk(section.text)
                ]
        return [c for c in cleaned if c.text.strip()]

    def load_sections(self, path: str | os.PathLike[str]) -> list[Section]:
        """Load a file as sections (one section when the loader has no structure)."""
        if isinstance(self.loader, SectionLoaderProtocol):
            return list(self.loader.load_sections(path))
        return [Section(self.loader.load(path), {})]

    # --- embedding and storing ---------------------------------------------------------------

    def _check_embedder(self) -> EmbedderInfo:
        info = embedder_info(self.embedder)
        if isinstance(self.store, DocumentCatalog):
            self.store.check_embedder(info)
        return info

    def cached_vectors(self, texts: list[str]) -> dict[str, list[float]]:
        """Vectors of ``texts`` already in the store's embedding cache (none without one)."""
        if not texts or not isinstance(self.store, EmbeddingCache):
            return {}
        return self.store.cached_embeddings(embedder_info(self.embedder), texts)

    def embed(self, texts: list[str], *, remember: bool = True) -> list[list[float]]:
        """Vectors for ``texts``, reusing the store's embedding cache where it has one.

        ``remember=False`` leaves writing new vectors to the cache to the caller (the store's
        ``replace_file`` does it in the same transaction as the chunks).
        """
        if not texts:
            return []
        if not isinstance(self.store, EmbeddingCache):
            return self.embedder.embed_documents(texts)
        key = embedder_info(self.embedder)
        cached = self.store.cached_embeddings(key, texts)
        missing = [t for t in dict.fromkeys(texts) if t not in cached]
        if missing:
            fresh = self.embedder.embed_documents(missing)
            cached.update(zip(missing, fresh))
            if remember:
                self.store.cache_embeddings(embedder_info(self.embedder), dict(zip(missing, fresh)))
        return [cached[t] for t in texts]

    def build_documents(
        self, chunks: list[Section], metadata: dict[str, Any] | None
    ) -> list[Document]:
        """Documents for chunks: shared metadata + chunk metadata + ``chunk_index`` + the
        document's ``title`` (given in ``metadata``, else its first heading, else the file
        name of ``metadata["source"]``; see :func:`kbcli.analysis.document_title`)."""
        from .analysis import TITLE_KEY, document_title

        now = datetime.now(timezone.utc)
        shared = dict(metadata or {})
        if not shared.get(TITLE_KEY):
            source = shared.get("source")
            title = document_title(
                (c.metadata.get("heading") for c in chunks),
                source if isinstance(source, str) else None,
            )
            if title:
                shared[TITLE_KEY] = title
        docs = []
        for index, chunk in enumerate(chunks):
            meta = {**shared, **chunk.metadata, "chunk_index": index}
            docs.append(Document(id=_new_id(), text=chunk.text, metadata=meta, created_at=now))
        return docs

    def _store(self, docs: list[Document], source: str | None = None) -> list[str]:
        info = self._check_embedder()
        vectors = self.embed([d.text for d in docs])
        info = embedder_info(self.embedder) if info.dimension is None else info
        if isinstance(self.store, DocumentCatalog):
            if source is not None:
                return self.store.replace_source(source, docs, vectors, embedder=info)
            return self.store.add(docs, vectors, embedder=info) if docs else []
        # A plain reference store: add only (it cannot replace a file's earlier chunks).
        return self.store.add(docs, vectors) if docs else []

    # --- public API --------------------------------------------------------------------------

    def ingest_text(self, text: str, metadata: dict[str, Any] | None = None) -> list[str]:
        """Normalise, chunk (metadata gets ``chunk_index``), batch-embed and store ``text``."""
        chunks = self.chunk_sections([Section(text, {})])
        if not chunks:
            return []
        return self._store(self.build_documents(chunks, metadata))

    def ingest_file(
        self, path: str | os.PathLike[str], metadata: dict[str, Any] | None = None
    ) -> list[str]:
        """Load, chunk, embed and store a file; metadata gets ``source`` (the absolute path).

        The file's previous chunks (same ``source``) are replaced in one step.
        """
        resolved = Path(path).expanduser().resolve()
        chunks = self.chunk_sections(self.load_sections(resolved))
        source = str(resolved)
        docs = self.build_documents(chunks, {**(metadata or {}), "source": source})
        return self._store(docs, source=source)


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

    ``config`` (a :class:`~kbcli.config.Config`) supplies ``rag.rerank`` defaults and, with
    :meth:`configured`, the reranker and rewriter themselves, built on first use.
    """

    def __init__(
        self,
        retriever: Any,
        reranker: Any = None,
        *,
        candidates: int | None = None,
        min_relevance: float | None = None,
        rewriter: Any = None,
        config: Any = None,
    ):
        self.retriever = retriever
        self._reranker = reranker
        self._rewriter = rewriter
        self._pending_reranker: Any = None
        self._pending_rewriter: Any = None
        self.candidates = candidates
        self.min_relevance = min_relevance
        self.config = config

    @classmethod
    def configured(cls, retriever: Any, config: Any, reranker: Any = None) -> RAGPipeline:
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
    def reranker(self) -> Any:
        """The reranker (None: searches are single-stage)."""
        if self._pending_reranker is not None:
            from .rerankers import build_reranker

            config, self._pending_reranker = self._pending_reranker, None
            self._reranker = build_reranker(config)
        return self._reranker

    @reranker.setter
    def reranker(self, value: Any) -> None:
        self._pending_reranker = None
        self._reranker = value

    @property
    def has_reranker(self) -> bool:
        """True when searches rerank by default (without building the reranker)."""
        return self._pending_reranker is not None or self._reranker is not None

    @property
    def rewriter(self) -> Any:
        """The query rewriter (None: the query is recalled as written)."""
        if self._pending_rewriter is not None:
            from .rewrite import build_rewriter

            config, self._pending_rewriter = self._pending_rewriter, None
            self._rewriter = build_rewriter(config)
        return self._rewriter

    @rewriter.setter
    def rewriter(self, value: Any) -> None:
        self._pending_rewriter = None
        self._rewriter = value

    def _rerank_settings(self) -> Any:
        from .config import RerankConfig

        return self.config.rag.rerank if self.config is not None else RerankConfig()

    def search(
        self, query: str, options: SearchOptions | None = None, *, pool: Any = None
    ) -> SearchResults:
        """Run the search described by ``options`` (default :class:`SearchOptions`).

        ``pool`` lets a caller that groups or filters hits afterwards (``kb search``: results
        by file, quoted phrases) choose which recalled hits go on: it is called as
        ``pool(recall, size)``, ``recall(depth)`` giving the best ``depth`` recalled hits; with
        a reranker ``size`` is the candidate pool (``candidates``, at least 2×k) and it
        returns at most that many, in recall order, which are all reranked; without one
        ``size`` is None and it recalls as deep as it needs. Every hit left is returned (the
        caller cuts to its k)."""
        options = options or SearchOptions()
        k = options.k
        reranker = self._reranker_for(options)
        rewriter = self._rewriter_for(options)
        settings = self._rerank_settings()

        def recall(depth: int) -> list[SearchResult]:
            return self._recall(query, depth, options, rewriter)

        if reranker is None:
            if pool is None:
                hits = recall(k)
            else:
                floor = options.min_score
                hits = pool(
                    lambda depth: [h for h in recall(depth) if floor is None or h.score >= floor],
                    None,
                )
            results = SearchResults(hits)
        else:
            candidates = options.candidates or self.candidates or settings.candidates
            size = max(candidates, 2 * k)
            hits = recall(size) if pool is None else pool(recall, size)[:size]
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
        return SearchResults(
            kept[:k] if pool is None else kept,
            refused=results.refused,
            candidates=results.candidates,
            best_relevance=results.best_relevance,
            min_relevance=results.min_relevance,
        )

    def _reranker_for(self, options: SearchOptions) -> Any:
        from .errors import InvalidOptionError

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

    def _rewriter_for(self, options: SearchOptions) -> Any:
        mode = options.rewrite
        if mode is None:
            return self.rewriter
        if mode == "none":
            return None
        current = self.rewriter
        if current is not None and hasattr(current, "with_mode"):
            return current.with_mode(mode)
        from .config import get_config
        from .rewrite import build_rewriter

        return build_rewriter(self.config or get_config(), mode)

    def _recall(
        self, query: str, pool: int, options: SearchOptions, rewriter: Any
    ) -> list[SearchResult]:
        first = self.retriever.search(query, pool, options)
        routes = rewriter.routes(query, options.mode) if rewriter is not None else []
        if not routes:
            return first
        from dataclasses import replace

        from .scoring import rrf_fusion

        ranked = [("query", first)]
        for label, text, mode in routes:
            ranked.append((label, self.retriever.search(text, pool, replace(options, mode=mode))))
        fused = rrf_fusion(*[[h.document.id for h in hits] for _, hits in ranked])
        docs: dict[str, Document] = {}
        for _, hits in ranked:
            for hit in hits:
                docs.setdefault(hit.document.id, hit.document)
        order = sorted(fused, key=lambda doc_id: (-fused[doc_id], doc_id))
        out = []
        for doc_id in order:
            explain = None
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
            from .diversity import collapse_duplicates

            out = collapse_duplicates(out, explain=options.explain)
        return out[:pool]

    @staticmethod
    def _rerank(
        reranker: Any,
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


class KnowledgeBase:
    """One object to add, ingest and search knowledge.

    Defaults: an :class:`~kbcli.stores.InMemoryStore`, the :class:`~kbcli.embedders.SimpleEmbedder`
    and a :class:`~kbcli.retrievers.HybridRetriever` over them. Use :meth:`open` for the
    persistent SQLite knowledge base configured in ``jianmu.yaml``.
    """

    def __init__(
        self,
        store: Any = None,
        embedder: Any = None,
        retriever: Any = None,
        reranker: Any = None,
        loader: Any = None,
        normalizer: Any = None,
        chunker: Any = None,
        *,
        config: Any = None,
    ):
        from .embedders import SimpleEmbedder
        from .retrievers import HybridRetriever
        from .stores import InMemoryStore

        self.store = store if store is not None else InMemoryStore()
        self.embedder = embedder if embedder is not None else SimpleEmbedder()
        self.retriever = retriever or HybridRetriever(self.store, self.embedder)
        self.reranker = reranker
        self.ingestor = IngestPipeline(
            self.embedder, self.store, loader, normalizer, chunker, config=config
        )
        self.pipeline = RAGPipeline(self.retriever, reranker, config=config)

    @classmethod
    def from_config(cls, config: Any = None, **overrides: Any) -> KnowledgeBase:
        """A knowledge base built from ``jianmu.yaml``: the one place that wires the parts.

        ``config`` defaults to the configuration found by the usual lookup. Each part comes
        from the configuration unless given in ``overrides``: ``store`` (else ``store.backend``
        with its settings, opening ``db`` or ``paths.knowledge_db``; ``create``,
        ``busy_timeout``), ``embedder`` (else the configured one, resolved lazily so keyword
        search never needs an API key or a model; ``on_note`` receives its one-line note),
        ``retriever`` (else hybrid with ``limits.rerank_alpha`` and ``limits.source_weight``),
        ``reranker``, ``loader``, ``normalizer`` and ``chunker`` (else ``rag.chunker`` with the
        ``limits`` sizes).
        """
        from .config import get_config
        from .retrievers import HybridRetriever
        from .stores import build_store

        allowed = {
            "store", "embedder", "retriever", "reranker", "loader", "normalizer", "chunker",
            "db", "create", "busy_timeout", "on_note",
        }  # fmt: skip
        unknown = sorted(set(overrides) - allowed)
        if unknown:
            raise TypeError(f"from_config() got unexpected overrides: {', '.join(unknown)}")
        config = config or get_config()
        store = overrides.get("store")
        if store is None:
            store = build_store(
                config,
                db=overrides.get("db"),
                create=overrides.get("create", True),
                busy_timeout=overrides.get("busy_timeout"),
            )
        embedder = overrides.get("embedder")
        if embedder is None:
            recorded = (
                (lambda: store.embedder_info or _remembered(store))
                if isinstance(store, DocumentCatalog)
                else None
            )
            embedder = LazyEmbedder(config, overrides.get("on_note"), recorded)
        retriever = overrides.get("retriever") or HybridRetriever(
            store,
            embedder,
            alpha=config.limits.rerank_alpha,
            source_weight=config.limits.source_weight,
        )
        kb = cls(
            store=store,
            embedder=embedder,
            retriever=retriever,
            reranker=overrides.get("reranker"),
            loader=overrides.get("loader"),
            normalizer=overrides.get("normalizer"),
            chunker=overrides.get("chunker"),
            config=config,
        )
        # rag.rerank / rag.rewrite: built on the first search that uses them.
        kb.pipeline = RAGPipeline.configured(retriever, config, overrides.get("reranker"))
        return kb

    @classmethod
    def open(
        cls,
        db: str | os.PathLike[str] | None = None,
        *,
        config: Any = None,
        embedder: Any = None,
        reranker: Any = None,
        on_note: Callable[[str], None] | None = None,
        busy_timeout: float | None = None,
        create: bool = True,
    ) -> KnowledgeBase:
        """The knowledge base at ``db`` (default ``paths.knowledge_db``), set up from config
        (see :meth:`from_config`). ``create=False`` raises :class:`~kbcli.errors.StoreError`
        instead of creating a new database when none exists."""
        overrides = {"embedder": embedder, "reranker": reranker, "on_note": on_note}
        return cls.from_config(
            config,
            db=db,
            create=create,
            busy_timeout=busy_timeout,
            **{k: v for k, v in overrides.items() if v is not None},
        )

    @property
    def analyzer(self) -> Any:
        """The analyzer of the store's keyword index (the default one for a plain store)."""
        from .protocols import KeywordIndex

        if isinstance(self.store, KeywordIndex):
            return self.store.analyzer
        from .analysis import Analyzer

        return Analyzer()

    @property
    def _ingest(self) -> IngestPipeline:
        """The ingest pipeline (the reference's attribute name)."""
        return self.ingestor

    @property
    def _rag(self) -> RAGPipeline:
        """The search pipeline (the reference's attribute name)."""
        return self.pipeline

    def add(self, text: str, metadata: dict[str, Any] | None = None, id: str | None = None) -> str:
        """Store ``text`` as one document (not chunked) and return its id."""
        doc = Document(id=id or _new_id(), text=text, metadata=dict(metadata or {}))
        return self.ingestor._store([doc])[0]

    def ingest_text(self, text: str, metadata: dict[str, Any] | None = None) -> list[str]:
        """Chunk, embed and store ``text``; returns the chunk ids."""
        return self.ingestor.ingest_text(text, metadata)

    def ingest_file(
        self, path: str | os.PathLike[str], metadata: dict[str, Any] | None = None
    ) -> list[str]:
        """Load, chunk, embed and store a file (replacing its earlier chunks); returns chunk ids."""
        return self.ingestor.ingest_file(path, metadata)

    def search(
        self,
        query: str,
        k: int = 5,
        mode: str = "hybrid",
        filter: dict[str, Any] | None = None,
        **options: Any,
    ) -> list[SearchResult]:
        """Search; extra keyword arguments are :class:`SearchOptions` fields (alpha, fusion...)."""
        return self.pipeline.search(query, SearchOptions(k=k, mode=mode, filter=filter, **options))

    def search_with(
        self, query: str, options: SearchOptions, *, pool: Any = None
    ) -> list[SearchResult]:
        """Search with a ready :class:`SearchOptions` (``pool``: see
        :meth:`RAGPipeline.search`)."""
        if pool is None:
            return self.pipeline.search(query, options)
        return self.pipeline.search(query, options, pool=pool)

    def ask(
        self,
        question: str,
        k: int = 8,
        mode: str = "hybrid",
        filter: dict[str, Any] | None = None,
        *,
        model: str | None = None,
        prompt: str | None = None,
        strict: bool = False,
        min_coverage: float | None = None,
        on_text: Callable[[str], None] | None = None,
        chat: Any = None,
        dry_run: bool = False,
        **options: Any,
    ) -> Answer:
        """Answer ``question`` from the best ``k`` passages, citing them as ``[n]``, or refuse
        without calling the model when none is good enough (``rag.answer``; see
        :func:`kbcli.answer.ask`). Extra keyword arguments are :class:`SearchOptions` fields.
        Returns a :class:`~kbcli.answer.Answer`."""
        from .answer import ask

        return ask(
            self,
            question,
            SearchOptions(k=k, mode=mode, filter=filter, **options),
            model=model,
            prompt=prompt,
            strict=strict,
            min_coverage=min_coverage,
            on_text=on_text,
            chat=chat,
            dry_run=dry_run,
        )

    def delete(self, ids: list[str]) -> bool:
        """Delete documents by id; True when at least one existed."""
        return self.store.delete(list(ids))

    def scoped(self, filter: dict[str, Any]) -> Any:
        """A read-only :class:`~kbcli.scope.ScopedKnowledgeBase` that only sees documents
        passing ``filter``, on every search route, listing, count and lookup."""
        from .errors import FilterError
        from .filters import validate_filter
        from .scope import ScopedKnowledgeBase

        if not validate_filter(filter):
            raise FilterError("A scope needs a non-empty filter, e.g. {'tenant': 'acme'}")
        return ScopedKnowledgeBase(self, filter)

    def as_tool(self, filter: dict[str, Any] | None = None, **options: Any) -> Any:
        """This knowledge base as a :class:`~kbcli.tools.KnowledgeSearchTool` for agents;
        with ``filter`` the tool reads through :meth:`scoped` and no argument can widen it."""
        from .tools import KnowledgeSearchTool

        return KnowledgeSearchTool(self.scoped(filter) if filter else self, **options)

    def close(self) -> None:
        """Release the store's resources (closes the SQLite connection)."""
        # Checked on the class: isinstance() would read the store's properties, a query each
        # on a server that may be gone by now (the error that ends a command closes it too).
        if not missing_methods(type(self.store), DocumentCatalog):
            self.store.close()
