"""PostgresStore: catalog, keyword index, vectors, file ledger and embedding cache in one
PostgreSQL database with pgvector, for several writers on several machines.

The store is :class:`~kbcli.stores.composite.Store` over the PostgreSQL parts: the engine
:class:`~.connection.Database`, :class:`PgCatalog`, the keyword index
:class:`~.keyword.KeywordTables`, :class:`PgVectors` and :class:`PgLedger` (the modules of one
concept each, bound to the index's tables). Every write is one transaction under the index's
advisory lock, so the BM25 statistics stay exact whichever process writes; analysis happens
before it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kbcli.embedders.base import EmbedderInfo
from kbcli.errors import StoreError
from kbcli.filters.sql import dumps_metadata
from kbcli.stores.composite import Store
from kbcli.stores.parts import EVERY, Built, Filter, Hit, Listing, Location, NewRow, Vector
from kbcli.stores.postgres import catalog, ledger, vectors
from kbcli.stores.postgres.catalog import ChunkRow
from kbcli.stores.postgres.connection import DEFAULT_BUSY_TIMEOUT, Database
from kbcli.stores.postgres.doctor import run_checks
from kbcli.stores.postgres.dsn import ENV_DSN, resolve_dsn
from kbcli.stores.postgres.keyword import KeywordTables
from kbcli.stores.postgres.replica import ENV_READ_DSN, resolve_read_dsn
from kbcli.stores.postgres.schema import Tables, one
from kbcli.stores.postgres.vectors import EF_SEARCH
from kbcli.text.analysis import Analyzer
from kbcli.text.bm25 import ChunkTerms
from kbcli.types import Document, FileRecord, Finding

if TYPE_CHECKING:
    from kbcli.config.schema import Config
    from kbcli.stores.postgres.schema import PgConnection

# The first vectors of an index arriving in a batch this large get their HNSW index built after
# the rows are in (``kb copy``, a bulk add): once, not row by row.
BULK_INDEX_ROWS = 5000


class PgCatalog:
    """The catalog part: chunk rows (with their vectors), sources and the meta table."""

    def __init__(self, tables: Tables):
        self.t = tables

    def insert(self, conn: PgConnection, rows: list[NewRow]) -> tuple[list[ChunkTerms], set[int]]:
        """COPY the chunk rows, each with its forward index and vector."""
        for doc, _, _ in rows:
            if "\x00" in doc.text or "\\u0000" in dumps_metadata(doc.metadata):
                raise StoreError(
                    f"Document {doc.id!r} holds a NUL character, which PostgreSQL text cannot "
                    "store: remove it (kb's loaders already do)"
                )
        t = self.t
        names = [doc.metadata.get("source") for doc, _, _ in rows]
        srcs, new_sources = catalog.source_ids(
            conn, t, [str(s) if s is not None else None for s in names]
        )
        docs = catalog.allocate(conn, t.chunks, "doc", len(rows))
        out, chunks = [], []
        for (doc, vec, tf), rowid, src, source in zip(rows, docs, srcs, names):
            out.append(
                (
                    rowid, doc.id, doc.text, doc.metadata, doc.created_at.isoformat(),
                    str(source) if source is not None else None, sum(tf.values()),
                    list(tf), list(tf.values()), src, vec,
                )
            )  # fmt: skip
            chunks.append(ChunkTerms(rowid, src, tf))
        catalog.insert(conn, t, out)
        return chunks, new_sources

    def delete_rows(self, conn: PgConnection, docs: list[int]) -> None:
        """Delete chunk rows (and so their vectors)."""
        catalog.delete_rows(conn, self.t, docs)

    def rowids(self, conn: PgConnection, ids: Sequence[str]) -> dict[str, int]:
        """The row id of each chunk among ``ids`` that is in the index."""
        return catalog.rowids(conn, self.t, ids)

    def rows_by_ids(self, conn: PgConnection, ids: Sequence[str]) -> list[ChunkRow]:
        """The rows of the chunks among ``ids``."""
        return catalog.rows_by_ids(conn, self.t, ids)

    def rows_by_source(self, conn: PgConnection, source: str) -> list[ChunkRow]:
        """The rows of every chunk of ``source``."""
        return catalog.rows_by_source(conn, self.t, source)

    def rows_where(self, conn: PgConnection, filter: dict[str, Any] | None) -> list[ChunkRow]:
        """The rows of every chunk passing ``filter``."""
        return catalog.rows_where(conn, self.t, filter)

    def overflow(self, conn: PgConnection) -> list[ChunkRow]:
        """Nothing to evict: the catalog is unbounded."""
        return []

    def get(self, conn: PgConnection, ids: Sequence[str], with_embeddings: bool) -> list[Document]:
        """The documents among ``ids`` in the order asked."""
        return catalog.get(conn, self.t, ids, with_embeddings)

    def select_documents(
        self, conn: PgConnection, filter: Filter, how: Listing = EVERY
    ) -> list[Document]:
        """Documents passing ``filter``, as ``how`` asks."""
        return catalog.select_documents(conn, self.t, filter, how)

    def documents_by_rowid(self, conn: PgConnection, rowids: Sequence[int]) -> dict[int, Document]:
        """Documents by ``doc`` (without vectors)."""
        return catalog.documents_by_rowid(conn, self.t, rowids)

    def count(self, conn: PgConnection, filter: dict[str, Any] | None) -> int:
        """How many chunks pass ``filter``."""
        return catalog.count(conn, self.t, filter)

    def sources(self, conn: PgConnection) -> list[tuple[str, int]]:
        """Each named source with its chunk count, sorted."""
        return catalog.sources(conn, self.t)

    def named_sources(self, conn: PgConnection) -> int:
        """How many named sources there are."""
        sql = f"SELECT count(*) FROM {self.t.sources} WHERE source IS NOT NULL"
        return int(one(conn.execute(sql))[0])

    def totals(self, conn: PgConnection) -> tuple[int, int]:
        """How many chunks, and their total length in terms."""
        sql = f"SELECT n, total_length FROM {self.t.stats} WHERE id = 1"
        n, total = one(conn.execute(sql))
        return n, total

    def get_meta(self, conn: PgConnection, key: str) -> str | None:
        """A value of the meta table."""
        return catalog.get_meta(conn, self.t, key)

    def set_meta(self, conn: PgConnection, key: str, value: str) -> None:
        """Set a value of the meta table."""
        catalog.set_meta(conn, self.t, key, value)


class PgVectors:
    """The vectors part: the chunks' ``vector(d)`` column (written with the rows by the
    catalog), the recorded embedder and dense search on its HNSW index, as ``settings`` (the
    store) say at each call: ``hnsw`` (False: an exact scan) and ``ef_search`` (candidates an
    HNSW search keeps)."""

    def __init__(self, db: Database, settings: PostgresStore):
        self.db = db
        self.t = db.tables
        self.settings = settings
        self._index_later: int | None = None  # a first bulk batch's dimension, indexed at finish

    def check(self, conn: PgConnection, dim: int, rows: int) -> None:
        """Refuse vectors of another length; type (and index) the column on first use, or
        leave the index of a first bulk batch to :meth:`finish`."""
        bulk = rows >= BULK_INDEX_ROWS
        later = vectors.ensure_dimension(
            conn, self.t, dim, self.db.label, hnsw=self.settings.hnsw, bulk=bulk
        )
        self._index_later = dim if later else None

    def record_embedder(self, conn: PgConnection, info: EmbedderInfo, dim: int) -> None:
        """Record ``info`` with the first vectors; later vectors must come from the same model."""
        vectors.record_embedder(conn, self.t, info, dim, self.db.label)

    def recorded_embedder(self, conn: PgConnection) -> EmbedderInfo | None:
        """The embedder recorded with the index's vectors."""
        return vectors.recorded_embedder(conn, self.t)

    def upsert(self, conn: PgConnection, rows: list[tuple[int, Sequence[float]]]) -> None:
        """Store vectors of chunks already written (``set_vectors``: the vector fill after
        ``kb ingest``); those the catalog wrote with their rows stay as they are."""
        if rows:
            vectors.put(conn, self.t, rows)

    def remove(self, conn: PgConnection, docs: list[int]) -> None:
        """Nothing to do: the vectors go with their rows."""

    def finish(self, conn: PgConnection) -> None:
        """Build the HNSW index of a first bulk batch, now that its rows are in."""
        dim, self._index_later = self._index_later, None
        # (a batch that failed after its check left ``dim`` behind: the column tells)
        if dim is not None and vectors.column_dimension(conn, self.t) == dim:
            vectors.create_index(conn, self.t, dim)

    def count(self, conn: PgConnection, *, cached: bool = False) -> int:
        """How many chunks have a vector (counted: nothing caches it)."""
        sql = f"SELECT count(*) FROM {self.t.chunks} WHERE embedding IS NOT NULL"
        return int(one(conn.execute(sql))[0])

    def search(self, conn: PgConnection, query: Vector, k: int, filter: Filter) -> list[Hit]:
        """HNSW with iterative scans, exact when a filter leaves it short of ``k``."""
        return vectors.search(
            conn, self.t, query, k, filter, ef_search=self.settings.ef_search,
            iterative=self.db.iterative_scans, exact=not self.settings.hnsw,
        )  # fmt: skip

    def exact(self, conn: PgConnection) -> bool:
        """Whether dense search equals a brute-force scan (no HNSW index serves it)."""
        return not self.settings.hnsw or not vectors.indexed(conn, self.t)

    def refresh(self, conn: PgConnection) -> None:
        """Nothing to build: PostgreSQL's indexes are kept current by every write."""

    def figures(self, conn: PgConnection) -> dict[str, Any]:
        """Whether dense search is exact."""
        return {"exact_vectors": self.exact(conn)}

    def close(self) -> None:
        """Nothing to release (the engine holds the connection)."""

    def stage(self, conn: PgConnection, target: str) -> None:
        """Start (or resume) staging vectors for ``target``."""
        vectors.stage(conn, self.t, target)

    def unstaged(self, conn: PgConnection) -> tuple[list[tuple[int, str]], int]:
        """The chunks without a staged vector, and how many chunks there are."""
        return vectors.unstaged(conn, self.t)

    def put_staged(
        self, conn: PgConnection, rows: list[tuple[int, str]], vecs: list[list[float]]
    ) -> None:
        """Stage vectors."""
        vectors.put_staged(conn, self.t, rows, vecs)

    def swap_staged(self, conn: PgConnection, info: EmbedderInfo) -> None:
        """The staged vectors replace the stored ones."""
        vectors.swap_staged(conn, self.t, info, self.db.label, hnsw=self.settings.hnsw)


class PgLedger:
    """The ledger and cache parts: the index's ``_files`` and ``_cache`` tables."""

    def __init__(self, tables: Tables):
        self.t = tables

    def records(self, conn: PgConnection) -> dict[str, FileRecord]:
        """Every file record, by path."""
        return ledger.records(conn, self.t)

    def records_of(self, conn: PgConnection, paths: Sequence[str]) -> dict[str, FileRecord]:
        """The records of those of ``paths`` that are recorded."""
        return ledger.records_of(conn, self.t, paths)

    def count(self, conn: PgConnection) -> int:
        """How many files are recorded."""
        return ledger.count(conn, self.t)

    def put(self, conn: PgConnection, record: FileRecord) -> None:
        """Insert or replace a file record."""
        ledger.put(conn, self.t, record)

    def forget(self, conn: PgConnection, path: str) -> None:
        """Drop a file record."""
        ledger.forget(conn, self.t, path)

    def cached(
        self, conn: PgConnection, info: EmbedderInfo, texts: list[str]
    ) -> dict[str, list[float]]:
        """Vectors ``info``'s embedder already made for any of ``texts``."""
        return ledger.cached(conn, self.t, info, texts)

    def remember(
        self, conn: PgConnection, info: EmbedderInfo, vecs: dict[str, list[float]]
    ) -> None:
        """Keep vectors by (embedder, text hash), within the bound."""
        ledger.remember(conn, self.t, info, vecs)

    def keep(self, conn: PgConnection, docs: list[int]) -> None:
        """Keep the vectors of the chunks ``docs``, about to leave the index."""
        ledger.keep(conn, self.t, docs)

    def drop(self, conn: PgConnection, docs: list[int]) -> None:
        """Forget kept vectors of the texts of ``docs``, stored with a vector again."""
        ledger.drop(conn, self.t, docs)


class PostgresStore(Store["PgConnection", ChunkRow]):
    """A knowledge base in PostgreSQL (psycopg 3, pgvector): exact BM25, HNSW dense search.

    ``dsn`` is a libpq connection string or URI (default ``$KB_PG_DSN``); its password never
    appears in messages or :meth:`stats`. ``table`` names the chunk table; the index's other
    tables are ``<table>_terms``, ``<table>_postings`` ... so several indexes can share a
    database. ``analyzer`` tokenises text for the keyword index. ``busy_timeout`` is how many
    seconds a writer waits for another before :class:`~kbcli.errors.DatabaseLockedError`.
    ``hnsw=False`` keeps dense search an exact scan (no HNSW index); ``ef_search`` is how many
    candidates an HNSW search keeps (more: better recall, slower). ``create=False`` refuses to
    create a missing index. ``read_dsn`` (default ``$KB_PG_READ_DSN``; ``""``: none) names a
    streaming-replication hot standby of ``dsn`` that serves searches and reads (keyword,
    dense, ``get``, listings, counts); writes, the writer lock, the file ledger, the embedding
    cache, :meth:`stats` and :meth:`doctor` stay on the primary (:mod:`.replica`).
    """

    _vectors: PgVectors

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
        read_dsn: str | None = None,
    ):
        self.table = table
        self.busy_timeout = busy_timeout
        self.hnsw = hnsw  # read by every dense search (PgVectors), like ef_search
        self.ef_search = ef_search
        self._t = Tables(table)
        self._db = Database(
            resolve_dsn(dsn), self._t, busy_timeout=busy_timeout, create=create,
            read_dsn=resolve_read_dsn(read_dsn),
        )  # fmt: skip
        keywords = KeywordTables(analyzer or Analyzer(), self._t, self._db.where)
        ledger_part = PgLedger(self._t)
        self._assemble(
            self._db,
            PgCatalog(self._t),
            keywords,
            PgVectors(self._db, self),
            ledger_part,
            ledger_part,
        )

    _persistent = True

    @classmethod
    def _located(cls, config: Config, db: Location, options: dict[str, Any]) -> Built:
        """The index ``store.table`` at ``$KB_PG_DSN`` or ``store.dsn``, read from
        ``$KB_PG_READ_DSN`` or ``store.read_dsn`` (``db`` does not apply)."""
        return (), {
            **options,
            "dsn": os.environ.get(ENV_DSN) or options.get("dsn"),
            "read_dsn": os.environ.get(ENV_READ_DSN) or options.get("read_dsn") or "",
        }

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r})"

    @property
    def location(self) -> str:
        """The server and table, password redacted (``postgresql://user@host/db#table``)."""
        return self._db.label

    @property
    def read_location(self) -> str | None:
        """The read server (password redacted), None when reads go to the primary."""
        return None if self._db.replica is None else self._db.replica.where

    @property
    def exact(self) -> bool:
        """Whether dense search equals a brute-force scan: False while an HNSW index serves it
        (approximate, with an exact fallback when a filter leaves it short of ``k``)."""
        if not self.hnsw:
            return True
        with self._db.read() as conn:
            return self._vectors.exact(conn)

    def doctor(self, repair: bool = False) -> list[Finding]:
        """Check the keyword tables against the chunks, on the primary; with ``repair``,
        rebuild them (see :mod:`.doctor`)."""
        with self._db.primary():
            return run_checks(self, repair)
