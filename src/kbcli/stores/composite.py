"""Store: the public store API, written once over a backend's parts (:mod:`.parts`).

Every built-in store (:class:`~kbcli.stores.SQLiteStore`, :class:`~kbcli.stores.InMemoryStore`,
``FaissStore``, ``ChromaStore``, ``PostgresStore``) is this class with its own parts: an engine
(transactions, read snapshots, the writer lock), a catalog, a keyword index, vectors with a
dense index derived from them, a file ledger and an embedding cache. Every write is one
transaction of the engine, in which the keyword index and the vectors change with the catalog's
rows, so the BM25 statistics stay exact and a crash leaves the previous commit; slow work
(analysis) happens before the transaction starts. What a store writes on its own (derived
files, the upgrade of an older keyword index) is :class:`~.upkeep.Upkeep`'s.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Generic

from kbcli.embedders.base import EmbedderInfo
from kbcli.errors import IndexMismatchError
from kbcli.filters.model import ensure_checked
from kbcli.stores.common import check_embedder, keyword_hit, vector_dimensions
from kbcli.stores.parts import (
    Built,
    Cache,
    Catalog,
    Conn,
    Engine,
    Keywords,
    Ledger,
    Listing,
    Location,
    NewRow,
    RowT,
    Vectors,
)
from kbcli.stores.upkeep import Upkeep
from kbcli.text.analysis import Analyzer, analyzer_from_config
from kbcli.text.bm25 import K1, SOURCE_WEIGHT, B, BM25Params
from kbcli.types import Document, FileRecord, Finding, SearchResult

#: the meta key holding when the index last committed a change to its chunks or vectors
CHANGED_AT = "changed_at"

if TYPE_CHECKING:
    from typing_extensions import Self

    from kbcli.config.schema import Config


class Store(Generic[Conn, RowT]):
    """One index: documents, an exact BM25 index, dense search, a file ledger and an embedding
    cache, over the parts of one backend (see :mod:`.parts`). Implements every storage
    capability of :mod:`.capabilities`; a backend's class only assembles its parts."""

    _engine: Engine[Conn]
    _catalog: Catalog[Conn, RowT]
    _keywords: Keywords[Conn, RowT]
    _vectors: Vectors[Conn]
    _ledger: Ledger[Conn]
    _cache: Cache[Conn]
    _upkeep: Upkeep[Conn, RowT]

    def _assemble(
        self,
        engine: Engine[Conn],
        catalog: Catalog[Conn, RowT],
        keywords: Keywords[Conn, RowT],
        vectors: Vectors[Conn],
        ledger: Ledger[Conn],
        cache: Cache[Conn],
        *,
        upkeep: Upkeep[Conn, RowT] | None = None,
    ) -> None:
        """Take the parts (a backend's ``__init__`` calls this once)."""
        self._engine, self._catalog, self._keywords = engine, catalog, keywords
        self._vectors, self._ledger, self._cache = vectors, ledger, cache
        self._upkeep = upkeep or Upkeep(engine, keywords, vectors)

    #: a store kept somewhere takes ``create`` and ``busy_timeout`` (the memory store neither)
    _persistent = False

    @classmethod
    def from_config(
        cls,
        config: Config,
        settings: dict[str, Any],
        *,
        db: Location = None,
        create: bool = True,
        busy_timeout: float | None = None,
    ) -> Self:
        """The store of ``config`` (a :class:`~kbcli.config.lookup.Config`; ``settings``: its
        validated ``store:`` keys) with the configured analyzer. A store kept in a file opens
        ``db`` (default ``paths.knowledge_db``); ``create=False`` refuses to create a missing
        index and ``busy_timeout`` overrides ``store.busy_timeout``."""
        options = {**settings, "analyzer": analyzer_from_config(config)}
        if cls._persistent:
            options["create"] = create
            if busy_timeout is not None:
                options["busy_timeout"] = busy_timeout
        args, options = cls._located(config, db, options)
        return cls(*args, **options)

    @classmethod
    def _located(cls, config: Config, db: Location, options: dict[str, Any]) -> Built:
        """The arguments :meth:`from_config` builds the store with: where it lives (from
        ``db`` and its settings) and ``options``. Here: the options alone."""
        return (), options

    @property
    def analyzer(self) -> Analyzer:
        """The analyzer of the keyword index."""
        return self._keywords.analyzer

    @property
    def keyword_signature(self) -> str:
        """What the keyword index depends on: the analyzer and the indexed fields."""
        return self._keywords.signature

    def close(self) -> None:
        """Release the store (it cannot be used afterwards). A store that wrote first leaves
        what the next search would build (:meth:`~.upkeep.Upkeep.close`)."""
        try:
            self._upkeep.close()
        finally:
            try:
                self._vectors.close()
            finally:
                self._engine.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def transaction(self) -> AbstractContextManager[Conn]:
        """One write transaction; nested calls join the outer one. Commits or rolls back whole."""
        return self._engine.transaction()

    # --- index metadata ------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        """A value of the index's own metadata (last ingest time, evaluation fingerprint...)."""
        with self._engine.read() as conn:
            return self._catalog.get_meta(conn, key)

    def set_meta(self, key: str, value: str) -> None:
        """Set a value of the index's own metadata."""
        with self._engine.transaction() as conn:
            self._catalog.set_meta(conn, key, value)

    @property
    def embedder_info(self) -> EmbedderInfo | None:
        """The embedder recorded for this index, if any vectors were stored."""
        with self._engine.read() as conn:
            return self._vectors.recorded_embedder(conn)

    def check_embedder(self, info: EmbedderInfo) -> None:
        """Raise IndexMismatchError when the index was built with another embedder."""
        check_embedder(self.embedder_info, info, self._engine.label)

    @property
    def version(self) -> int:
        """Generation counter: changes after every committed write."""
        with self._engine.read() as conn:
            return self._engine.generation(conn)

    # --- writes --------------------------------------------------------------------------------

    def add(
        self,
        docs: list[Document],
        embeddings: list[list[float]] | None = None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> list[str]:
        """Insert or replace ``docs`` (and their vectors) in one transaction; return their ids.

        Vectors come from ``embeddings[i]`` or ``doc.embedding``; all must have one length.
        ``embedder`` is recorded on first use and checked afterwards.
        """
        if embeddings is not None and len(embeddings) != len(docs):
            raise ValueError(f"{len(docs)} documents but {len(embeddings)} embeddings")
        prepared: list[Prepared] = []
        for i, doc in enumerate(docs):
            vec = embeddings[i] if embeddings is not None else doc.embedding
            prepared.append((doc, vec, self._keywords.terms_of(doc)))
        # The same id twice in one batch: the last one wins, as if added one by one.
        prepared = list({doc.id: (doc, vec, c) for doc, vec, c in prepared}.values())
        dim = vector_dimensions(v for _, v, _ in prepared)
        with self._engine.transaction() as conn:
            self._keywords.check_signature(conn, writing=True)
            if dim is not None:
                self._vectors.check(conn, dim, len(prepared))
                if embedder is not None:
                    self._vectors.record_embedder(conn, embedder, dim)
            self._remove_rows(conn, self._catalog.rows_by_ids(conn, [d.id for d, _, _ in prepared]))
            self._insert(conn, prepared)
            self._remove_rows(conn, self._catalog.overflow(conn))
            self._vectors.finish(conn)
        return [doc.id for doc in docs]

    def set_vectors(
        self, vectors: Mapping[str, Sequence[float]], *, embedder: EmbedderInfo | None = None
    ) -> int:
        """Store vectors for chunks already in the index, by id, in one transaction (their
        rows and keyword postings are not touched; ids not in the index are skipped); returns
        how many chunks got one (:class:`~kbcli.stores.capabilities.VectorWriter`)."""
        if not vectors:
            return 0
        dim = vector_dimensions(vectors.values())
        with self._engine.transaction() as conn:
            rowids = self._catalog.rowids(conn, list(vectors))
            if dim is not None:
                self._vectors.check(conn, dim, len(rowids))
                if embedder is not None:
                    self._vectors.record_embedder(conn, embedder, dim)
            self._vectors.upsert(conn, [(doc, vectors[i]) for i, doc in rowids.items()])
            if rowids:
                self._changed(conn)
            self._cache.drop(conn, list(rowids.values()))
            self._vectors.finish(conn)
        return len(rowids)

    def _insert(self, conn: Conn, prepared: list[Prepared]) -> None:
        if not prepared:
            return
        vocab: set[str] = set()
        for _, _, counts in prepared:
            vocab.update(counts)
        term_ids = self._keywords.term_ids(conn, vocab)
        rows: list[NewRow] = [
            (doc, vec, {term_ids[t]: n for t, n in counts.items()}) for doc, vec, counts in prepared
        ]
        self._changed(conn)
        chunks, new_sources = self._catalog.insert(conn, rows)
        self._keywords.add(conn, chunks, new_sources)
        with_vectors = [(c.doc, vec) for c, (_, vec, _) in zip(chunks, rows) if vec is not None]
        self._vectors.upsert(conn, with_vectors)
        self._cache.drop(conn, [doc for doc, _ in with_vectors])

    def _remove_rows(self, conn: Conn, rows: Sequence[RowT]) -> int:
        if not rows:
            return 0
        docs = [r.doc for r in rows]
        self._changed(conn)
        self._cache.keep(conn, docs)  # before their vectors go: an edit undone embeds nothing
        self._keywords.remove(conn, rows)
        self._vectors.remove(conn, docs)
        self._catalog.delete_rows(conn, docs)
        return len(rows)

    def _changed(self, conn: Conn) -> None:
        """Record in the write transaction that the chunks or vectors changed (the
        watermark's ``changed_at``: it commits with them or not at all)."""
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._catalog.set_meta(conn, CHANGED_AT, now)

    def delete(self, ids: list[str]) -> bool:
        """Delete documents by id in one transaction; True when at least one existed."""
        return self.remove(ids) > 0

    def remove(self, ids: list[str]) -> int:
        """Delete documents by id in one transaction; returns how many existed."""
        if not ids:
            return 0
        with self._engine.transaction() as conn:
            return self._remove_rows(conn, self._catalog.rows_by_ids(conn, list(ids)))

    def delete_source(self, source: str) -> int:
        """Delete every chunk of ``source`` and its file record; returns the chunk count."""
        with self._engine.transaction() as conn:
            self._ledger.forget(conn, source)
            return self._remove_rows(conn, self._catalog.rows_by_source(conn, source))

    def delete_where(self, filter: dict[str, Any]) -> int:
        """Delete every chunk whose metadata passes ``filter``; returns how many."""
        checked = ensure_checked(filter)
        with self._engine.transaction() as conn:
            return self._remove_rows(conn, self._catalog.rows_where(conn, checked))

    def replace_source(
        self,
        source: str,
        docs: list[Document],
        embeddings: list[list[float]] | None = None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> list[str]:
        """Atomically swap the chunks of ``source`` for ``docs``: no reader sees both or neither."""
        with self._engine.transaction() as conn:
            self._remove_rows(conn, self._catalog.rows_by_source(conn, source))
            return self.add(docs, embeddings, embedder=embedder)

    def rebuild_keyword_index(self) -> int:
        """Re-tokenise every chunk with the current analyzer (no re-embedding); returns count."""
        with self._engine.transaction() as conn:
            return self._keywords.rebuild(conn)

    def reembed(
        self,
        embed: Callable[[list[str]], list[list[float]]],
        info: EmbedderInfo,
        *,
        batch_size: int = 256,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Re-embed every chunk with ``embed`` (texts -> vectors) and switch the index to ``info``.

        New vectors are staged, committed batch by batch, so an interrupted run resumes where
        it stopped; the switch to the new vectors is one transaction, so searches never see a
        mix of two embedders. Returns the number of chunks embedded in this run.
        """
        target = json.dumps({"provider": info.provider, "model": info.model})
        with self._engine.transaction() as conn:
            self._vectors.stage(conn, target)
        with self._engine.read() as conn:
            todo, total = self._vectors.unstaged(conn)
        done_before = total - len(todo)
        for start in range(0, len(todo), batch_size):
            part = todo[start : start + batch_size]
            vectors = embed([text for _, text in part])
            with self._engine.transaction() as conn:
                self._vectors.put_staged(conn, part, vectors)
            if progress is not None:
                progress(done_before + start + len(part), total)
        with self._engine.transaction() as conn:
            self._vectors.swap_staged(conn, info)
            self._changed(conn)
        return len(todo)

    # --- file ledger and embedding cache --------------------------------------------------------

    def writer_lock(self, wait: float) -> AbstractContextManager[None]:
        """The one-ingest-at-a-time lock of this index (fails before an ingest reads or embeds
        anything when the index cannot be written)."""
        return self._engine.writer_lock(wait)

    def file_records(self) -> dict[str, FileRecord]:
        """Every indexed file, by absolute path."""
        with self._engine.read(latest=True) as conn:
            return self._ledger.records(conn)

    def file_records_of(self, paths: Sequence[str]) -> dict[str, FileRecord]:
        """The records of those of ``paths`` that are indexed files (a few lookups)."""
        with self._engine.read(latest=True) as conn:
            return self._ledger.records_of(conn, paths)

    def ingest_running(self) -> bool:
        """True when an ingest holds the writer lock now (asked without taking it)."""
        return self._engine.writer_busy()

    def vectors_missing(self) -> int:
        """How many chunks have no vector (written, their vectors not filled in yet)."""
        with self._engine.read(latest=True) as conn:
            return max(0, self._catalog.totals(conn)[0] - self._vectors.count(conn, cached=True))

    def replace_file(
        self,
        record: FileRecord,
        docs: list[Document],
        embeddings: list[list[float]] | None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> int:
        """Swap a file's chunks and record in one transaction; returns the chunks removed.

        The vectors of the chunks removed are kept in the embedding cache (the new ones are
        found there as the index's own: :meth:`cached_embeddings`).
        """
        return self.replace_files([(record, docs, embeddings, embedder)])[0]

    def replace_files(self, files: Sequence[FileSwap]) -> list[int]:
        """:meth:`replace_file` of each ``(record, docs, embeddings, embedder)``, all in one
        transaction; returns the chunks removed from each file. The new chunks of files with
        distinct paths go to the index as one :meth:`add`: one term lookup and one update of
        each term's frequencies for the whole batch, not one per file (at 100k chunks in 10,000
        files, those per-file statements were a third of ``kb ingest``'s store time)."""
        if not files:
            return []
        self._upkeep.ingested = True
        removed: list[int] = []
        with self._engine.transaction() as conn:
            for part in _distinct_paths(files):
                removed += [
                    self._remove_rows(conn, self._catalog.rows_by_source(conn, r.path))
                    for r, _, _, _ in part
                ]
                docs: list[Document] = []
                vectors: list[Any] = []
                for _, file_docs, embeddings, _ in part:
                    docs += file_docs
                    vectors += (
                        [d.embedding for d in file_docs] if embeddings is None else embeddings
                    )
                if docs:
                    # an embedder given for any file of the batch is recorded by this one
                    # transaction either way
                    info = next((e for _, d, _, e in part if e is not None and d), None)
                    self.add(docs, vectors, embedder=info)
                for record, _, _, _ in part:
                    self._ledger.put(conn, record)
        return removed

    def touch_file(self, record: FileRecord) -> None:
        """Update a file's record (new mtime, same content) without touching its chunks."""
        with self._engine.transaction() as conn:
            self._ledger.put(conn, record)

    def checkpoint(self) -> None:
        """Let the engine fold its write-ahead log (SQLite: PASSIVE, never waits for readers)."""
        self._engine.checkpoint()

    def prepare_search(self) -> None:
        """Write now what the next search would write first (SQLite: the keyword pack, 0.7 s at
        100k chunks, 19 s at 1M), at the end of an ingest that changed the index."""
        self._upkeep.prepare_search()

    def refresh_vector_index(self) -> None:
        """Bring the derived vector index (matrix cache, FAISS file, Chroma collection) up to
        date now instead of at the next dense search."""
        self._upkeep.refresh_vector_index()

    def upgrade_keyword_index(self, wait: float = 0.0) -> bool:
        """Re-tokenise the keyword index from the stored chunks if it was built with another
        analyzer or field set (an index of an older kbcli), in one transaction, when the
        writer lock is free within ``wait`` seconds. True when the index now matches."""
        return self._upkeep.upgrade_keyword_index(wait)

    def cached_embeddings(self, info: EmbedderInfo, texts: list[str]) -> dict[str, list[float]]:
        """Vectors already computed by this embedder for any of ``texts``, by text: a stored
        chunk's of the same text, else one the cache kept (a chunk that left the index,
        or given to :meth:`cache_embeddings`)."""
        with self._engine.read(latest=True) as conn:
            return self._cache.cached(conn, info, texts)

    def cache_embeddings(self, info: EmbedderInfo, vectors: dict[str, list[float]]) -> None:
        """Keep vectors by (embedder, text) so that text is never embedded again, within the
        cache's bound (nothing for an embedder cheaper to run again: ``info.cache`` False).
        Vectors stored with chunks need not be given: the index's own are found first."""
        if not info.cache:
            return
        with self._engine.transaction() as conn:
            self._cache.remember(conn, info, vectors)

    # --- reads ---------------------------------------------------------------------------------

    def get(self, ids: list[str], *, with_embeddings: bool = False) -> list[Document]:
        """The stored documents among ``ids``, in the order asked."""
        with self._engine.read() as conn:
            return self._catalog.get(conn, list(ids), with_embeddings)

    def list_all(self) -> list[Document]:
        """Every stored document with its embedding, oldest first."""
        return list(self.iter_documents(with_embeddings=True))

    def iter_documents(
        self,
        filter: dict[str, Any] | None = None,
        *,
        source: str | None = None,
        limit: int | None = None,
        with_embeddings: bool = False,
    ) -> Iterator[Document]:
        """Documents passing ``filter`` (and of ``source``), oldest first, at most ``limit``."""
        filter = ensure_checked(filter)
        with self._engine.read() as conn:
            docs = self._catalog.select_documents(
                conn, filter, Listing(source, limit, with_embeddings=with_embeddings)
            )
        yield from docs

    def count(self, filter: dict[str, Any] | None = None) -> int:
        """Number of stored documents passing ``filter`` (all without one)."""
        filter = ensure_checked(filter)
        with self._engine.read() as conn:
            return self._catalog.count(conn, filter)

    def __len__(self) -> int:
        return self.count()

    def sources(self) -> list[tuple[str, int]]:
        """Each source with its number of chunks, sorted by source."""
        with self._engine.read() as conn:
            return self._catalog.sources(conn)

    def stats(self) -> dict[str, Any]:
        """Counts and settings of the index (for ``kb stats``)."""
        engine = self._engine
        with engine.read(latest=True) as conn:
            n, total = self._catalog.totals(conn)
            info = self._vectors.recorded_embedder(conn)
            figures = {
                "path": engine.location,
                **engine.identity,
                "chunks": n,
                "sources": self._catalog.named_sources(conn),
                "files": self._ledger.count(conn),
                "vectors": self._vectors.count(conn),
                "vocabulary": self._keywords.vocabulary(conn),
                "avg_chunk_terms": (total / n) if n else 0.0,
                "size_bytes": engine.size(conn),
                "embedder": None if info is None else {
                    "provider": info.provider, "model": info.model, "dimension": info.dimension
                },
                "analyzer": self._keywords.recorded_signature(conn),
                "last_ingest": self._catalog.get_meta(conn, "last_ingest"),
                "schema_version": engine.schema_version,
                "generation": engine.generation(conn),
                **self._vectors.figures(conn),
            }  # fmt: skip
        return {**figures, **engine.figures()}

    # --- search --------------------------------------------------------------------------------

    def keyword_search(
        self,
        query: str,
        k: int = 5,
        filter: dict[str, Any] | None = None,
        *,
        k1: float = K1,
        b: float = B,
        source_weight: float = SOURCE_WEIGHT,
        scope: dict[str, Any] | None = None,
    ) -> list[SearchResult]:
        """BM25 with source context (see :mod:`kbcli.text.bm25`); ``filter`` applies before ranking.
        With ``scope`` (an access scope) only chunks passing it are ranked and every corpus
        statistic is the scope's alone: the hits and scores of an index holding only the
        scope's chunks (``filter`` then narrows within it).
        Every hit's ``explain`` holds ``bm25_chunk``, ``bm25_source`` and ``source_weight``."""
        filter = ensure_checked(filter)
        scope = ensure_checked(scope)
        params = BM25Params(k1, b, source_weight)
        for attempt in (1, 2):
            try:
                with self._engine.read() as conn:
                    scored = self._keywords.search(conn, query, k, filter, params, scope)
                    docs = self._catalog.documents_by_rowid(conn, [s.doc for s in scored])
                break
            except IndexMismatchError:
                if attempt == 2 or not self._upkeep.upgrade_keyword_index(wait=0.0):
                    raise
        self._upkeep.after_search()
        return [keyword_hit(docs[s.doc], s, source_weight) for s in scored if s.doc in docs]

    def search(
        self, query_vec: list[float], k: int = 5, filter: dict[str, Any] | None = None
    ) -> list[SearchResult]:
        """The ``k`` stored vectors most similar to ``query_vec`` among the documents passing
        ``filter`` (a pre-filter), best first. An empty query vector returns the newest ``k``
        documents passing it, scored 1.0."""
        filter = ensure_checked(filter)
        with self._engine.read() as conn:
            if not len(query_vec):
                newest_k = Listing(limit=k, newest_first=True)
                newest = self._catalog.select_documents(conn, filter, newest_k)
                return [SearchResult(doc, 1.0) for doc in newest]
            hits = self._vectors.search(conn, query_vec, k, filter)
            docs = self._catalog.documents_by_rowid(conn, [i for i, _ in hits])
        return [SearchResult(docs[i], score) for i, score in hits if i in docs]

    def doctor(self, repair: bool = False) -> list[Finding]:
        """Check the derived structures (keyword tables, keyword pack, vector index) against
        the catalog; with ``repair``, rebuild what drifted. A store that keeps nothing derived
        has nothing to check; a backend that does overrides this."""
        return []


#: a document to add, its vector and its term frequencies (before any lock is taken)
Prepared = tuple[Document, "Sequence[float] | None", "Counter[str]"]
FileSwap = tuple[FileRecord, list[Document], "list[list[float]] | None", "EmbedderInfo | None"]


def _distinct_paths(files: Sequence[FileSwap]) -> Iterator[list[FileSwap]]:
    """``files`` in runs of distinct paths, in order: a path met again starts a new run (its
    removal must see the chunks the run before it added)."""
    run: list[FileSwap] = []
    paths: set[str] = set()
    for item in files:
        if item[0].path in paths:
            yield run
            run, paths = [], set()
        run.append(item)
        paths.add(item[0].path)
    if run:
        yield run
