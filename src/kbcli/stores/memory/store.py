"""InMemoryStore: every storage capability in Python objects, for tests, notebooks and agents.

:class:`~kbcli.stores.composite.Store` over parts that share one :class:`MemoryState`: the engine
takes a copy of the state when a transaction starts and puts it back when one fails; the catalog
keeps documents in insertion order; the keyword index is :mod:`kbcli.text.bm25` in dicts
(:class:`~.keyword_memory.MemoryKeywordIndex`); dense search is exact (:class:`NumpyVectorIndex`).
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kbcli.embedders.base import EmbedderInfo
from kbcli.errors import DatabaseLockedError, IndexMismatchError
from kbcli.filters.model import matches
from kbcli.stores.common import KEEP_AT_LEAST, cache_key, check_embedder, dense_search
from kbcli.stores.composite import Store
from kbcli.stores.memory.keyword import MemoryKeywordIndex
from kbcli.stores.nesting import Nesting
from kbcli.stores.numpy_index import NumpyVectorIndex
from kbcli.stores.parts import EVERY, Filter, Hit, Listing, Vector
from kbcli.text.analysis import Analyzer
from kbcli.text.analysis import keyword_signature as signature_of
from kbcli.text.bm25 import BM25Params, ChunkTerms, Scored
from kbcli.types import Document, FileRecord

WHERE = "this in-memory store"


@dataclass(frozen=True)
class MemoryRow:
    """A stored document as a delete needs it."""

    doc: int  # its row id
    id: str


class MemoryState:
    """Everything an in-memory store holds; the parts share it."""

    def __init__(self, index: MemoryKeywordIndex):
        self.index = index
        self.reset()

    def reset(self) -> None:
        """Forget everything."""
        self.docs: OrderedDict[str, Document] = OrderedDict()
        self.rowid: dict[str, int] = {}
        self.by_rowid: dict[int, Document] = {}
        self.next_rowid = 1
        self.sources: dict[str, int] = {}  # source (or "\0" + id of a sourceless doc) -> src
        self.next_src = 1
        self.vectors = NumpyVectorIndex()
        self.index.clear()
        self.records: dict[str, FileRecord] = {}
        self.cache: dict[tuple[str, str], list[float]] = {}
        self.meta: dict[str, str] = {}
        self.embedder: EmbedderInfo | None = None
        self.staged: tuple[str, dict[int, list[float]]] | None = None  # reembed's (target, vectors)

    def snapshot(self) -> dict[str, Any]:
        """What :meth:`restore` needs to put the state back as it is now."""
        return {
            "docs": OrderedDict(self.docs),
            "rowid": dict(self.rowid),
            "next": self.next_rowid,
            "sources": dict(self.sources),
            "next_src": self.next_src,
            "records": dict(self.records),
            "cache": dict(self.cache),
            "meta": dict(self.meta),
            "embedder": self.embedder,
            "staged": self.staged and (self.staged[0], dict(self.staged[1])),
        }

    def restore(self, saved: dict[str, Any]) -> None:
        """Back to a :meth:`snapshot` (the indexes are rebuilt from its documents)."""
        self.reset()
        self.next_rowid = saved["next"]
        self.sources, self.next_src = saved["sources"], saved["next_src"]
        for doc in saved["docs"].values():
            rowid = saved["rowid"][doc.id]
            self.keep(doc, rowid)
            self.index.add([ChunkTerms(rowid, self.source_of(doc), self.index.terms_of(doc))])
            if doc.embedding is not None:
                self.vectors.upsert([rowid], [doc.embedding])
        self.records, self.cache = saved["records"], saved["cache"]
        self.meta, self.embedder, self.staged = saved["meta"], saved["embedder"], saved["staged"]

    def keep(self, doc: Document, rowid: int) -> None:
        """Hold ``doc`` under ``rowid``."""
        self.docs[doc.id] = doc
        self.rowid[doc.id] = rowid
        self.by_rowid[rowid] = doc

    def source_of(self, doc: Document) -> int:
        """The source id of ``doc`` (created when new; a doc without a source has its own)."""
        source = doc.metadata.get("source")
        key = str(source) if source is not None else f"\0{doc.id}"
        if key not in self.sources:
            self.sources[key], self.next_src = self.next_src, self.next_src + 1
        return self.sources[key]


class MemoryEngine(Nesting[None]):
    """Transactions over a :class:`MemoryState`: a copy is taken when one starts and put back
    when it fails (all or nothing); a thread lock serialises them with reads."""

    conn = None  # the parts share the state instead
    label = WHERE
    location: str | None = None
    identity: dict[str, Any] = {}
    schema_version: int | None = None
    errors: tuple[type[BaseException], ...] = ()

    def __init__(self, state: MemoryState):
        super().__init__()
        self.state = state
        self.version = 0  # bumped on every change; lets retrievers cache derived indexes
        self._writer = threading.Lock()

    @contextmanager
    def _write(self) -> Iterator[None]:
        saved, version = self.state.snapshot(), self.version
        self.depth = 1
        try:
            yield
            self.version += 1
        except BaseException:
            self.state.restore(saved)
            self.version = version + 1  # derived caches must not trust what they saw inside
            raise
        finally:
            self.depth = 0

    @contextmanager
    def _read(self) -> Iterator[None]:
        yield

    @contextmanager
    def writer_lock(self, wait: float) -> Iterator[None]:
        """One writer at a time (threads of this process)."""
        if not self._writer.acquire(timeout=max(0.0, wait)):
            raise DatabaseLockedError(f"Another ingest is writing to {WHERE}; waited {wait:g} s")
        try:
            yield
        finally:
            self._writer.release()

    def writer_busy(self) -> bool:
        """True while a thread holds :meth:`writer_lock`."""
        return self._writer.locked()

    def generation(self, conn: None) -> int:
        """The change counter."""
        return self.version

    def size(self, conn: None) -> int:
        """Nothing on disk."""
        return 0

    def checkpoint(self) -> None:
        """Nothing to fold."""

    def close(self) -> None:
        """Nothing to release."""


class MemoryCatalog:
    """Documents in insertion order; beyond ``max_size`` the oldest are evicted (FIFO)."""

    def __init__(self, state: MemoryState, max_size: int | None):
        self.state = state
        self.max_size = max_size

    def insert(self, conn: None, rows: list[Any]) -> tuple[list[ChunkTerms], set[int]]:
        """Store copies of the documents (the vector a row brings becomes their embedding)."""
        s = self.state
        chunks = []
        for doc, vec, tf in rows:
            item = copy.copy(doc)
            item.metadata = dict(doc.metadata)
            item.embedding = list(vec) if vec is not None else None
            s.keep(item, s.next_rowid)
            chunks.append(ChunkTerms(s.next_rowid, s.source_of(item), tf))
            s.next_rowid += 1
        return chunks, set()  # the keyword index knows its sources

    def delete_rows(self, conn: None, docs: list[int]) -> None:
        """Forget documents by row id."""
        s = self.state
        for rowid in docs:
            doc = s.by_rowid.pop(rowid)
            del s.docs[doc.id], s.rowid[doc.id]
            if doc.metadata.get("source") is None:
                s.sources.pop(f"\0{doc.id}", None)

    def _rows(self, docs: Iterable[Document]) -> list[MemoryRow]:
        return [MemoryRow(self.state.rowid[d.id], d.id) for d in docs]

    def rowids(self, conn: None, ids: Sequence[str]) -> dict[str, int]:
        """The row id of each document among ``ids`` that is stored."""
        return {i: self.state.rowid[i] for i in dict.fromkeys(ids) if i in self.state.docs}

    def rows_by_ids(self, conn: None, ids: Sequence[str]) -> list[MemoryRow]:
        """The documents among ``ids``."""
        return self._rows(self.state.docs[i] for i in dict.fromkeys(ids) if i in self.state.docs)

    def rows_by_source(self, conn: None, source: str) -> list[MemoryRow]:
        """The documents of ``source``."""
        return self._rows(d for d in self.state.docs.values() if d.metadata.get("source") == source)

    def rows_where(self, conn: None, filter: dict[str, Any] | None) -> list[MemoryRow]:
        """The documents passing ``filter``."""
        return self._rows(d for d in self.state.docs.values() if matches(d.metadata, filter))

    def overflow(self, conn: None) -> list[MemoryRow]:
        """The oldest documents beyond ``max_size``."""
        excess = len(self.state.docs) - (self.max_size or len(self.state.docs))
        return self._rows(list(self.state.docs.values())[:excess]) if excess > 0 else []

    def get(self, conn: None, ids: Sequence[str], with_embeddings: bool) -> list[Document]:
        """The stored documents themselves (their embedding costs nothing to hand out)."""
        return [self.state.docs[i] for i in ids if i in self.state.docs]

    def select_documents(self, conn: None, filter: Filter, how: Listing = EVERY) -> list[Document]:
        """Documents passing ``filter``, as ``how`` asks (oldest first unless newest first)."""
        docs = list(self.state.docs.values())
        source, limit = how.source, how.limit
        out: list[Document] = []
        for doc in reversed(docs) if how.newest_first else docs:
            if limit is not None and len(out) >= limit:
                break
            if source is not None and doc.metadata.get("source") != source:
                continue
            if matches(doc.metadata, filter):
                out.append(doc)
        return out

    def documents_by_rowid(self, conn: None, rowids: Sequence[int]) -> dict[int, Document]:
        """Documents by row id."""
        return {r: self.state.by_rowid[r] for r in rowids if r in self.state.by_rowid}

    def count(self, conn: None, filter: dict[str, Any] | None) -> int:
        """How many documents pass ``filter``."""
        if not filter:
            return len(self.state.docs)
        return sum(1 for d in self.state.docs.values() if matches(d.metadata, filter))

    def sources(self, conn: None) -> list[tuple[str, int]]:
        """Each source with its number of documents, sorted by source."""
        counts: Counter[str] = Counter()
        for doc in self.state.docs.values():
            source = doc.metadata.get("source")
            if source is not None:
                counts[str(source)] += 1
        return sorted(counts.items())

    def named_sources(self, conn: None) -> int:
        """How many named sources there are."""
        return len(self.sources(conn))

    def totals(self, conn: None) -> tuple[int, int]:
        """How many documents, and their total length in terms."""
        return len(self.state.docs), self.state.index.total_length

    def get_meta(self, conn: None, key: str) -> str | None:
        """A value of the store's own metadata."""
        return self.state.meta.get(key)

    def set_meta(self, conn: None, key: str, value: str) -> None:
        """Set a value of the store's own metadata."""
        self.state.meta[key] = value


class MemoryKeywords:
    """The keyword part: a :class:`MemoryKeywordIndex` over the state's documents."""

    due = False

    def __init__(self, state: MemoryState):
        self.state = state
        self.analyzer: Analyzer = state.index.analyzer

    @property
    def signature(self) -> str:
        """What the keyword index depends on: the analyzer and the indexed fields."""
        return signature_of(self.analyzer)

    def terms_of(self, doc: Document) -> Counter[str]:
        """The term frequencies the index stores for ``doc``."""
        return self.state.index.terms_of(doc)

    def recorded_signature(self, conn: None) -> str | None:
        """The analyzer's signature while any document is indexed."""
        return self.signature if self.state.docs else None

    def check_signature(self, conn: None, *, writing: bool) -> int | None:
        """Always current: the index lives as long as its analyzer."""
        return None

    def term_ids(self, conn: None, terms: set[str]) -> dict[str, Any]:
        """Terms are their own ids."""
        return {t: t for t in terms}

    def add(self, conn: None, chunks: list[ChunkTerms], new_sources: set[int]) -> None:
        """Index new chunks."""
        self.state.index.add(chunks)

    def remove(self, conn: None, rows: Sequence[MemoryRow]) -> None:
        """Unindex chunks."""
        self.state.index.remove([r.doc for r in rows])

    def rebuild(self, conn: None) -> int:
        """Re-analyse every document (after changing the analyzer); returns how many."""
        s = self.state
        s.index.clear()
        for doc in s.docs.values():
            s.index.add([ChunkTerms(s.rowid[doc.id], s.source_of(doc), s.index.terms_of(doc))])
        return len(s.docs)

    def vocabulary(self, conn: None) -> int:
        """How many distinct terms are indexed."""
        return len(self.state.index.df)

    def search(
        self,
        conn: None,
        query: str,
        k: int,
        filter: Filter,
        params: BM25Params,
        scope: Filter = None,
    ) -> list[Scored]:
        """BM25 with source context, ``filter`` applied first (:func:`kbcli.text.bm25.rank`); with
        ``scope``, inside it and with its statistics alone."""
        by_rowid = self.state.by_rowid

        def passing(flt: Filter) -> Callable[[int], bool] | None:
            return (lambda doc: matches(by_rowid[doc].metadata, flt)) if flt else None

        return self.state.index.search(
            query,
            k,
            k1=params.k1,
            b=params.b,
            source_weight=params.source_weight,
            allowed=passing(filter),
            scope=passing(scope),
        )

    def refresh(self, conn: None) -> None:
        """Nothing derived to write."""


class MemoryVectors:
    """The vectors part: the documents' embeddings in a :class:`NumpyVectorIndex`."""

    def __init__(self, state: MemoryState):
        self.state = state

    def check(self, conn: None, dim: int, rows: int) -> None:
        """Refuse vectors of another length than the stored ones."""
        index_dim = self.state.vectors.dimension
        if index_dim is not None and index_dim != dim:
            raise IndexMismatchError(
                f"New vectors have {dim} dimensions but the store has {index_dim}"
            )

    def record_embedder(self, conn: None, info: EmbedderInfo, dim: int) -> None:
        """Record ``info`` with the first vectors; refuse another model later."""
        info = EmbedderInfo(info.provider, info.model, dim, cache=info.cache)
        check_embedder(self.state.embedder, info, WHERE)
        recorded = self.state.embedder
        if recorded is None or recorded.cache != info.cache:
            dim = recorded.dimension if recorded is not None and recorded.dimension else dim
            self.state.embedder = EmbedderInfo(info.provider, info.model, dim, cache=info.cache)

    def recorded_embedder(self, conn: None) -> EmbedderInfo | None:
        """The embedder recorded with the first vectors (None before)."""
        return self.state.embedder

    def upsert(self, conn: None, rows: list[tuple[int, Sequence[float]]]) -> None:
        """Index vectors by row id; a document whose embedding differs (vectors set after its
        rows, :meth:`Store.set_vectors`) is replaced by a copy holding the new one."""
        if not rows:
            return
        s = self.state
        for rowid, vec in rows:
            doc = s.by_rowid.get(rowid)
            if doc is not None and doc.embedding != list(vec):
                fresh = copy.copy(doc)  # a copy: a failed transaction puts the old one back
                fresh.embedding = list(vec)
                s.keep(fresh, rowid)
        s.vectors.upsert([r for r, _ in rows], [v for _, v in rows])

    def remove(self, conn: None, docs: list[int]) -> None:
        """Drop the vectors of row ids."""
        self.state.vectors.remove(docs)

    def finish(self, conn: None) -> None:
        """Nothing to do at the end of a write."""

    def count(self, conn: None, *, cached: bool = False) -> int:
        """How many vectors are indexed."""
        return len(self.state.vectors)

    def search(self, conn: None, query: Vector, k: int, filter: Filter) -> list[Hit]:
        """Exact cosine against every stored vector that passes ``filter``."""
        by_rowid = self.state.by_rowid
        return dense_search(
            self.state.vectors,
            query,
            k,
            filter,
            lambda ids: {i for i in ids if matches(by_rowid[i].metadata, filter)},
            lambda: [r for r, d in by_rowid.items() if matches(d.metadata, filter)],
        )

    def refresh(self, conn: None) -> None:
        """Nothing derived to bring up to date."""

    def figures(self, conn: None) -> dict[str, Any]:
        """Nothing beyond the common figures."""
        return {}

    def close(self) -> None:
        """Nothing to release."""

    # --- re-embedding (Store.reembed) ---------------------------------------------------------

    def stage(self, conn: None, target: str) -> None:
        """Start staging for ``target`` (resume when its vectors are staged already)."""
        if self.state.staged is None or self.state.staged[0] != target:
            self.state.staged = (target, {})

    def unstaged(self, conn: None) -> tuple[list[tuple[int, str]], int]:
        """The documents without a staged vector, and how many documents there are."""
        assert self.state.staged is not None
        staged = self.state.staged[1]
        todo = [(r, d.text) for r, d in self.state.by_rowid.items() if r not in staged]
        return todo, len(self.state.docs)

    def put_staged(
        self, conn: None, rows: list[tuple[int, str]], vectors: list[list[float]]
    ) -> None:
        """Stage vectors."""
        assert self.state.staged is not None
        self.state.staged[1].update((r, list(v)) for (r, _), v in zip(rows, vectors))

    def swap_staged(self, conn: None, info: EmbedderInfo) -> None:
        """The staged vectors become the documents' embeddings; ``info`` is recorded."""
        s = self.state
        assert s.staged is not None
        staged, s.staged = s.staged[1], None
        s.vectors = NumpyVectorIndex()
        dim = None
        for rowid, doc in list(s.by_rowid.items()):
            vec = staged.get(rowid)
            fresh = copy.copy(doc)  # a copy: a failed transaction puts the old one back
            fresh.embedding = vec
            s.keep(fresh, rowid)
            if vec is not None:
                s.vectors.upsert([rowid], [vec])
                dim = len(vec)
        s.embedder = EmbedderInfo(info.provider, info.model, dim) if dim is not None else None


class MemoryLedger:
    """The file ledger and the embedding cache in dicts."""

    def __init__(self, state: MemoryState):
        self.state = state

    def records(self, conn: None) -> dict[str, FileRecord]:
        """Every file record (a copy), by path."""
        return {p: copy.deepcopy(r) for p, r in self.state.records.items()}

    def records_of(self, conn: None, paths: Sequence[str]) -> dict[str, FileRecord]:
        """The records (copies) of those of ``paths`` that are recorded."""
        return {p: copy.deepcopy(self.state.records[p]) for p in paths if p in self.state.records}

    def count(self, conn: None) -> int:
        """How many files are recorded."""
        return len(self.state.records)

    def put(self, conn: None, record: FileRecord) -> None:
        """Insert or replace a file record."""
        self.state.records[record.path] = copy.deepcopy(record)

    def forget(self, conn: None, path: str) -> None:
        """Drop a file record."""
        self.state.records.pop(path, None)

    def cached(self, conn: None, info: EmbedderInfo, texts: list[str]) -> dict[str, list[float]]:
        """Vectors ``info``'s embedder already made for any of ``texts``: a stored document's
        of the same text, else a kept one."""
        key = cache_key(info)
        s = self.state
        wanted = set(texts)
        found: dict[str, list[float]] = {}
        if s.embedder is not None and cache_key(s.embedder) == key:
            for doc in s.docs.values():
                if doc.embedding is not None and doc.text in wanted:
                    found.setdefault(doc.text, list(doc.embedding))
        cache = s.cache
        found.update((t, cache[(key, t)]) for t in wanted - found.keys() if (key, t) in cache)
        return found

    def remember(self, conn: None, info: EmbedderInfo, vectors: dict[str, list[float]]) -> None:
        """Keep vectors by (embedder, text), the oldest dropped beyond the bound."""
        key = cache_key(info)
        for text, vec in vectors.items():
            self._put((key, text), list(vec))
        self._trim()

    def keep(self, conn: None, docs: list[int]) -> None:
        """Keep the vectors of the documents ``docs`` (row ids) about to leave the store."""
        s = self.state
        if s.embedder is None or not s.embedder.cache:
            return
        key = cache_key(s.embedder)
        going = set(docs)
        leaving = [s.by_rowid[r] for r in docs if r in s.by_rowid]
        texts = {d.text for d in leaving if d.embedding is not None}
        # (not a text another document still holds with a vector: the store serves that one)
        staying = {
            d.text
            for r, d in s.by_rowid.items()
            if r not in going and d.embedding is not None and d.text in texts
        }
        for doc in leaving:
            if doc.embedding is not None and doc.text not in staying:
                self._put((key, doc.text), list(doc.embedding))
        self._trim()

    def drop(self, conn: None, docs: list[int]) -> None:
        """Forget kept vectors of the texts of ``docs``, stored with a vector again."""
        s = self.state
        if s.embedder is None or not s.cache:
            return
        key = cache_key(s.embedder)
        for rowid in docs:
            doc = s.by_rowid.get(rowid)
            if doc is not None:
                s.cache.pop((key, doc.text), None)

    def _put(self, key: tuple[str, str], vec: list[float]) -> None:
        self.state.cache.pop(key, None)  # the newest goes last
        self.state.cache[key] = vec

    def _trim(self) -> None:
        cache = self.state.cache
        extra = len(cache) - max(KEEP_AT_LEAST, len(self.state.docs))
        for key in list(itertools.islice(cache, max(0, extra))):
            del cache[key]


class InMemoryStore(Store[None, MemoryRow]):
    """Documents in insertion order; beyond ``max_size`` the oldest are evicted (FIFO).

    Adding an id that exists replaces that document and makes it the newest. An empty query
    vector returns the newest ``k`` documents (that pass the filter) with score 1.0. It has a
    BM25 index (:class:`MemoryKeywordIndex`), exact dense search, a file ledger and an
    embedding cache, so every command and retriever works on it; nothing survives the process.
    Transactions roll back on error (a copy of the state is taken when one starts).
    """

    _catalog: MemoryCatalog

    def __init__(self, max_size: int | None = None, *, analyzer: Analyzer | None = None):
        if max_size is not None and max_size < 1:
            raise ValueError(f"max_size must be at least 1 or None, got {max_size}")
        state = MemoryState(MemoryKeywordIndex(analyzer))
        ledger = MemoryLedger(state)
        self._assemble(
            MemoryEngine(state),
            MemoryCatalog(state, max_size),
            MemoryKeywords(state),
            MemoryVectors(state),
            ledger,
            ledger,
        )

    @property
    def max_size(self) -> int | None:
        """How many documents the store keeps at most (None: no bound)."""
        return self._catalog.max_size

    @max_size.setter
    def max_size(self, value: int | None) -> None:
        self._catalog.max_size = value
