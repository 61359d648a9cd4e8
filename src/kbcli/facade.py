"""The knowledge base facade: its parts wired from the configuration, and ingest, search and
delete over them.

The layers built on a knowledge base (views and scopes, answers, agent tools) know it as
:class:`BaseKnowledgeBase` (or by what it does: :class:`kbcli.views.Source`); the
:class:`~kbcli.pipeline.KnowledgeBase` users hold adds the ways into those layers
(``scoped``, ``ask``, ``as_tool``) above them, so this module imports none of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kbcli.embedders.lazy import LazyEmbedder, remembered
from kbcli.ingest.pipeline import Chunker, IngestPipeline, Loader, new_id
from kbcli.protocols import (
    DocumentCatalog,
    EmbedderProtocol,
    KeywordIndex,
    RerankerProtocol,
    RetrieverProtocol,
    TextNormalizerProtocol,
    VectorStoreProtocol,
    supports,
)
from kbcli.search.pipeline import Pool, RAGPipeline
from kbcli.types import Document, SearchOptions, SearchResults

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Self

    from kbcli.config.schema import Config
    from kbcli.text.analysis import Analyzer

KB = TypeVar("KB", bound="BaseKnowledgeBase")


class BaseKnowledgeBase:
    """The parts of a knowledge base (store, embedder, retriever, reranker, ingest and search
    pipelines) and what they do together: add, ingest, search, delete, close.
    :class:`~kbcli.pipeline.KnowledgeBase` is this with ``scoped``, ``ask`` and ``as_tool``.
    """

    def __init__(
        self,
        store: VectorStoreProtocol | None = None,
        embedder: EmbedderProtocol | None = None,
        retriever: RetrieverProtocol | None = None,
        reranker: RerankerProtocol | None = None,
        loader: Loader | None = None,
        normalizer: TextNormalizerProtocol | None = None,
        chunker: Chunker | None = None,
        *,
        config: Config | None = None,
    ):
        from kbcli.embedders import SimpleEmbedder
        from kbcli.search.retrievers import HybridRetriever
        from kbcli.stores import InMemoryStore

        self.store: VectorStoreProtocol = store if store is not None else InMemoryStore()
        self.embedder: EmbedderProtocol = embedder if embedder is not None else SimpleEmbedder()
        self.retriever: RetrieverProtocol = retriever or HybridRetriever(self.store, self.embedder)
        self.reranker = reranker
        self.ingestor = IngestPipeline(
            self.embedder, self.store, loader, normalizer, chunker, config=config
        )
        self.pipeline = RAGPipeline(self.retriever, reranker, config=config)

    @classmethod
    def from_config(cls: type[KB], config: Config | None = None, **overrides: Any) -> KB:
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
        from kbcli.config.lookup import get_config
        from kbcli.search.retrievers import HybridRetriever
        from kbcli.stores import build_store

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
                (lambda: store.embedder_info or remembered(store))
                if supports(store, DocumentCatalog)
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
        cls: type[KB],
        db: str | os.PathLike[str] | None = None,
        *,
        config: Config | None = None,
        embedder: EmbedderProtocol | None = None,
        reranker: RerankerProtocol | None = None,
        on_note: Callable[[str], None] | None = None,
        busy_timeout: float | None = None,
        create: bool = True,
    ) -> KB:
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
    def analyzer(self) -> Analyzer:
        """The analyzer of the store's keyword index (the default one for a plain store)."""
        if supports(self.store, KeywordIndex):
            return self.store.analyzer
        from kbcli.text.analysis import Analyzer

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
        doc = Document(id=id or new_id(), text=text, metadata=dict(metadata or {}))
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
    ) -> SearchResults:
        """Search; extra keyword arguments are :class:`SearchOptions` fields (alpha, fusion...)."""
        return self.pipeline.search(query, SearchOptions(k=k, mode=mode, filter=filter, **options))

    def search_with(
        self, query: str, options: SearchOptions, *, pool: Pool | None = None
    ) -> SearchResults:
        """Search with a ready :class:`SearchOptions` (``pool``: see
        :meth:`RAGPipeline.search`)."""
        if pool is None:
            return self.pipeline.search(query, options)
        return self.pipeline.search(query, options, pool=pool)

    def delete(self, ids: list[str]) -> bool:
        """Delete documents by id; True when at least one existed."""
        return self.store.delete(list(ids))

    def close(self) -> None:
        """Release the store's resources (closes the SQLite connection)."""
        # supports() asks the class: isinstance() would read the store's properties, a query
        # each on a server that may be gone by now (the error that ends a command closes it).
        if supports(self.store, DocumentCatalog):
            self.store.close()

    def __enter__(self) -> Self:
        """``with KnowledgeBase.open(path) as kb:`` closes the store at the end."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
