"""InMemoryStore: every storage capability in Python objects, for tests, notebooks and agents."""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ..analysis import Analyzer
from ..analysis import keyword_signature as signature_of
from ..bm25 import K1, SOURCE_WEIGHT, B, ChunkTerms
from ..embedders.base import EmbedderInfo
from ..errors import DatabaseLockedError, IndexMismatchError
from ..filters import matches, validate_filter
from ..types import Document, FileRecord, Finding, SearchResult
from .common import check_embedder, keyword_hit, newest_first, prefiltered_search, vector_dimensions
from .keyword_memory import MemoryKeywordIndex
from .numpy_index import NumpyVectorIndex


class InMemoryStore:
    """Documents in insertion order; beyond ``max_size`` the oldest are evicted (FIFO).

    Adding an id that exists replaces that document and makes it the newest. An empty query
    vector returns the newest ``k`` documents (that pass the filter) with score 1.0. It has a
    BM25 index (:class:`MemoryKeywordIndex`), exact dense search, a file ledger and an
    embedding cache, so every command and retriever works on it; nothing survives the process.
    Transactions roll back on error (a copy of the state is taken when one starts).
    """

    def __init__(self, max_size: int | None = None, *, analyzer: Analyzer | None = None):
        if max_size is not None and max_size < 1:
            raise ValueError(f"max_size must be at least 1 or None, got {max_size}")
        self.max_size = max_size
        self._keywords = MemoryKeywordIndex(analyzer)
        self._lock = threading.RLock()
        self._writer = threading.Lock()
        self._depth = 0
        self._reset_state()

    def _reset_state(self) -> None:
        self._docs: OrderedDict[str, Document] = OrderedDict()
        self._rowid: dict[str, int] = {}
        self._next_rowid = 1
        self._sources: dict[str, int] = {}  # source -> src id
        self._next_src = 1
        self._vectors = NumpyVectorIndex()
        self._keywords.clear()
        self._records: dict[str, FileRecord] = {}
        self._cache: dict[tuple[str, str], list[float]] = {}
        self._meta: dict[str, str] = {}
        self._embedder: EmbedderInfo | None = None
        self.version = 0  # bumped on every change; lets retrievers cache derived indexes

    @property
    def analyzer(self) -> Analyzer:
        """The analyzer of the keyword index."""
        return self._keywords.analyzer

    @property
    def keyword_signature(self) -> str:
        """What the keyword index depends on: the analyzer and the indexed fields."""
        return signature_of(self.analyzer)

    # --- transactions ------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All changes inside happen, or (on an exception) none; nested calls join the outer."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            saved = self._snapshot()
            self._depth = 1
            try:
                yield
                self.version += 1
            except BaseException:
                self._restore(saved)
                raise
            finally:
                self._depth = 0

    def _snapshot(self) -> dict[str, Any]:
        return {
            "docs": OrderedDict(self._docs),
            "rowid": dict(self._rowid),
            "next": self._next_rowid,
            "sources": dict(self._sources),
            "next_src": self._next_src,
            "records": dict(self._records),
            "cache": dict(self._cache),
            "meta": dict(self._meta),
            "embedder": self._embedder,
            "version": self.version,
        }

    def _restore(self, saved: dict[str, Any]) -> None:
        version = saved["version"]
        self._reset_state()
        self._next_rowid = saved["next"]
        self._sources, self._next_src = saved["sources"], saved["next_src"]
        for doc in saved["docs"].values():
            self._index(doc, saved["rowid"][doc.id])
        self._records, self._cache = saved["records"], saved["cache"]
        self._meta, self._embedder = saved["meta"], saved["embedder"]
        self.version = version + 1  # derived caches must not trust what they saw inside

    # --- writes ------------------------------------------------------------------------------

    def add(
        self,
        docs: list[Document],
        embeddings: list[list[float]] | None = None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> list[str]:
        """Store copies of ``docs`` (vector: ``embeddings[i]`` or ``doc.embedding``)."""
        if embeddings is not None and len(embeddings) != len(docs):
            raise ValueError(f"{len(docs)} documents but {len(embeddings)} embeddings")
        stored = []
        for i, doc in enumerate(docs):
            item = copy.copy(doc)
            item.metadata = dict(doc.metadata)
            vec = embeddings[i] if embeddings is not None else doc.embedding
            item.embedding = list(vec) if vec is not None else None
            stored.append(item)
        dim = vector_dimensions(d.embedding for d in stored)
        with self.transaction():
            if dim is not None:
                index_dim = self._vectors.dimension
                if index_dim is not None and index_dim != dim:
                    raise IndexMismatchError(
                        f"New vectors have {dim} dimensions but the store has {index_dim}"
                    )
                if embedder is not None:
                    info = EmbedderInfo(embedder.provider, embedder.model, dim)
                    check_embedder(self._embedder, info, "this in-memory store")
                    self._embedder = self._embedder or info
            self._remove_ids([d.id for d in stored])
            for item in stored:
                self._index(item, self._next_rowid)
                self._next_rowid += 1
            if self.max_size is not None and len(self._docs) > self.max_size:
                self._remove_ids(list(self._docs)[: len(self._docs) - self.max_size])
        return [d.id for d in docs]

    def set_vectors(
        self, vectors: Mapping[str, Sequence[float]], *, embedder: EmbedderInfo | None = None
    ) -> int:
        """Give chunks already stored their vectors, by id (see
        :class:`~kbcli.protocols.VectorWriter`); returns how many got one."""
        known = {i: list(v) for i, v in vectors.items() if i in self._docs}
        dim = vector_dimensions(known.values())
        with self.transaction():
            if dim is not None:
                index_dim = self._vectors.dimension
                if index_dim is not None and index_dim != dim:
                    raise IndexMismatchError(
                        f"New vectors have {dim} dimensions but the store has {index_dim}"
                    )
                if embedder is not None:
                    info = EmbedderInfo(embedder.provider, embedder.model, dim)
                    check_embedder(self._embedder, info, "this in-memory store")
                    self._embedder = self._embedder or info
            for doc_id, vec in known.items():
                doc = copy.copy(self._docs[doc_id])
                doc.embedding = vec
                self._docs[doc_id] = doc
                self._vectors.upsert([self._rowid[doc_id]], [vec])
        return len(known)

    def _index(self, doc: Document, rowid: int) -> None:
        self._docs[doc.id] = doc
        self._rowid[doc.id] = rowid
        source = doc.metadata.get("source")
        key = str(source) if source is not None else f"\0{doc.id}"
        src = self._sources.get(key)
        if src is None:
            src = self._sources[key] = self._next_src
            self._next_src += 1
        self._keywords.add([ChunkTerms(rowid, src, self._keywords.terms_of(doc))])
        if doc.embedding is not None:
            self._vectors.upsert([rowid], [doc.embedding])

    def _remove_ids(self, ids: list[str]) -> int:
        rowids = [self._rowid.pop(i) for i in dict.fromkeys(ids) if i in self._docs]
        for i in ids:
            doc = self._docs.pop(i, None)
            if doc is not None and doc.metadata.get("source") is None:
                self._sources.pop(f"\0{doc.id}", None)
        self._keywords.remove(rowids)
        self._vectors.remove(rowids)
        return len(rowids)

    def delete(self, ids: list[str]) -> bool:
        """Remove documents by id; True when at least one existed."""
        return self.remove(ids) > 0

    def remove(self, ids: list[str]) -> int:
        """Remove documents by id; returns how many existed."""
        with self.transaction():
            return self._remove_ids(list(ids))

    def delete_where(self, filter: dict[str, Any]) -> int:
        """Remove every document whose metadata passes ``filter``; returns how many."""
        filter = validate_filter(filter)
        with self.transaction():
            return self._remove_ids(
                [d.id for d in self._docs.values() if matches(d.metadata, filter)]
            )

    def delete_source(self, source: str) -> int:
        """Remove every document of ``source`` and its file record; returns how many."""
        with self.transaction():
            self._records.pop(source, None)
            return self._remove_ids(self._ids_of(source))

    def _ids_of(self, source: str) -> list[str]:
        return [d.id for d in self._docs.values() if d.metadata.get("source") == source]

    def replace_source(
        self,
        source: str,
        docs: list[Document],
        embeddings: list[list[float]] | None = None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> list[str]:
        """Swap the documents of ``source`` for ``docs`` in one step."""
        with self.transaction():
            self._remove_ids(self._ids_of(source))
            return self.add(docs, embeddings, embedder=embedder)

    def doctor(self, repair: bool = False) -> list[Finding]:
        """Nothing to check: the store keeps nothing on disk and nothing derived (``kb doctor``
        says so)."""
        return []

    def rebuild_keyword_index(self) -> int:
        """Re-analyse every document (after changing the analyzer); returns how many."""
        with self.transaction():
            self._keywords.clear()
            for doc in self._docs.values():
                source = doc.metadata.get("source")
                key = str(source) if source is not None else f"\0{doc.id}"
                chunk = ChunkTerms(
                    self._rowid[doc.id], self._sources[key], self._keywords.terms_of(doc)
                )
                self._keywords.add([chunk])
            return len(self._docs)

    def reembed(
        self,
        embed: Callable[[list[str]], list[list[float]]],
        info: EmbedderInfo,
        *,
        batch_size: int = 256,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Re-embed every document with ``embed`` and record ``info`` (all or nothing)."""
        docs = list(self._docs.values())
        fresh: list[list[float]] = []
        for start in range(0, len(docs), batch_size):
            fresh.extend(embed([d.text for d in docs[start : start + batch_size]]))
            if progress is not None:
                progress(len(fresh), len(docs))
        with self.transaction():
            self._vectors = NumpyVectorIndex()
            for doc, vec in zip(docs, fresh):
                doc.embedding = list(vec)
                self._vectors.upsert([self._rowid[doc.id]], [vec])
            dim = len(fresh[0]) if fresh else None
            self._embedder = EmbedderInfo(info.provider, info.model, dim) if fresh else None
        return len(docs)

    # --- index metadata ----------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        """A value of the store's own metadata."""
        return self._meta.get(key)

    def set_meta(self, key: str, value: str) -> None:
        """Set a value of the store's own metadata."""
        with self.transaction():
            self._meta[key] = value

    @property
    def embedder_info(self) -> EmbedderInfo | None:
        """The embedder recorded with the first vectors (None before)."""
        return self._embedder

    def check_embedder(self, info: EmbedderInfo) -> None:
        """Raise IndexMismatchError when ``info`` is not the recorded embedder."""
        check_embedder(self._embedder, info, "this in-memory store")

    # --- reads -------------------------------------------------------------------------------

    def get(self, ids: list[str], *, with_embeddings: bool = False) -> list[Document]:
        """The stored documents among ``ids``, in the order asked."""
        return [self._out(self._docs[i], with_embeddings) for i in ids if i in self._docs]

    @staticmethod
    def _out(doc: Document, with_embeddings: bool) -> Document:
        # The stored document itself: its embedding costs nothing to hand out.
        return doc

    def list_all(self) -> list[Document]:
        """Every document with its embedding, oldest first."""
        return list(self._docs.values())

    def iter_documents(
        self,
        filter: dict[str, Any] | None = None,
        *,
        source: str | None = None,
        limit: int | None = None,
        with_embeddings: bool = False,
    ) -> Iterator[Document]:
        """Documents passing ``filter`` (and of ``source``), oldest first, at most ``limit``."""
        filter = validate_filter(filter)
        shown = 0
        for doc in list(self._docs.values()):
            if limit is not None and shown >= limit:
                return
            if source is not None and doc.metadata.get("source") != source:
                continue
            if matches(doc.metadata, filter):
                shown += 1
                yield self._out(doc, with_embeddings)

    def count(self, filter: dict[str, Any] | None = None) -> int:
        """How many documents pass ``filter``."""
        filter = validate_filter(filter)
        if not filter:
            return len(self._docs)
        return sum(1 for d in self._docs.values() if matches(d.metadata, filter))

    def __len__(self) -> int:
        return len(self._docs)

    def sources(self) -> list[tuple[str, int]]:
        """Each source with its number of documents, sorted by source."""
        counts: dict[str, int] = {}
        for doc in self._docs.values():
            source = doc.metadata.get("source")
            if source is not None:
                counts[str(source)] = counts.get(str(source), 0) + 1
        return sorted(counts.items())

    def stats(self) -> dict[str, Any]:
        """Counts and settings, in the shape of :meth:`SQLiteStore.stats`."""
        info = self._embedder
        total = self._keywords.total_length
        return {
            "path": None,
            "chunks": len(self._docs),
            "sources": len(self.sources()),
            "files": len(self._records),
            "vectors": len(self._vectors),
            "vocabulary": len(self._keywords.df),
            "avg_chunk_terms": total / len(self._docs) if self._docs else 0.0,
            "size_bytes": 0,
            "embedder": (
                {"provider": info.provider, "model": info.model, "dimension": info.dimension}
                if info
                else None
            ),
            "analyzer": self.keyword_signature if self._docs else None,
            "last_ingest": self._meta.get("last_ingest"),
            "schema_version": None,
            "generation": self.version,
        }

    def close(self) -> None:
        """Nothing to release."""

    # --- file ledger and embedding cache -----------------------------------------------------

    @contextmanager
    def writer_lock(self, wait: float) -> Iterator[None]:
        """One writer at a time (threads of this process)."""
        if not self._writer.acquire(timeout=max(0.0, wait)):
            raise DatabaseLockedError(
                f"Another ingest is writing to this in-memory store; waited {wait:g} s"
            )
        try:
            yield
        finally:
            self._writer.release()

    def file_records(self) -> dict[str, FileRecord]:
        """Every file record, by path."""
        return {p: copy.deepcopy(r) for p, r in self._records.items()}

    def replace_file(
        self,
        record: FileRecord,
        docs: list[Document],
        embeddings: list[list[float]] | None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> int:
        """Swap a file's documents and record in one step; returns how many were removed."""
        with self.transaction():
            removed = self._remove_ids(self._ids_of(record.path))
            if docs:
                self.add(docs, embeddings, embedder=embedder)
                if embedder is not None and embeddings is not None:
                    self.cache_embeddings(embedder, {d.text: v for d, v in zip(docs, embeddings)})
            self._records[record.path] = copy.deepcopy(record)
            return removed

    def touch_file(self, record: FileRecord) -> None:
        """Update a file's record without touching its documents."""
        with self.transaction():
            self._records[record.path] = copy.deepcopy(record)

    def checkpoint(self) -> None:
        """Nothing to fold."""

    def prepare_search(self) -> None:
        """Nothing to build: the in-memory indexes are kept current on every write."""

    def cached_embeddings(self, info: EmbedderInfo, texts: list[str]) -> dict[str, list[float]]:
        """Vectors ``info``'s embedder already made for any of ``texts``."""
        key = f"{info.provider}/{info.model}"
        return {t: self._cache[(key, t)] for t in texts if (key, t) in self._cache}

    def cache_embeddings(self, info: EmbedderInfo, vectors: dict[str, list[float]]) -> None:
        """Remember vectors by (embedder, text)."""
        key = f"{info.provider}/{info.model}"
        with self.transaction():
            for text, vec in vectors.items():
                self._cache[(key, text)] = list(vec)

    # --- search ------------------------------------------------------------------------------

    def keyword_search(
        self,
        query: str,
        k: int = 5,
        filter: dict[str, Any] | None = None,
        *,
        k1: float = K1,
        b: float = B,
        source_weight: float = SOURCE_WEIGHT,
    ) -> list[SearchResult]:
        """BM25 with source context (see :mod:`kbcli.bm25`); ``filter`` applies first."""
        filter = validate_filter(filter)
        by_rowid = {self._rowid[d.id]: d for d in self._docs.values()}
        allowed = None
        if filter:
            allowed = lambda doc: matches(by_rowid[doc].metadata, filter)  # noqa: E731
        scored = self._keywords.search(
            query, k, k1=k1, b=b, source_weight=source_weight, allowed=allowed
        )
        return [keyword_hit(by_rowid[s.doc], s, source_weight) for s in scored]

    def search(
        self, query_vec: list[float], k: int = 5, filter: dict[str, Any] | None = None
    ) -> list[SearchResult]:
        """Cosine similarity against every stored vector that passes ``filter``; an empty query
        vector returns the newest ``k`` documents passing it, scored 1.0."""
        filter = validate_filter(filter)
        if not len(query_vec):
            passing = (d for d in self._docs.values() if matches(d.metadata, filter))
            return [SearchResult(self._out(d, False), 1.0) for d in newest_first(passing, k)]
        if len(self._vectors) == 0:
            return []
        by_rowid = {self._rowid[d.id]: d for d in self._docs.values()}
        if filter:
            hits = prefiltered_search(
                self._vectors,
                query_vec,
                k,
                lambda ids: {i for i in ids if matches(by_rowid[i].metadata, filter)},
                lambda: [r for r, d in by_rowid.items() if matches(d.metadata, filter)],
            )
        else:
            hits = self._vectors.search(query_vec, k)
        return [SearchResult(self._out(by_rowid[i], False), score) for i, score in hits]
