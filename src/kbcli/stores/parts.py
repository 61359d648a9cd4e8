"""The parts a store is assembled from: what one backend supplies to :class:`~.composite.Store`.

:class:`~.composite.Store` implements every public store method once; a backend supplies one
object per part below (one object may play several parts, a module may play one). Methods that
take ``conn`` run inside the engine's :meth:`Engine.transaction` (writes) or :meth:`Engine.read`
(reads) and get what those yield: a connection, or None for the in-memory store (the parts
are generic over its type, :data:`Conn`, and over the rows the catalog finds, :class:`Row`;
each backend names both). Filters are valid already
(:func:`kbcli.filters.model.validate_filter`); a part never opens a transaction of its own
unless it says so.

==========  ========================  ===========================  ===========================
part        SQLite (and FAISS/Chroma)  PostgreSQL                   memory
==========  ========================  ===========================  ===========================
engine      ``sqlite.connection``     ``postgres.connection``      ``memory.MemoryEngine``
catalog     ``sqlite.catalog``        ``postgres.store.PgCatalog``  ``memory.MemoryCatalog``
keywords    ``sqlite.keyword``        ``postgres.keyword``         ``memory.MemoryKeywords``
vectors     ``sqlite.store.TableVectors`` (FAISS, Chroma: their     ``memory.MemoryVectors``
            own search)               ``postgres.store.PgVectors``
ledger,     ``sqlite.ledger``         ``postgres.store.PgLedger``  ``memory.MemoryLedger``
cache
==========  ========================  ===========================  ===========================
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kbcli.text.bm25 import BM25Params, ChunkTerms, Scored
from kbcli.types import Document, FileRecord

if TYPE_CHECKING:
    from kbcli.embedders.base import EmbedderInfo
    from kbcli.text.analysis import Analyzer

Vector = Sequence[float]
#: the connection a backend's engine yields to its parts: ``sqlite3.Connection`` (SQLite, FAISS,
#: Chroma), psycopg's ``Connection`` (PostgreSQL), None (memory)
Conn = TypeVar("Conn")
#: the same, in a part that only takes it
Conn_contra = TypeVar("Conn_contra", contravariant=True)


class Row(Protocol):
    """A stored chunk as a backend's catalog finds it for a delete: its row id, and what its
    keyword index needs to unindex it (each backend's own record: ``ChunkRow``, ``MemoryRow``)."""

    @property
    def doc(self) -> int:
        """The chunk's row id."""
        ...


#: a backend's :class:`Row`, in a store
RowT = TypeVar("RowT", bound=Row)
#: the same, in a part that only gives it (the catalog)
Row_co = TypeVar("Row_co", bound=Row, covariant=True)
#: the same, in a part that only takes it (the keyword index)
Row_contra = TypeVar("Row_contra", bound=Row, contravariant=True)

#: a valid metadata filter (:mod:`kbcli.filters.model`), None for none
Filter = dict[str, Any] | None
#: a dense hit: (row id, score)
Hit = tuple[int, float]
#: where a configured store is opened (``--db``; None: ``paths.knowledge_db``)
Location = str | os.PathLike[str] | None
#: the positional and keyword arguments a store class is built with
Built = tuple[tuple[Any, ...], dict[str, Any]]
#: A document to insert: the document, its vector (or None) and its term frequencies by term id.
NewRow = tuple[Document, "Vector | None", dict[Any, int]]


@dataclass(frozen=True)
class Listing:
    """What a listing of documents asks for besides its filter: only ``source``'s, at most
    ``limit``, newest first instead of oldest first, with their vectors."""

    source: str | None = None
    limit: int | None = None
    newest_first: bool = False
    with_embeddings: bool = False


EVERY = Listing()


class Engine(Protocol[Conn]):
    """Transactions, read snapshots, the writer lock and the connection of one index."""

    @property
    def label(self) -> str:
        """Names the index in messages (a path, a server and table, "this in-memory store")."""
        ...

    @property
    def location(self) -> str | None:
        """The ``path`` of :meth:`Store.stats` (None: nowhere on disk)."""
        ...

    @property
    def identity(self) -> dict[str, Any]:
        """Keys :meth:`Store.stats` shows right after ``path`` (``backend``)."""
        ...

    @property
    def schema_version(self) -> int | None:
        """The version of the index's layout (None: none kept)."""
        ...

    @property
    def commits(self) -> int:
        """Write transactions committed through this engine."""
        ...

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        """What a failed write of a derived file or of the lock may raise besides
        :class:`OSError` and :class:`~kbcli.errors.StoreError` (``sqlite3.Error``)."""
        ...

    def transaction(self) -> AbstractContextManager[Conn]:
        """One write transaction (nested calls join it); commits whole or rolls back, and
        changes :meth:`generation`."""
        ...

    def read(self, *, latest: bool = False) -> AbstractContextManager[Conn]:
        """A snapshot for several reads (joins an open write transaction); ``latest``: one
        holding every commit made so far (the ledger, the cache, ``stats``), which an engine
        that serves reads from a replica takes from the primary."""
        ...

    def figures(self) -> dict[str, Any]:
        """Keys :meth:`Store.stats` adds about the engine (PostgreSQL: ``read_server``)."""
        ...

    def writer_lock(self, wait: float) -> AbstractContextManager[None]:
        """The one-writer-at-a-time lock, waiting up to ``wait`` seconds."""
        ...

    def writer_busy(self) -> bool:
        """True when a writer (an ingest) holds :meth:`writer_lock` now, found out without
        taking it (a search must never make an ingest wait or fail)."""
        ...

    def generation(self, conn: Conn) -> int:
        """A counter every committed write changes."""
        ...

    def size(self, conn: Conn) -> int:
        """Bytes the index takes."""
        ...

    def checkpoint(self) -> None:
        """Fold a write-ahead log during a long ingest (may do nothing)."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


class Catalog(Protocol[Conn_contra, Row_co]):
    """Chunk rows, sources and the index's own metadata: the truth the other parts derive from."""

    def insert(self, conn: Conn_contra, rows: list[NewRow]) -> tuple[list[ChunkTerms], set[int]]:
        """Insert chunk rows (and their vectors where the catalog holds them); returns each
        row's :class:`~kbcli.text.bm25.ChunkTerms` in order and the sources created for them."""
        ...

    def delete_rows(self, conn: Conn_contra, docs: list[int]) -> None:
        """Delete chunk rows by row id (after the other parts unindexed them)."""
        ...

    def rows_by_ids(self, conn: Conn_contra, ids: Sequence[str]) -> Sequence[Row_co]:
        """The row of each stored chunk among ``ids``: the backend's own record of a chunk,
        with its row id (``doc``) and what its keyword index needs to unindex it."""
        ...

    def rowids(self, conn: Conn_contra, ids: Sequence[str]) -> dict[str, int]:
        """The row id of each chunk among ``ids`` that is in the index."""
        ...

    def rows_by_source(self, conn: Conn_contra, source: str) -> Sequence[Row_co]:
        """The row of every chunk of ``source`` (as :meth:`rows_by_ids`)."""
        ...

    def rows_where(self, conn: Conn_contra, filter: dict[str, Any] | None) -> Sequence[Row_co]:
        """The row of every chunk passing ``filter`` (as :meth:`rows_by_ids`)."""
        ...

    def overflow(self, conn: Conn_contra) -> Sequence[Row_co]:
        """Rows to evict after an insert (a store of bounded size), oldest first."""
        ...

    def get(self, conn: Conn_contra, ids: Sequence[str], with_embeddings: bool) -> list[Document]:
        """The stored documents among ``ids``, in the order asked."""
        ...

    def select_documents(
        self, conn: Conn_contra, filter: Filter, how: Listing = EVERY
    ) -> list[Document]:
        """Documents passing ``filter``, as ``how`` asks."""
        ...

    def documents_by_rowid(self, conn: Conn_contra, rowids: Sequence[int]) -> dict[int, Document]:
        """Documents (without vectors) by row id."""
        ...

    def count(self, conn: Conn_contra, filter: dict[str, Any] | None) -> int:
        """How many chunks pass ``filter``."""
        ...

    def sources(self, conn: Conn_contra) -> list[tuple[str, int]]:
        """Each named source with its chunk count, sorted."""
        ...

    def named_sources(self, conn: Conn_contra) -> int:
        """How many named sources there are."""
        ...

    def totals(self, conn: Conn_contra) -> tuple[int, int]:
        """How many chunks, and their total length in terms."""
        ...

    def get_meta(self, conn: Conn_contra, key: str) -> str | None:
        """A value of the index's own metadata."""
        ...

    def set_meta(self, conn: Conn_contra, key: str, value: str) -> None:
        """Set a value of the index's own metadata."""
        ...


class Keywords(Protocol[Conn_contra, Row_contra]):
    """The BM25 index over the catalog's chunks (:mod:`kbcli.text.bm25`), kept in the catalog's
    transaction."""

    analyzer: Analyzer

    @property
    def signature(self) -> str:
        """What the index's terms depend on (analyzer and fields)."""
        ...

    @property
    def due(self) -> bool:
        """True when the last search built a derived structure in memory that is worth
        writing (:meth:`refresh`; see :class:`~.upkeep.Upkeep`)."""
        ...

    def terms_of(self, doc: Document) -> Counter[str]:
        """The term frequencies the index stores for ``doc`` (before any lock is taken)."""
        ...

    def recorded_signature(self, conn: Conn_contra) -> str | None:
        """The signature the index was built with (None before the first chunk)."""
        ...

    def check_signature(self, conn: Conn_contra, *, writing: bool) -> int | None:
        """Take over an empty index, re-tokenise one of another signature when ``writing``
        (returns how many chunks), else raise :class:`~kbcli.errors.IndexMismatchError`."""
        ...

    def term_ids(self, conn: Conn_contra, terms: set[str]) -> dict[str, Any]:
        """The ids of ``terms`` (created when new)."""
        ...

    def add(self, conn: Conn_contra, chunks: list[ChunkTerms], new_sources: set[int]) -> None:
        """Index chunks whose rows were just inserted."""
        ...

    def remove(self, conn: Conn_contra, rows: Sequence[Row_contra]) -> None:
        """Unindex chunks before their rows go."""
        ...

    def rebuild(self, conn: Conn_contra) -> int:
        """Re-analyse every chunk; returns how many."""
        ...

    def vocabulary(self, conn: Conn_contra) -> int:
        """How many distinct terms the index holds."""
        ...

    def search(
        self,
        conn: Conn_contra,
        query: str,
        k: int,
        filter: Filter,
        params: BM25Params,
        scope: Filter = None,
    ) -> list[Scored]:
        """The ``k`` best chunks for ``query`` among those passing ``filter``; with ``scope``,
        only chunks passing it too, every statistic (N, lengths, sources, df, sdf) counted over
        the scope's chunks alone (:mod:`kbcli.text.bm25`, "Scopes")."""
        ...

    def refresh(self, conn: Conn_contra) -> None:
        """Write now the derived structure a search would otherwise write (may do nothing)."""
        ...


class Staging(Protocol[Conn_contra]):
    """Re-embedding in steps that survive an interruption (see :meth:`Store.reembed`)."""

    def stage(self, conn: Conn_contra, target: str) -> None:
        """Start (or resume, when the staged vectors are for ``target``) a re-embedding."""
        ...

    def unstaged(self, conn: Conn_contra) -> tuple[list[tuple[int, str]], int]:
        """``(row id, text)`` of the chunks not staged yet, and how many chunks there are."""
        ...

    def put_staged(
        self, conn: Conn_contra, rows: list[tuple[int, str]], vectors: list[list[float]]
    ) -> None:
        """Stage new vectors."""
        ...

    def swap_staged(self, conn: Conn_contra, info: EmbedderInfo) -> None:
        """Replace every vector with the staged ones and record ``info``."""
        ...


class Vectors(Staging[Conn_contra], Protocol[Conn_contra]):
    """The vectors (held in the catalog or beside it), the embedder they came from, and dense
    search over an index derived from them."""

    def check(self, conn: Conn_contra, dim: int, rows: int) -> None:
        """Refuse vectors of ``dim`` numbers when the index holds others; ``rows`` new ones
        come in this write."""
        ...

    def record_embedder(self, conn: Conn_contra, info: EmbedderInfo, dim: int) -> None:
        """Record ``info`` with the first vectors; refuse another model later."""
        ...

    def recorded_embedder(self, conn: Conn_contra) -> EmbedderInfo | None:
        """The embedder recorded with the vectors."""
        ...

    def upsert(self, conn: Conn_contra, rows: list[tuple[int, Vector]]) -> None:
        """Store vectors by row id (nothing to do where the catalog's rows hold them)."""
        ...

    def remove(self, conn: Conn_contra, docs: list[int]) -> None:
        """Delete the vectors of row ids."""
        ...

    def finish(self, conn: Conn_contra) -> None:
        """At the end of a write, after every row is in."""
        ...

    def count(self, conn: Conn_contra, *, cached: bool = False) -> int:
        """How many vectors are stored; ``cached``: a figure a derived file already holds
        for this generation may answer (the watermark's cheap read; sync and stats count)."""
        ...

    def search(self, conn: Conn_contra, query: Vector, k: int, filter: Filter) -> list[Hit]:
        """``(row id, score)`` of the ``k`` nearest vectors among the chunks passing
        ``filter`` (a pre-filter), best first."""
        ...

    def refresh(self, conn: Conn_contra) -> None:
        """Bring the derived index up to date now (may do nothing)."""
        ...

    def figures(self, conn: Conn_contra) -> dict[str, Any]:
        """Keys :meth:`Store.stats` adds at its end (the vector index's settings)."""
        ...

    def close(self) -> None:
        """Release the derived index."""
        ...


class Ledger(Protocol[Conn_contra]):
    """What ``kb ingest`` indexed from which file."""

    def records_of(self, conn: Conn_contra, paths: Sequence[str]) -> dict[str, FileRecord]:
        """The records of those of ``paths`` that are recorded, by path (lookups, no scan)."""
        ...

    def records(self, conn: Conn_contra) -> dict[str, FileRecord]:
        """Every file record, by path."""
        ...

    def count(self, conn: Conn_contra) -> int:
        """How many files are recorded."""
        ...

    def put(self, conn: Conn_contra, record: FileRecord) -> None:
        """Insert or replace a file record."""
        ...

    def forget(self, conn: Conn_contra, path: str) -> None:
        """Drop a file record."""
        ...


class Cache(Protocol[Conn_contra]):
    """Vectors by (embedder, text), so that unchanged text is never embedded twice. The index's
    own vectors are the first cache (:meth:`cached` looks there first); what the part keeps
    itself is only what the index no longer holds: the vectors of chunks as they leave it
    (:meth:`keep`) and those :meth:`remember` is given, bounded (the oldest go first beyond as
    many as the index holds chunks, or a small floor), and nothing for an index whose
    embedder is not worth caching (``EmbedderInfo.cache`` False, as recorded)."""

    def cached(
        self, conn: Conn_contra, info: EmbedderInfo, texts: list[str]
    ) -> dict[str, list[float]]:
        """The vectors ``info``'s embedder made for any of ``texts``: a stored chunk's of the
        same text when the index's vectors are ``info``'s, else one kept."""
        ...

    def remember(
        self, conn: Conn_contra, info: EmbedderInfo, vectors: dict[str, list[float]]
    ) -> None:
        """Keep vectors by (embedder, text), within the bound."""
        ...

    def keep(self, conn: Conn_contra, docs: list[int]) -> None:
        """Keep the vectors of the chunks ``docs`` (row ids), which are about to leave the
        index, within the bound."""
        ...

    def drop(self, conn: Conn_contra, docs: list[int]) -> None:
        """Forget kept vectors of the texts of the chunks ``docs``, which the index holds
        with a vector again."""
        ...
