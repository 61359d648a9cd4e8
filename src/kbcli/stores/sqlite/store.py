"""SQLiteStore: catalog, keyword index, vectors, file ledger and embedding cache in one file.

The store is a facade over one module per concept (see the package docstring); it implements
every storage capability of :mod:`kbcli.protocols`. Every write runs in one ``BEGIN IMMEDIATE``
transaction, so the statistics stay exact after any mix of adds, upserts and deletes and a crash
leaves the file at the previous commit; slow work (analysis) happens before the lock is taken.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from ...analysis import Analyzer
from ...bm25 import K1, SOURCE_WEIGHT, B, ChunkTerms
from ...embedders.base import EmbedderInfo
from ...errors import IndexMismatchError, StoreError
from ...filters import validate_filter
from ...types import Document, FileRecord, Finding, SearchResult
from ..common import (
    check_embedder,
    keyword_hit,
    lock_file,
    prefiltered_search,
    scratch_folder,
    vector_dimensions,
)
from . import catalog, integrity, ledger, vectors
from . import vectors as vectors_of
from .catalog import ChunkRow, pack_terms
from .connection import DEFAULT_BUSY_TIMEOUT, Database
from .keyword import KeywordTables
from .schema import SCHEMA_VERSION


class SQLiteStore:
    """A persistent store with an exact BM25 index and vectorised dense search.

    ``path``: the database file (parent folders are created). Without one the store is private
    to this object: a temporary folder (see :func:`~kbcli.stores.common.scratch_folder`),
    deleted by :meth:`close`, when the store is garbage-collected or at exit; it never opens
    ``paths.knowledge_db`` (``KnowledgeBase.open`` and ``kb`` do). ``analyzer`` tokenises
    text for the keyword index (default: :class:`Analyzer()`); the index records its
    signature and refuses to mix two analyzers. ``busy_timeout`` is how many seconds a writer
    waits for another writer before :class:`DatabaseLockedError`. ``create=False`` refuses to
    create a missing database.
    """

    _scratch: Callable[[], Any] | None = None  # deletes the private folder of a pathless store

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        analyzer: Analyzer | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        create: bool = True,
    ):
        if path is None:
            folder, self._scratch = scratch_folder(self)
            path = folder / "knowledge.db"
        self.path = Path(path).expanduser()
        self.busy_timeout = busy_timeout
        self._allowed = catalog.AllowedRowids()
        self._keywords = KeywordTables(analyzer or Analyzer(), self.path, self._allowed)
        self._db = Database(self.path, busy_timeout=busy_timeout, create=create)
        self._matrix = self._open_vectors()

    def _open_vectors(self) -> vectors.DerivedVectors:
        """The seam for another vector index: the structure dense search runs on, derived from
        the ``vectors`` table (a subclass returns its own, e.g. a FAISS index file)."""
        return vectors.MatrixCache(self.path)

    @property
    def analyzer(self) -> Analyzer:
        """The analyzer of the keyword index."""
        return self._keywords.analyzer

    @property
    def keyword_signature(self) -> str:
        """What the keyword index depends on: the analyzer and the indexed fields."""
        return self._keywords.signature

    @property
    def vector_cache_path(self) -> Path:
        """The cache file holding the dense matrix (safe to delete at any time)."""
        return self._matrix.path

    def close(self) -> None:
        """Close the connection (the store cannot be used afterwards). After writes, first
        write the keyword pack if the next search would (:meth:`prepare_search`): a later
        ``kb search`` then ranks from it without importing numpy. A store built without a path
        deletes its temporary folder."""
        if self._db.commits and self._scratch is None:
            try:
                self.prepare_search()
            except (sqlite3.Error, OSError):
                pass  # the pack is derived: the next search writes it
        try:
            self._matrix.close()
        finally:
            self._db.close()
            if self._scratch is not None:
                self._scratch()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """One write transaction; nested calls join the outer one. Commits or rolls back whole."""
        return self._db.transaction()

    # --- index metadata ------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        """A value from the ``meta`` table."""
        with self._db.read() as conn:
            return catalog.get_meta(conn, key)

    def set_meta(self, key: str, value: str) -> None:
        """Set a value in the ``meta`` table."""
        with self._db.transaction() as conn:
            catalog.set_meta(conn, key, value)

    @property
    def embedder_info(self) -> EmbedderInfo | None:
        """The embedder recorded for this index, if any vectors were stored."""
        with self._db.read() as conn:
            return vectors.recorded_embedder(conn)

    def check_embedder(self, info: EmbedderInfo) -> None:
        """Raise IndexMismatchError when the index was built with another embedder."""
        check_embedder(self.embedder_info, info, str(self.path))

    @property
    def version(self) -> int:
        """Generation counter: changes after every committed write."""
        with self._db.read() as conn:
            return conn.execute("SELECT generation FROM stats WHERE id = 1").fetchone()[0]

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
        prepared = []
        for i, doc in enumerate(docs):
            vec = embeddings[i] if embeddings is not None else doc.embedding
            prepared.append((doc, vec, self._keywords.terms_of(doc)))
        # The same id twice in one batch: the last one wins, as if added one by one.
        prepared = list({doc.id: (doc, vec, c) for doc, vec, c in prepared}.values())
        dim = vector_dimensions(v for _, v, _ in prepared)
        with self._db.transaction() as conn:
            self._keywords.check_signature(conn, writing=True)
            if dim is not None:
                vectors.check_dimension(conn, dim, self.path)
                if embedder is not None:
                    vectors.record_embedder(conn, embedder, dim, self.path)
            self._remove_rows(conn, catalog.rows_by_ids(conn, [d.id for d, _, _ in prepared]))
            self._insert(conn, prepared)
        return [doc.id for doc in docs]

    def _insert(self, conn: sqlite3.Connection, prepared: list) -> None:
        vocab: set[str] = set()
        for _, _, counts in prepared:
            vocab.update(counts)
        term_ids = self._keywords.term_ids(conn, vocab)
        known: dict[str, int] = {}
        new_sources: set[int] = set()
        chunks = []
        new_vectors = []
        for doc, vec, counts in prepared:
            tf = {term_ids[t]: n for t, n in counts.items()}
            source = doc.metadata.get("source")
            src = catalog.source_id(
                conn, str(source) if source is not None else None, known, new_sources
            )
            rowid = catalog.insert(conn, doc, src, sum(tf.values()), pack_terms(tf))
            chunks.append(ChunkTerms(rowid, src, tf))
            if vec is not None:
                new_vectors.append((rowid, vec))
        self._keywords.add(conn, chunks, new_sources)
        vectors.upsert(conn, new_vectors)

    def _remove_rows(self, conn: sqlite3.Connection, rows: list[ChunkRow]) -> int:
        if not rows:
            return 0
        docs = [r.doc for r in rows]
        self._keywords.remove(conn, rows)
        vectors.remove(conn, docs)
        catalog.delete_rows(conn, docs)
        return len(rows)

    def delete(self, ids: list[str]) -> bool:
        """Delete documents by id in one transaction; True when at least one existed."""
        return self.remove(ids) > 0

    def remove(self, ids: list[str]) -> int:
        """Delete documents by id in one transaction; returns how many existed."""
        if not ids:
            return 0
        with self._db.transaction() as conn:
            return self._remove_rows(conn, catalog.rows_by_ids(conn, list(ids)))

    def delete_source(self, source: str) -> int:
        """Delete every chunk of ``source`` and its file record; returns the chunk count."""
        with self._db.transaction() as conn:
            ledger.forget(conn, source)
            return self._remove_rows(conn, catalog.rows_by_source(conn, source))

    def delete_where(self, filter: dict[str, Any]) -> int:
        """Delete every chunk whose metadata passes ``filter``; returns how many."""
        filter = validate_filter(filter)
        with self._db.transaction() as conn:
            return self._remove_rows(conn, catalog.rows_where(conn, filter))

    def replace_source(
        self,
        source: str,
        docs: list[Document],
        embeddings: list[list[float]] | None = None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> list[str]:
        """Atomically swap the chunks of ``source`` for ``docs``: no reader sees both or neither."""
        with self._db.transaction() as conn:
            self._remove_rows(conn, catalog.rows_by_source(conn, source))
            return self.add(docs, embeddings, embedder=embedder)

    def set_vectors(
        self, vectors: Mapping[str, Sequence[float]], *, embedder: EmbedderInfo | None = None
    ) -> int:
        """Store vectors for chunks already in the index, by id, in one transaction (their
        rows and keyword postings are not touched); returns how many chunks got one."""
        if not vectors:
            return 0
        dim = vector_dimensions(vectors.values())
        ids = list(vectors)
        with self._db.transaction() as conn:
            if dim is not None:
                vectors_of.check_dimension(conn, dim, self.path)
                if embedder is not None:
                    vectors_of.record_embedder(conn, embedder, dim, self.path)
            rows = []
            for start in range(0, len(ids), 500):
                part = ids[start : start + 500]
                marks = ",".join("?" * len(part))
                rows += conn.execute(
                    f"SELECT id, doc FROM chunks WHERE id IN ({marks})", part
                ).fetchall()
            vectors_of.upsert(conn, [(doc, vectors[chunk]) for chunk, doc in rows])
        return len(rows)

    def rebuild_keyword_index(self) -> int:
        """Re-tokenise every chunk with the current analyzer (no re-embedding); returns count."""
        with self._db.transaction() as conn:
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

        New vectors go to a staging table, committed batch by batch, so an interrupted run
        resumes where it stopped; the switch to the new vectors is one transaction, so searches
        never see a mix of two embedders. Returns the number of chunks embedded in this run.
        """
        return vectors.reembed(self._db, embed, info, batch_size=batch_size, progress=progress)

    # --- file ledger and embedding cache --------------------------------------------------------

    @contextmanager
    def writer_lock(self, wait: float) -> Iterator[None]:
        """The one-ingest-at-a-time lock (a lock file beside the database); checks first that
        the database can be written, so an ingest fails before it reads or embeds anything."""
        with lock_file(Path(f"{self.path}.ingest-lock"), wait, str(self.path)):
            self._db.check_writable()
            yield

    def file_records(self) -> dict[str, FileRecord]:
        """Every indexed file, by absolute path."""
        with self._db.read() as conn:
            return ledger.records(conn)

    def replace_file(
        self,
        record: FileRecord,
        docs: list[Document],
        embeddings: list[list[float]] | None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> int:
        """Swap a file's chunks and record in one transaction; returns the chunks removed.

        With ``embedder``, the vectors also go to the embedding cache, in the same transaction.
        """
        with self._db.transaction() as conn:
            removed = self._remove_rows(conn, catalog.rows_by_source(conn, record.path))
            if docs:
                self.add(docs, embeddings, embedder=embedder)
                if embedder is not None and embeddings is not None:
                    ledger.remember(conn, embedder, {d.text: v for d, v in zip(docs, embeddings)})
            ledger.put(conn, record)
            return removed

    def touch_file(self, record: FileRecord) -> None:
        """Update a file's record (new mtime, same content) without touching its chunks."""
        with self._db.transaction() as conn:
            ledger.put(conn, record)

    def checkpoint(self) -> None:
        """Fold the WAL back into the database file (PASSIVE: never waits for readers)."""
        self._db.checkpoint()

    def prepare_search(self) -> None:
        """Write the keyword pack now if the next search would (none yet, or its delta grew
        too large), so that search does not pay for it: 0.7 s at 100k chunks, 19 s at 1M."""
        with self._db.read() as conn:
            self._keywords.view(conn)

    def cached_embeddings(self, info: EmbedderInfo, texts: list[str]) -> dict[str, list[float]]:
        """Vectors already computed by this embedder for any of ``texts``, by text."""
        with self._db.read() as conn:
            return ledger.cached(conn, info, texts)

    def cache_embeddings(self, info: EmbedderInfo, vectors: dict[str, list[float]]) -> None:
        """Remember vectors by (embedder, text hash) so unchanged text is never re-embedded."""
        with self._db.transaction() as conn:
            ledger.remember(conn, info, vectors)

    # --- reads ---------------------------------------------------------------------------------

    def get(self, ids: list[str], *, with_embeddings: bool = False) -> list[Document]:
        """The stored documents among ``ids``, in the order asked."""
        with self._db.read() as conn:
            return catalog.get(conn, list(ids), with_embeddings)

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
        with self._db.read() as conn:
            docs = catalog.select_documents(
                conn, filter, source=source, limit=limit, with_embeddings=with_embeddings
            )
        yield from docs

    def count(self, filter: dict[str, Any] | None = None) -> int:
        """Number of stored documents passing ``filter`` (all without one)."""
        with self._db.read() as conn:
            return catalog.count(conn, filter)

    def __len__(self) -> int:
        return self.count()

    def sources(self) -> list[tuple[str, int]]:
        """Each source with its number of chunks, sorted by source."""
        with self._db.read() as conn:
            return catalog.sources(conn)

    def stats(self) -> dict[str, Any]:
        """Counts and settings of the index (for ``kb stats``)."""
        with self._db.read() as conn:
            n, total, generation = conn.execute(
                "SELECT n, total_length, generation FROM stats WHERE id = 1"
            ).fetchone()
            named_sources = len(catalog.sources(conn))
            vocabulary = conn.execute("SELECT count(*) FROM terms").fetchone()[0]
            stored_vectors = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
            files = ledger.count(conn)
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        embedder = json.loads(meta["embedder"]) if "embedder" in meta else None
        return {
            "path": str(self.path),
            "chunks": n,
            "sources": named_sources,
            "files": files,
            "vectors": stored_vectors,
            "vocabulary": vocabulary,
            "avg_chunk_terms": (total / n) if n else 0.0,
            "size_bytes": self._db.size_on_disk(),
            "embedder": embedder,
            "analyzer": meta.get("analyzer"),
            "last_ingest": meta.get("last_ingest"),
            "schema_version": SCHEMA_VERSION,
            "generation": generation,
        }

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
    ) -> list[SearchResult]:
        """BM25 with source context over the persistent inverted index (see :mod:`kbcli.bm25`);
        ``filter`` applies before ranking. Every hit's ``explain`` holds both parts."""
        filter = validate_filter(filter)
        for attempt in (1, 2):
            try:
                with self._db.read() as conn:
                    scored = self._keywords.search(
                        conn, query, k, filter, k1=k1, b=b, source_weight=source_weight
                    )
                    docs = catalog.documents_by_rowid(conn, [s.doc for s in scored])
                break
            except IndexMismatchError:
                if attempt == 2 or not self.upgrade_keyword_index(wait=0.0):
                    raise
        return [keyword_hit(docs[s.doc], s, source_weight) for s in scored if s.doc in docs]

    def upgrade_keyword_index(self, wait: float = 0.0) -> bool:
        """Re-tokenise the keyword index from the stored chunks if it was built with another
        analyzer or field set (an index of an older kbcli), in one transaction, when the
        writer lock is free within ``wait`` seconds. True when the index now matches."""
        try:
            with self.writer_lock(wait), self._db.transaction() as conn:
                self._keywords.check_signature(conn, writing=True)
        except (StoreError, OSError, sqlite3.Error):
            return False  # locked, or a read-only database: the caller says what to run
        return True

    def search(
        self, query_vec: list[float], k: int = 5, filter: dict[str, Any] | None = None
    ) -> list[SearchResult]:
        """Cosine similarity over every stored vector that passes ``filter``, best first. An
        empty query vector returns the newest ``k`` documents passing it, scored 1.0."""
        filter = validate_filter(filter)
        with self._db.read() as conn:
            if not len(query_vec):
                newest = catalog.select_documents(conn, filter, limit=k, newest_first=True)
                return [SearchResult(doc, 1.0) for doc in newest]
            index = self._matrix.index(conn)
            if len(index) == 0:
                return []
            if filter:
                hits = prefiltered_search(
                    index,
                    query_vec,
                    k,
                    lambda ids: catalog.passing(conn, ids, filter),
                    lambda: self._allowed.get(conn, filter),
                    known=self._allowed.peek(conn, filter),
                )
            else:
                hits = index.search(query_vec, k)
            docs = catalog.documents_by_rowid(conn, [i for i, _ in hits])
        return [SearchResult(docs[i], score) for i, score in hits if i in docs]

    def integrity_check(self) -> list[str]:
        """SQLite's integrity check plus kbcli's own invariants; empty list when all is well."""
        with self._db.read() as conn:
            return integrity.problems(conn)

    def doctor(self, repair: bool = False) -> list[Finding]:
        """Check the keyword tables, the packed keyword file and the derived vector index
        against the catalog; with ``repair``, rebuild what drifted (see :mod:`.doctor`)."""
        from . import doctor

        return doctor.run(self, repair)

    def refresh_vector_index(self) -> None:
        """Bring the derived vector index (matrix cache, FAISS file, Chroma collection) up to
        date now instead of at the next dense search."""
        with self._db.read() as conn:
            self._matrix.index(conn)
