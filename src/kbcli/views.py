"""Views: a read-only view of a knowledge base that only ever sees the documents passing one
filter (or, with no filter, all of them) — what scopes, the agent tools, ``kb get`` and
``kb ask`` read through.

A :class:`KnowledgeView`'s filter is ANDed (``{"$and": [scope, caller_filter]}``) into every read
before anything is scored, counted or listed. Searches go through the normal pipeline with the
view's filter as :attr:`SearchOptions.scope` (the caller's stays :attr:`SearchOptions.filter`):
the stores apply both before ranking on every route (keyword, semantic, hybrid, MMR, rerank
pools) and compute every keyword statistic (df, N, lengths, source statistics) over the scope's
chunks alone, so nothing outside the scope can change a score or an order. ``get`` treats an
id the view hides exactly like an unknown id; lists, counts, stats and a file's indexed text
only cover the view. A caller's filter can only narrow the view: it is
validated and ANDed, never merged. The ``source`` paths of both are read in their canonical
form (:func:`~kbcli.system.paths.normal_source`), so ``/docs/beta/./b.md`` or
``/docs/alpha/../beta/`` means the path it names.

The view talks to the store only through :class:`~kbcli.protocols.DocumentCatalog` reads
(``get``, ``iter_documents``, ``count``) and the retrieval pipeline; a reference store that
only has ``list_all`` is filtered in Python with :func:`kbcli.filters.model.matches`. It knows the
knowledge base under it only as a :class:`Source` (a store and ``search_with``), so the layers
built on views never import :mod:`kbcli.knowledge_base`; the public
:class:`~kbcli.knowledge_base.ScopedKnowledgeBase` is a view with ``ask`` and ``as_tool`` added.
"""

from __future__ import annotations

import builtins
import dataclasses
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kbcli.config.schema import Config
from kbcli.errors import FilterError, NotFoundError
from kbcli.filters.model import and_filters, canonical_paths, matches, validate_filter
from kbcli.protocols import DocumentCatalog, KeywordIndex, VectorStoreProtocol, supports
from kbcli.search.freshness import hash_limit, settle, store_of
from kbcli.search.pool import Pool
from kbcli.system.paths import source_forms, source_name
from kbcli.text.analysis import Analyzer
from kbcli.types import Document, SearchOptions, SearchResult, note_author

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Self

    from kbcli.embedders.base import EmbedderInfo


@runtime_checkable
class Source(Protocol):
    """What a view reads through: the knowledge base's store, analyzer and search (a
    :class:`~kbcli.pipeline.KnowledgeBase`)."""

    store: VectorStoreProtocol

    @property
    def config(self) -> Config | None:
        """The configuration the knowledge base was built with (None: the defaults)."""
        ...

    @property
    def analyzer(self) -> Analyzer:
        """The analyzer the keyword index tokenizes with (scoped term weights use it)."""
        ...

    def search_with(
        self, query: str, options: SearchOptions, *, pool: Pool | None = None
    ) -> Sequence[SearchResult]:
        """Search with ready options (``pool``: see :meth:`kbcli.pipeline.RAGPipeline.search`)."""
        ...


def checked(filter: Any) -> dict[str, Any] | None:
    """``filter`` validated (raises FilterError), its paths in canonical form
    (:func:`~kbcli.filters.model.canonical_paths`): what every filter a view takes goes through."""
    return canonical_paths(validate_filter(filter))


def as_view(kb: Reader) -> KnowledgeView:
    """``kb`` itself when it is a view (a scope), else an unrestricted view of it (what readers
    such as the agent tools and ``kb get`` go through)."""
    return kb if isinstance(kb, KnowledgeView) else KnowledgeView(kb, None)


class KnowledgeView:
    """A read-only view of ``kb`` restricted to the documents that pass ``filter``.

    Every method takes the same arguments as its counterpart on the knowledge base (or its
    store) and applies the scope first. A hidden document is indistinguishable from one that
    does not exist. Writes are not offered: a scope is for readers (agents, tenants).

    ``filter=None`` is the whole index (what an unscoped tool reads through);
    :meth:`KnowledgeBase.scoped` insists on a non-empty filter.
    """

    def __init__(self, kb: Source, filter: dict[str, Any] | None):
        self.kb = kb
        self.filter: dict[str, Any] | None = checked(filter)

    @property
    def analyzer(self) -> Analyzer:
        """The knowledge base's analyzer (what phrase and exclusion checks tokenise with)."""
        return self.kb.analyzer

    # --- filters -----------------------------------------------------------------------------

    def narrow(self, filter: dict[str, Any] | None) -> dict[str, Any] | None:
        """The scope ANDed with a caller's ``filter`` (validated; raises FilterError)."""
        return and_filters(self.filter, checked(filter))

    def visible(self, doc: Document) -> bool:
        """True when ``doc`` is inside the scope."""
        return matches(doc.metadata, self.filter)

    def scoped(self, filter: dict[str, Any]) -> Self:
        """A narrower view of the same kind: this scope AND ``filter`` (which must not be
        empty)."""
        if not checked(filter):
            raise FilterError("A scope needs a non-empty filter, e.g. {'tenant': 'acme'}")
        return type(self)(self.kb, self.narrow(filter))

    # --- search ------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        k: int = 5,
        mode: str = "hybrid",
        filter: dict[str, Any] | None = None,
        **options: Any,
    ) -> list[SearchResult]:
        """Search inside the scope; arguments as :meth:`KnowledgeBase.search`, each hit with
        its freshness (:mod:`kbcli.search.freshness`, under ``stale``)."""
        opts = SearchOptions(k=k, mode=mode, filter=filter, **options)

        def ranked(depth: int) -> list[SearchResult]:
            return list(self.search_with(query, dataclasses.replace(opts, k=depth)))

        limit = hash_limit(getattr(self.kb, "config", None))
        return settle(store_of(self), opts.k, opts.stale, ranked, _same, limit=limit)

    def search_with(
        self, query: str, options: SearchOptions, *, pool: Pool | None = None
    ) -> Sequence[SearchResult]:
        """Search inside the scope with ready options (``options.filter`` only narrows it;
        ``pool``: see :meth:`kbcli.pipeline.RAGPipeline.search`). The scope travels as
        ``options.scope``, so keyword statistics are the scope's alone (:mod:`kbcli.text.bm25`)."""
        scoped = dataclasses.replace(
            options,
            filter=canonical_paths(options.checked_filter),
            scope=and_filters(self.filter, canonical_paths(options.checked_scope)),
        )
        if pool is None:
            results = self.kb.search_with(query, scoped)
        else:
            results = self.kb.search_with(query, scoped, pool=pool)
        # The stores filter before ranking; this re-check only guards against a store that
        # breaks that contract (a result outside the scope is dropped, never shown).
        return [r for r in results if self.visible(r.document)] if self.filter else results

    # --- catalog reads -----------------------------------------------------------------------

    def get(self, ids: list[str]) -> list[Document]:
        """The documents among ``ids`` that exist and are in scope, in the order asked."""
        wanted = [i for i in dict.fromkeys(ids) if isinstance(i, str)]
        if not wanted:
            return []
        store = self.kb.store
        if supports(store, DocumentCatalog):
            docs = store.get(wanted)
        else:
            docs = [d for d in store.list_all() if d.id in set(wanted)]
            docs.sort(key=lambda d: wanted.index(d.id))
        return [d for d in docs if self.visible(d)]

    def iter_documents(
        self,
        filter: dict[str, Any] | None = None,
        *,
        source: str | None = None,
        limit: int | None = None,
    ) -> Iterator[Document]:
        """Documents in scope passing ``filter`` (and of ``source``), oldest first."""
        combined = self.narrow(filter)
        if supports(self.kb.store, DocumentCatalog):
            docs = self.kb.store.iter_documents(combined, source=source, limit=limit)
        else:  # a reference VectorStoreProtocol store: only list_all
            docs = self._filtered_list(combined, source, limit)
        for doc in docs:
            if self.visible(doc):
                yield doc

    def _filtered_list(
        self, filter: dict[str, Any] | None, source: str | None, limit: int | None
    ) -> Iterator[Document]:
        count = 0
        for doc in self.kb.store.list_all():
            if limit is not None and count >= limit:
                return
            if matches(doc.metadata, filter) and (
                source is None or doc.metadata.get("source") == source
            ):
                count += 1
                yield doc

    def list(
        self,
        filter: dict[str, Any] | None = None,
        *,
        source: str | None = None,
        limit: int | None = None,
    ) -> list[Document]:
        """:meth:`iter_documents` as a list."""
        return list(self.iter_documents(filter, source=source, limit=limit))

    def count(self, filter: dict[str, Any] | None = None) -> int:
        """How many documents in scope pass ``filter``."""
        if supports(self.kb.store, DocumentCatalog):
            return self.kb.store.count(self.narrow(filter))
        return sum(1 for _ in self.iter_documents(filter))

    def sources(self) -> builtins.list[tuple[str, int]]:  # (``list`` is the method above)
        """Each source in scope with its number of documents in scope, sorted by source."""
        counts: dict[str, int] = {}
        for doc in self.iter_documents():
            source = doc.metadata.get("source")
            if source is not None:
                counts[str(source)] = counts.get(str(source), 0) + 1
        return sorted(counts.items())

    def stats(self) -> dict[str, Any]:
        """Figures about the scope only: ``chunks``, ``sources``, ``embedder``, ``analyzer`` and
        ``last_ingest`` (when the newest document in scope was stored). Index-wide figures that
        would describe hidden documents (vocabulary, size, file count) are left out."""
        chunks = 0
        sources: set[str] = set()
        newest = None
        for doc in self.iter_documents():
            chunks += 1
            if doc.metadata.get("source") is not None:
                sources.add(str(doc.metadata["source"]))
            if doc.created_at is not None and (newest is None or doc.created_at > newest):
                newest = doc.created_at
        store = self.kb.store
        info = store.embedder_info if supports(store, DocumentCatalog) else None
        analyzer = store.analyzer.signature if supports(store, KeywordIndex) else None
        return {
            "scoped": self.filter is not None,
            "chunks": chunks,
            "sources": len(sources),
            "embedder": _embedder_dict(info),
            "analyzer": analyzer,
            "last_ingest": newest.isoformat() if newest is not None else None,
        }

    def file_text(self, path: str | os.PathLike[str]) -> tuple[str, str]:
        """``(source, text)``: the indexed text of one file, from its chunks in scope.

        ``path`` is matched against the ``source`` of indexed chunks (not notes naming it),
        as given and then as an absolute path; the file on disk is never read. Overlapping
        chunk windows are joined once. Raises :class:`NotFoundError` (the same for a hidden
        file and an unknown one).
        """
        return file_text(self, path)


#: What the readers built on a knowledge base (answers, tools, ``kb get``) read through: the
#: knowledge base itself or a view of it.
Reader = Source | KnowledgeView


def _embedder_dict(info: EmbedderInfo | None) -> dict[str, Any] | None:
    # a store of another make may report something else: said as its text
    if info is None:
        return None
    if dataclasses.is_dataclass(info) and not isinstance(info, type):
        return {k: v for k, v in dataclasses.asdict(info).items() if v is not None}
    return {"provider": str(info)}


def file_text(view: KnowledgeView, path: str | os.PathLike[str]) -> tuple[str, str]:
    """``(source, text)`` of a file's indexed chunks in ``view`` (a knowledge base or a scope).

    See :meth:`KnowledgeView.file_text`.
    """
    given = os.fspath(path)
    candidates = dict.fromkeys([source_name(given), *source_forms(given)])
    for source in candidates:
        docs = [d for d in view.iter_documents(source=source) if note_author(d.metadata) is None]
        if docs:
            return source, join_chunks(docs)
    raise NotFoundError(f"No indexed file {given!r}: knowledge_search shows the sources")


def join_chunks(docs: list[Document]) -> str:
    """The text of a file's chunks in order, each overlap with the previous chunk kept once."""

    def order(doc: Document) -> tuple[Any, ...]:
        meta = doc.metadata
        start = meta.get("char_start")
        index = meta.get("chunk_index")
        return (
            start if isinstance(start, int) else -1,
            index if isinstance(index, int) else -1,
        )

    parts: list[str] = []
    previous = ""
    for doc in sorted(docs, key=order):
        text = doc.text
        overlap = _overlap(previous, text)
        if parts and overlap:
            parts[-1] += text[overlap:]
        else:
            parts.append(text)
        previous = parts[-1]
    return "\n".join(parts)


def _overlap(before: str, after: str, limit: int = 4000, shortest: int = 8) -> int:
    """Length of the longest suffix of ``before`` that is a prefix of ``after`` (at least
    ``shortest`` characters, so a shared word is not taken for a chunk overlap)."""
    if len(after) < shortest:
        return 0
    probe = after[:shortest]
    at = before.find(probe, max(0, len(before) - min(limit, len(after))))
    while at != -1:
        if after.startswith(before[at:]):
            return len(before) - at
        at = before.find(probe, at + 1)
    return 0


def _same(result: SearchResult) -> SearchResult:
    """A search result is its own hit (:func:`~kbcli.search.freshness.settle`'s ``result``)."""
    return result
