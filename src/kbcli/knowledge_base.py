"""The :class:`KnowledgeBase` users hold: its parts wired from the configuration, ingest, search
and delete over them, and the ways into the layers built on it: a scope
(:meth:`KnowledgeBase.scoped`, a :class:`ScopedKnowledgeBase`), an answer (``ask``) and an agent
tool (``as_tool``).

The layers built on a knowledge base (views, answers, agent tools, ``kb get``) know it only by
what it does (:class:`kbcli.views.Source`), so none of them imports this module; it sits above
them. A scope's reads are :mod:`kbcli.views` (a concept of its own: what every reader goes
through); this module adds what is built on views (``ask``, ``as_tool``) for scopes and for the
knowledge base alike (:class:`ViewEntryPoints`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kbcli.config.lookup import defaults, get_config
from kbcli.embedders import SimpleEmbedder
from kbcli.embedders.lazy import LazyEmbedder, remembered
from kbcli.errors import FilterError
from kbcli.filters.model import and_filters, validate_filter
from kbcli.ingest.pipeline import Chunker, IngestPipeline, Loader, default_loader, new_id
from kbcli.ingest.sync import ingest_one
from kbcli.protocols import (
    ChatModelProtocol,
    DocumentCatalog,
    EmbedderProtocol,
    FileLedger,
    KeywordIndex,
    RerankerProtocol,
    RetrieverProtocol,
    TextNormalizerProtocol,
    VectorStoreProtocol,
    supports,
)
from kbcli.search.freshness import hash_limit, settle
from kbcli.search.pipeline import Pool, RAGPipeline
from kbcli.search.retrievers import HybridRetriever
from kbcli.stores import InMemoryStore, build_store
from kbcli.text.analysis import Analyzer
from kbcli.types import Document, SearchOptions, SearchResults
from kbcli.views import KnowledgeView, Reader, as_view, file_text, join_chunks

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Self

    from kbcli.agent.answer import Answer
    from kbcli.agent.tools.read import KnowledgeSearchTool
    from kbcli.config.schema import Config

__all__ = [
    "KnowledgeBase", "KnowledgeView", "ScopedKnowledgeBase", "ViewEntryPoints", "and_filters",
    "as_view", "file_text", "join_chunks",
]  # fmt: skip

KB = TypeVar("KB", bound="KnowledgeBase")

#: What :meth:`KnowledgeBase.from_config` takes besides the configuration.
OVERRIDES = frozenset(
    {
        "store", "embedder", "retriever", "reranker", "loader", "normalizer", "chunker",
        "db", "create", "busy_timeout", "on_note",
    }
)  # fmt: skip


class ViewEntryPoints:
    """``ask`` and ``as_tool`` over ``self`` (a :class:`KnowledgeBase` or a
    :class:`ScopedKnowledgeBase`): the answer and tool layers, built on views, reached from the
    objects users hold. ``self.scoped(filter)`` narrows."""

    def scoped(self, filter: dict[str, Any]) -> KnowledgeView:
        """A read-only view that only sees documents passing ``filter`` (each class has its
        own)."""
        raise NotImplementedError

    def reader(self) -> Reader:
        """What the answer and tool layers read through: this object (each class says what it
        is to them)."""
        raise NotImplementedError

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
        chat: ChatModelProtocol | None = None,
        dry_run: bool = False,
        **options: Any,
    ) -> Answer:
        """Answer ``question`` from the best ``k`` passages, citing them as ``[n]``, or refuse
        without calling the model when none is good enough (``rag.answer``; see
        :func:`kbcli.agent.answer.ask`). In a scope only passages inside it count (the search, the
        term weights and a refusal's hints read nothing outside it; ``filter`` only narrows).
        Extra keyword arguments are :class:`~kbcli.types.SearchOptions` fields. Returns a
        :class:`~kbcli.agent.answer.Answer`."""
        # lazy: the answer path (chat providers: ~45 ms to import) stays off a search's start
        from kbcli.agent.answer import ask

        return ask(
            self.reader(),
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

    def as_tool(self, filter: dict[str, Any] | None = None, **options: Any) -> KnowledgeSearchTool:
        """This knowledge base or view as a :class:`~kbcli.agent.tools.read.KnowledgeSearchTool` for
        agents; with ``filter`` the tool reads through :meth:`scoped` and no argument can widen
        it."""
        # lazy: the agent tools (kb get's loaders: ~60 ms to import) stay off a search's start
        from kbcli.agent.tools.read import KnowledgeSearchTool

        return KnowledgeSearchTool(self.scoped(filter) if filter else self.reader(), **options)


class ScopedKnowledgeBase(KnowledgeView, ViewEntryPoints):
    """A read-only view of ``kb`` restricted to the documents that pass ``filter`` (see
    :class:`~kbcli.views.KnowledgeView`), with ``ask`` and ``as_tool`` inside it.

    Every method takes the same arguments as its counterpart on the knowledge base (or its
    store) and applies the scope first. A hidden document is indistinguishable from one that
    does not exist. Writes are not offered: a scope is for readers (agents, tenants).
    :meth:`KnowledgeBase.scoped` insists on a non-empty filter.
    """

    def reader(self) -> Reader:
        """This scope: what answers and tools read through."""
        return self


class KnowledgeBase(ViewEntryPoints):
    """One object to add, ingest and search knowledge: its parts (store, embedder, retriever,
    reranker, ingest and search pipelines) and what they do together.

    Defaults: an :class:`~kbcli.stores.InMemoryStore`, the :class:`~kbcli.embedders.SimpleEmbedder`
    and a :class:`~kbcli.search.retrievers.HybridRetriever` over them. Use :meth:`open` for the
    persistent SQLite knowledge base configured in ``jianmu.yaml``. ``config`` is the
    configuration every part takes its settings from (None: each part's documented defaults,
    :func:`kbcli.config.lookup.defaults`).
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
        self.config = config
        self.store: VectorStoreProtocol = store if store is not None else InMemoryStore()
        self.embedder: EmbedderProtocol = embedder if embedder is not None else SimpleEmbedder()
        self.retriever: RetrieverProtocol = retriever or HybridRetriever(self.store, self.embedder)
        self.reranker = reranker
        self.pipeline = RAGPipeline(self.retriever, reranker, config=config)
        # The write path's steps, built on the first write: a reader never needs them.
        self._steps = (loader, normalizer, chunker)
        self._ingestor: IngestPipeline | None = None

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
        unknown = sorted(set(overrides) - OVERRIDES)
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
            catalog = store if supports(store, DocumentCatalog) else None
            recorded = (
                (lambda: catalog.embedder_info or remembered(catalog))
                if catalog is not None
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
    def loader(self) -> Loader:
        """What loads files: the loader given, else the configured default
        (:func:`~kbcli.ingest.pipeline.default_loader`). Readers (``kb get``) use it to read a file
        again as ingest read it, without building the write path; the ingest pipeline, built or
        not yet, loads with this same object."""
        if self._ingestor is not None:
            return self._ingestor.loader
        loader, normalizer, chunker = self._steps
        if loader is None:
            loader = default_loader(self.config if self.config is not None else defaults())
            self._steps = (loader, normalizer, chunker)
        return loader

    @property
    def ingestor(self) -> IngestPipeline:
        """The write path's steps (load, chunk, embed), built on the first write (with
        :attr:`loader`, when a reader built it first)."""
        if self._ingestor is None:
            loader, normalizer, chunker = self._steps
            self._ingestor = IngestPipeline(
                self.embedder, self.store, loader, normalizer, chunker, config=self.config
            )
        return self._ingestor

    @property
    def analyzer(self) -> Analyzer:
        """The analyzer of the store's keyword index (the default one for a plain store)."""
        if supports(self.store, KeywordIndex):
            return self.store.analyzer
        return Analyzer()

    @property
    def _ingest(self) -> IngestPipeline:
        """The ingest pipeline (the reference's attribute name)."""
        return self.ingestor

    @property
    def _rag(self) -> RAGPipeline:
        """The search pipeline (the reference's attribute name)."""
        return self.pipeline

    def scoped(self, filter: dict[str, Any]) -> ScopedKnowledgeBase:
        """A read-only :class:`ScopedKnowledgeBase` that only sees documents passing ``filter``,
        on every search route, listing, count and lookup."""
        if not validate_filter(filter):
            raise FilterError("A scope needs a non-empty filter, e.g. {'tenant': 'acme'}")
        return ScopedKnowledgeBase(self, filter)

    def reader(self) -> Reader:
        """This knowledge base (a :class:`~kbcli.views.Source`): what answers and tools read
        through."""
        return self

    def add(self, text: str, metadata: dict[str, Any] | None = None, id: str | None = None) -> str:
        """Store ``text`` as one document (not chunked) and return its id."""
        doc = Document(id=id or new_id(), text=text, metadata=dict(metadata or {}))
        return self.ingestor.store_documents([doc])[0]

    def ingest_text(self, text: str, metadata: dict[str, Any] | None = None) -> list[str]:
        """Chunk, embed and store ``text``; returns the chunk ids."""
        return self.ingestor.ingest_text(text, metadata)

    def ingest_file(
        self, path: str | os.PathLike[str], metadata: dict[str, Any] | None = None
    ) -> list[str]:
        """Load, chunk, embed and store a file (replacing its earlier chunks); returns chunk ids.

        On a store with a file ledger (every built-in store) this is ``kb ingest``'s own path
        for one file (:func:`kbcli.ingest.sync.ingest_one`): the same chunks, line numbers and
        file record, so a later ``kb ingest`` finds the file unchanged; on a plain store, the
        ingest pipeline's load -> chunk -> embed -> store.
        """
        if supports(self.store, FileLedger) and supports(self.store, DocumentCatalog):
            return ingest_one(self, path, metadata)
        return self.ingestor.ingest_file(path, metadata)

    def search(
        self,
        query: str,
        k: int = 5,
        mode: str = "hybrid",
        filter: dict[str, Any] | None = None,
        **options: Any,
    ) -> SearchResults:
        """Search; extra keyword arguments are :class:`SearchOptions` fields (alpha, fusion,
        ``stale``...). Each hit says how fresh it is (``SearchResult.freshness``: its file
        changed or went missing since it was indexed...; :mod:`kbcli.search.freshness`)."""
        opts = SearchOptions(k=k, mode=mode, filter=filter, **options)
        answers: list[SearchResults] = []

        def ranked(depth: int) -> SearchResults:
            answers.append(self.pipeline.search(query, dataclasses.replace(opts, k=depth)))
            return answers[-1]

        limit = hash_limit(self.config)
        hits = settle(self.store, opts.k, opts.stale, ranked, lambda r: r, limit=limit)
        return dataclasses.replace(answers[-1], hits=hits)

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
