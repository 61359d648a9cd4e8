"""PostgresStore: catalog, keyword index, vectors, file ledger and embedding cache in one
PostgreSQL database with pgvector, for several writers on several machines.

The facade over one module per concept (see the package docstring) implements every storage
capability of :mod:`kbcli.protocols`. Every write is one transaction under the index's advisory
lock, so the BM25 statistics stay exact whichever process writes; analysis happens before it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from ...analysis import Analyzer
from ...bm25 import K1, SOURCE_WEIGHT, B, ChunkTerms
from ...embedders.base import EmbedderInfo
from ...errors import IndexMismatchError, StoreError
from ...filters import dumps_metadata, validate_filter
from ...types import Document, FileRecord, Finding, SearchResult
from ..common import check_embedder, vector_dimensions
from . import catalog, ledger, vectors
from .catalog import ChunkRow
from .connection import DEFAULT_BUSY_TIMEOUT, Database
from .dsn import resolve_dsn
from .keyword import KeywordTables
from .schema import SCHEMA_VERSION, Tables
from .vectors import EF_SEARCH

# The first vectors of an index arriving in a batch this large get their HNSW index built after
# the rows are in (``kb copy``, a bulk add): once, not row by row.
BULK_INDEX_ROWS = 5000


class PostgresStore:
    """A knowledge base in PostgreSQL (psycopg 3, pgvector): exact BM25, HNSW dense search.

    ``dsn`` is a libpq connection string or URI (default ``$KB_PG_DSN``); its password never
    appears in messages or :meth:`stats`. ``table`` names the chunk table; the index's other
    tables are ``<table>_terms``, ``<table>_postings`` ... so several indexes can share a
    database. ``analyzer`` tokenises text for the keyword index. ``busy_timeout`` is how many
    seconds a writer waits for another before :class:`~kbcli.errors.DatabaseLockedError`.
    ``hnsw=False`` keeps dense search an exact scan (no HNSW index); ``ef_search`` is how many
    candidates an HNSW search keeps (more: better recall, slower). ``create=False`` refuses to
    create a missing index.
    """

    def __init__(
        self,
        dsn: str | None = None,
        table: str = "kb_chunks",
        *,
        analyzer: Analyzer | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        hnsw: bool = True,
        ef_search: int = EF_SEARCH,
        create: bool = True,
    ):
        self.table = table
        self.busy_timeout = busy_timeout
        self.hnsw = hnsw
        self.ef_search = ef_search
        self._t = Tables(table)
        self._db = Database(resolve_dsn(dsn), self._t, busy_timeout=busy_timeout, create=create)
        self._keywords = KeywordTables(analyzer or Analyzer(), self._t, self._db.where)

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r})"

    @property
    def location(self) -> str:
        """The server and table, password redacted (``postgresql://user@host/db#table``)."""
        return f"{self._db.where}#{self.table}"

    @property
    def analyzer(self) -> Analyzer:
        """The analyzer of the keyword index."""
        return self._keywords.analyzer

    @property
    def keyword_signature(self) -> str:
        """What the keyword index depends on: the analyzer and the indexed fields."""
        return self._keywords.signature

    @property
    def exact(self) -> bool:
        """Whether dense search equals a brute-force scan: False while an HNSW index serves it
        (approximate, with an exact fallback when a filter leaves it short of ``k``)."""
        if not self.hnsw:
            return True
        with self._db.read() as conn:
            return not vectors.indexed(conn, self._t)

    def close(self) -> None:
        """Close the connection (the store cannot be used afterwards)."""
        self._db.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def transaction(self) -> AbstractContextManager[Any]:
        """One write transaction; nested calls join the outer one. Commits or rolls back whole."""
        return self._db.transaction()

    # --- index metadata ------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        """A value of the index's meta table."""
        with self._db.read() as conn:
            return catalog.get_meta(conn, self._t, key)

    def set_meta(self, key: str, value: str) -> None:
        """Set a value of the index's meta table."""
        with self._db.transaction() as conn:
            catalog.set_meta(conn, self._t, key, value)

    @property
    def embedder_info(self) -> EmbedderInfo | None:
        """The embedder recorded for this index, if any vectors were stored."""
        with self._db.read() as conn:
            return vectors.recorded_embedder(conn, self._t)

    def check_embedder(self, info: EmbedderInfo) -> None:
        """Raise IndexMismatchError when the index was built with another embedder."""
        check_embedder(self.embedder_info, info, self.location)

    @property
    def version(self) -> int:
        """Generation counter: changes after every committed write."""
        with self._db.read() as conn:
            sql = f"SELECT generation FROM {self._t.stats} WHERE id = 1"
            return conn.execute(sql).fetchone()[0]

    # --- writes --------------------------------------------------------------------------------

    def add(
        self,
        docs: list[Document],
        embeddings: list[list[float]] | None = None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> list[str]:
        """Insert or replace ``docs`` (and their vectors) in one transaction; return their ids."""
        if embeddings is not None and len(embeddings) != len(docs):
            raise ValueError(f"{len(docs)} documents but {len(embeddings)} embeddings")
        prepared = []
        for i, doc in enumerate(docs):
            if "\x00" in doc.text or "\\u0000" in dumps_metadata(doc.metadata):
                raise StoreError(
                    f"Document {doc.id!r} holds a NUL character, which PostgreSQL text cannot "
                    "store: remove it (kb's loaders already do)"
                )
            vec = embeddings[i] if embeddings is not None else doc.embedding
            prepared.append((doc, vec, self._keywords.terms_of(doc)))
        # The same id twice in one batch: the last one wins, as if added one by one.
        prepared = list({doc.id: (doc, vec, c) for doc, vec, c in prepared}.values())
        dim = vector_dimensions(v for _, v, _ in prepared)
        index_later = False
        with self._db.transaction() as conn:
            self._keywords.check_signature(conn, writing=True)
            if dim is not None:
                bulk = len(prepared) >= BULK_INDEX_ROWS
                index_later = vectors.ensure_dimension(
                    conn, self._t, dim, self.location, hnsw=self.hnsw, bulk=bulk
                )
                if embedder is not None:
                    vectors.record_embedder(conn, self._t, embedder, dim, self.location)
            ids = [d.id for d, _, _ in prepared]
            self._remove_rows(conn, catalog.rows_by_ids(conn, self._t, ids))
            self._insert(conn, prepared)
            if dim is not None and index_later:
                vectors.create_index(conn, self._t, dim)
        return [doc.id for doc in docs]

    def _insert(self, conn: Any, prepared: list) -> None:
        if not prepared:
            return
        t = self._t
        vocab: set[str] = set()
        for _, _, counts in prepared:
            vocab.update(counts)
        term_ids = self._keywords.term_ids(conn, vocab)
        names = [doc.metadata.get("source") for doc, _, _ in prepared]
        srcs, new_sources = catalog.source_ids(
            conn, t, [str(s) if s is not None else None for s in names]
        )
        docs = catalog.allocate(conn, t.chunks, "doc", len(prepared))
        rows, chunks = [], []
        for (doc, vec, counts), rowid, src, source in zip(prepared, docs, srcs, names):
            tf = {term_ids[w]: n for w, n in counts.items()}
            rows.append(
                (
                    rowid, doc.id, doc.text, doc.metadata, doc.created_at.isoformat(),
                    str(source) if source is not None else None, sum(tf.values()),
                    list(tf), list(tf.values()), src, vec,
                )
            )  # fmt: skip
            chunks.append(ChunkTerms(rowid, src, tf))
        catalog.insert(conn, t, rows)
        self._keywords.add(conn, chunks, new_sources)

    def _remove_rows(self, conn: Any, rows: list[ChunkRow]) -> int:
        if not rows:
            return 0
        self._keywords.remove(conn, rows)
        catalog.delete_rows(conn, self._t, [r.doc for r in rows])
        return len(rows)

    def delete(self, ids: list[str]) -> bool:
        """Delete documents by id in one transaction; True when at least one existed."""
        return self.remove(ids) > 0

    def remove(self, ids: list[str]) -> int:
        """Delete documents by id in one transaction; returns how many existed."""
        if not ids:
            return 0
        with self._db.transaction() as conn:
            return self._remove_rows(conn, catalog.rows_by_ids(conn, self._t, list(ids)))

    def delete_source(self, source: str) -> int:
        """Delete every chunk of ``source`` and its file record; returns the chunk count."""
        with self._db.transaction() as conn:
            ledger.forget(conn, self._t, source)
            return self._remove_rows(conn, catalog.rows_by_source(conn, self._t, source))

    def delete_where(self, filter: dict[str, Any]) -> int:
        """Delete every chunk whose metadata passes ``filter``; returns how many."""
        filter = validate_filter(filter)
        with self._db.transaction() as conn:
            return self._remove_rows(conn, catalog.rows_where(conn, self._t, filter))

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
            self._remove_rows(conn, catalog.rows_by_source(conn, self._t, source))
            return self.add(docs, embeddings, embedder=embedder)

    def upgrade_keyword_index(self, wait: float = 0.0) -> bool:
        """Re-tokenise the keyword index from the stored chunks if it was built with another
        analyzer or field set (an index of an older kbcli), in one transaction, when the
        writer lock is free within ``wait`` seconds. True when the index now matches."""
        try:
            with self.writer_lock(wait), self._db.transaction() as conn:
                self._keywords.check_signature(conn, writing=True)
        except StoreError:
            return False  # another writer holds the lock: the caller says what to run
        return True

    def rebuild_keyword_index(self) -> int:
        """Re-tokenise every chunk with the current analyzer (no re-embedding); returns count."""
        with self._db.transaction() as conn:
            return self._keywords.rebuild(conn)

    def doctor(self, repair: bool = False) -> list[Finding]:
        """Check the keyword tables against the chunks; with ``repair``, rebuild them."""
        from . import doctor

        return doctor.run(self, repair)

    def reembed(
        self,
        embed: Callable[[list[str]], list[list[float]]],
        info: EmbedderInfo,
        *,
        batch_size: int = 256,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Re-embed every chunk with ``embed`` and switch the index to ``info`` in one step
        (staged batch by batch, so an interrupted run resumes); returns how many were embedded."""
        return vectors.reembed(
            self._db, self._t, embed, info, batch_size=batch_size, progress=progress,
            hnsw=self.hnsw,
        )  # fmt: skip

    # --- file ledger and embedding cache --------------------------------------------------------

    def writer_lock(self, wait: float) -> AbstractContextManager[None]:
        """The one-ingest-at-a-time lock, held in the database (``pg_advisory_lock``), so
        ``kb ingest`` on several machines takes turns."""
        return self._db.writer_lock(wait)

    def file_records(self) -> dict[str, FileRecord]:
        """Every indexed file, by absolute path."""
        with self._db.read() as conn:
            return ledger.records(conn, self._t)

    def replace_file(
        self,
        record: FileRecord,
        docs: list[Document],
        embeddings: list[list[float]] | None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> int:
        """Swap a file's chunks and record in one transaction; returns the chunks removed."""
        with self._db.transaction() as conn:
            removed = self._remove_rows(conn, catalog.rows_by_source(conn, self._t, record.path))
            if docs:
                self.add(docs, embeddings, embedder=embedder)
                if embedder is not None and embeddings is not None:
                    pairs = {d.text: v for d, v in zip(docs, embeddings)}
                    ledger.remember(conn, self._t, embedder, pairs)
            ledger.put(conn, self._t, record)
            return removed

    def touch_file(self, record: FileRecord) -> None:
        """Update a file's record (new mtime, same content) without touching its chunks."""
        with self._db.transaction() as conn:
            ledger.put(conn, self._t, record)

    def checkpoint(self) -> None:
        """Nothing to do: PostgreSQL checkpoints its write-ahead log itself."""

    def prepare_search(self) -> None:
        """Nothing to build: PostgreSQL's indexes are kept current by every write."""

    def cached_embeddings(self, info: EmbedderInfo, texts: list[str]) -> dict[str, list[float]]:
        """Vectors already computed by this embedder for any of ``texts``, by text."""
        with self._db.read() as conn:
            return ledger.cached(conn, self._t, info, texts)

    def cache_embeddings(self, info: EmbedderInfo, vectors: dict[str, list[float]]) -> None:
        """Remember vectors by (embedder, text hash) so unchanged text is never re-embedded."""
        with self._db.transaction() as conn:
            ledger.remember(conn, self._t, info, vectors)

    # --- reads ---------------------------------------------------------------------------------

    def get(self, ids: list[str], *, with_embeddings: bool = False) -> list[Document]:
        """The stored documents among ``ids``, in the order asked."""
        with self._db.read() as conn:
            return catalog.get(conn, self._t, list(ids), with_embeddings)

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
        filter = validate_filter(filter)
        with self._db.read() as conn:
            docs = catalog.select_documents(
                conn, self._t, filter, source=source, limit=limit, with_embeddings=with_embeddings
            )
        yield from docs

    def count(self, filter: dict[str, Any] | None = None) -> int:
        """Number of stored documents passing ``filter`` (all without one)."""
        with self._db.read() as conn:
            return catalog.count(conn, self._t, filter)

    def __len__(self) -> int:
        return self.count()

    def sources(self) -> list[tuple[str, int]]:
        """Each source with its number of chunks, sorted by source."""
        with self._db.read() as conn:
            return catalog.sources(conn, self._t)

    def stats(self) -> dict[str, Any]:
        """Counts and settings of the index (for ``kb stats``); the DSN's password redacted."""
        t = self._t
        with self._db.read() as conn:
            n, total, generation = conn.execute(
                f"SELECT n, total_length, generation FROM {t.stats} WHERE id = 1"
            ).fetchone()
            named = conn.execute(
                f"SELECT count(*) FROM {t.sources} WHERE source IS NOT NULL"
            ).fetchone()[0]
            vocabulary = conn.execute(f"SELECT count(*) FROM {t.terms}").fetchone()[0]
            stored = conn.execute(
                f"SELECT count(*) FROM {t.chunks} WHERE embedding IS NOT NULL"
            ).fetchone()[0]
            files = ledger.count(conn, t)
            meta = dict(conn.execute(f"SELECT key, value FROM {t.meta}").fetchall())
            size = conn.execute(
                "SELECT sum(pg_total_relation_size(to_regclass(x))) FROM unnest(%s::text[]) AS x",
                (t.all(),),
            ).fetchone()[0]
            exact = not self.hnsw or not vectors.indexed(conn, t)
        return {
            "path": self.location,
            "backend": "postgres",
            "chunks": n,
            "sources": named,
            "files": files,
            "vectors": stored,
            "vocabulary": vocabulary,
            "avg_chunk_terms": (total / n) if n else 0.0,
            "size_bytes": int(size or 0),
            "embedder": json.loads(meta["embedder"]) if "embedder" in meta else None,
            "analyzer": meta.get("analyzer"),
            "last_ingest": meta.get("last_ingest"),
            "schema_version": SCHEMA_VERSION,
            "generation": generation,
            "exact_vectors": exact,
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
        """BM25 with source context over the inverted index (see :mod:`kbcli.bm25`); ``filter``
        applies before ranking. Every hit's ``explain`` holds both parts."""
        filter = validate_filter(filter)
        for attempt in (1, 2):
            try:
                with self._db.read() as conn:
                    scored = self._keywords.search(
                        conn, query, k, filter, k1=k1, b=b, source_weight=source_weight
                    )
                    docs = catalog.documents_by_rowid(conn, self._t, [s.doc for s in scored])
                break
            except IndexMismatchError:
                if attempt == 2 or not self.upgrade_keyword_index(wait=0.0):
                    raise
        return [
            SearchResult(
                docs[s.doc],
                float(s.score),
                {"bm25_chunk": s.chunk, "bm25_source": s.source, "source_weight": source_weight},
            )
            for s in scored
            if s.doc in docs
        ]

    def search(
        self, query_vec: list[float], k: int = 5, filter: dict[str, Any] | None = None
    ) -> list[SearchResult]:
        """Cosine similarity among the vectors passing ``filter`` (HNSW with iterative scans,
        exact when a filter leaves it short), best first. An empty query vector returns the
        newest ``k`` documents passing the filter, scored 1.0."""
        filter = validate_filter(filter)
        with self._db.read() as conn:
            if not len(query_vec):
                newest = catalog.select_documents(conn, self._t, filter, limit=k, newest_first=True)
                return [SearchResult(doc, 1.0) for doc in newest]
            hits = vectors.search(
                conn, self._t, query_vec, k, filter, ef_search=self.ef_search,
                iterative=self._db.iterative_scans, exact=not self.hnsw,
            )  # fmt: skip
            docs = catalog.documents_by_rowid(conn, self._t, [i for i, _ in hits])
        return [SearchResult(docs[i], score) for i, score in hits if i in docs]
