"""ChromaStore: the SQLite parts with dense search on a Chroma collection (``kbcli[chroma]``).

The catalog, keyword index, file ledger and the vectors (the truth) stay in an SQLite file of
the collection's own (:mod:`~kbcli.stores.chroma.folder`: ``<folder>/<collection>.kbcli.db``,
or the ``db`` given); the collection is a derived vector index in cosine space (so
``1 - distance`` is the cosine), kept in step by :class:`~.chroma_collection.ChromaCollection`.
Filters compile to ``where`` (:func:`~.chroma_where.compile_where`); what ``where`` cannot
express (``$exists``, ``null``, string ranges, fractions and numbers beyond 2**53) runs as an
exact scan of the allowed chunks' vectors, so a filter never returns fewer than k. A
collection Chroma cannot read, or that disagrees with the catalog (count, sampled vectors, a
short answer), is rebuilt from the catalog; a search never returns fewer hits than the catalog
holds.

Chroma's local mode is not multi-process safe: kb serialises its own syncs with a lock file,
but run one writer at a time and do not point other Chroma clients at the folder.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kbcli.stores.chroma.folder as chroma_folder
from kbcli.errors import FilterError, IndexMismatchError
from kbcli.stores.chroma.collection import (
    SEARCH_SAMPLE,
    ChromaCollection,
    ChromaUnreadable,
    ChromaVectorIndex,
    _chroma_calls,
    _chromadb,
)
from kbcli.stores.chroma.where import chroma_metadata, compile_where
from kbcli.stores.common import scratch_folder
from kbcli.stores.parts import Built, Filter, Hit, Location, Vector
from kbcli.stores.sqlite import SQLiteStore
from kbcli.stores.sqlite import vectors as sqlite_vectors
from kbcli.stores.sqlite.catalog import AllowedRowids
from kbcli.stores.sqlite.connection import DEFAULT_BUSY_TIMEOUT
from kbcli.stores.sqlite.store import catalog_path
from kbcli.stores.sqlite.vectors import TableVectors
from kbcli.text.analysis import Analyzer
from kbcli.text.vector_math import as_unit_matrix, top_k_cosine

if TYPE_CHECKING:
    from kbcli.config.schema import Config

__all__ = [
    "ChromaCollection",
    "ChromaStore",
    "ChromaVectorIndex",
    "ChromaVectors",
    "chroma_metadata",
    "compile_where",
]

COLLECTION_KEY = "chroma_collection"  # meta: the collection a catalog feeds


class ChromaVectors(TableVectors):
    """The vector part of :class:`ChromaStore`: the ``vectors`` table, searched through the
    :class:`ChromaCollection` derived from it."""

    derived: ChromaCollection

    def search(self, conn: sqlite3.Connection, query: Vector, k: int, filter: Filter) -> list[Hit]:
        """Cosine similarity (``1 - distance``) from the Chroma collection among the chunks
        passing ``filter``: compiled to ``where``, else an exact scan of the allowed chunks.
        A collection Chroma cannot read is rebuilt; an answer shorter than the catalog's
        (a damaged collection, or HNSW coming back short) is replaced by an exact scan of the
        stored vectors, and a damaged collection rebuilt. A read-only index is scanned
        exactly (Chroma cannot open its folder without writing to it)."""
        if self.derived.read_only:
            allowed = None if filter is None else self.allowed.get(conn, filter)
            return _exact_scan(conn, query, k, allowed)
        hits, from_chroma = self._chroma_search(conn, query, k, filter)
        if len(hits) < k and from_chroma:
            allowed = None if filter is None else self.allowed.get(conn, filter)
            exact = _exact_scan(conn, query, k, allowed)
            if len(exact) > len(hits):
                self._recheck(conn)
                hits = exact
        return hits

    def _chroma_search(
        self, conn: sqlite3.Connection, query: Sequence[float], k: int, filter: Filter
    ) -> tuple[list[tuple[int, float]], bool]:
        """The hits and whether they came from Chroma (False: a filter ``where`` cannot
        express, scanned exactly)."""
        if filter is None:
            where = None
        else:
            try:
                where = compile_where(filter)
            except FilterError:
                return _exact_scan(conn, query, k, self.allowed.get(conn, filter)), False
        for attempt in (1, 2):
            index = self.derived.index(conn)
            try:
                with _chroma_calls():
                    return index.search(query, k, where=where), True
            except ChromaUnreadable as exc:
                if attempt == 2:
                    raise self.derived.unreadable(exc) from None
                self.derived.rebuild(conn)
        raise AssertionError("unreachable")

    def _recheck(self, conn: sqlite3.Connection) -> None:
        """After a short answer: rebuild the collection when it disagrees with the catalog."""
        try:
            damaged = self.derived.damage(conn, SEARCH_SAMPLE)
        except ChromaUnreadable:
            damaged = "unreadable"
        if damaged:
            self.derived.rebuild(conn)

    def figures(self, conn: sqlite3.Connection) -> dict[str, Any]:
        """The Chroma folder and collection."""
        where = {"backend": "chroma", "path": str(self.derived.path)}
        return {"vector_index": {**where, "collection": self.derived.name}}


class ChromaStore(SQLiteStore):
    """SQLite catalog, keyword index and file ledger; dense search on a Chroma collection.

    ``path``: the Chroma folder; ``collection``: the collection's name, a namespace of its
    own: without ``db`` its catalog is ``<path>/<collection>.kbcli.db`` (see
    :mod:`~kbcli.stores.chroma.folder`; a folder of an older kbcli, with one ``kbcli.db`` for
    every collection, is split on first open). ``db``: the catalog elsewhere (``kb`` passes
    ``paths.knowledge_db``). A catalog feeds one collection and a collection is fed by one
    catalog: opening either with another is refused (:class:`IndexMismatchError`). Without
    ``path`` the store is private to this object: a temporary folder deleted on
    :meth:`close` (see :class:`SQLiteStore`). Not multi-process safe (Chroma's local mode).
    """

    _vectors: ChromaVectors
    _matrix: ChromaCollection

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        collection: str = "jianmu",
        *,
        db: str | os.PathLike[str] | None = None,
        analyzer: Analyzer | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        create: bool = True,
    ):
        _chromadb()
        self.collection = chroma_folder.check_collection_name(collection)
        if path is None:
            folder, self._scratch = scratch_folder(self)
            path = folder
        self.chroma_path = Path(path).expanduser()
        if db is None:
            chroma_folder.adopt_shared_catalog(self.chroma_path, collection)
            db_path = chroma_folder.catalog_path(self.chroma_path, collection)
        else:
            db_path = Path(db).expanduser()

        def vectors(db: Path, allowed: AllowedRowids) -> ChromaVectors:
            collection = ChromaCollection(self.chroma_path, self.collection, db)
            return ChromaVectors(db, collection, allowed)

        self._open_sqlite(
            db_path, analyzer, busy_timeout, create, vectors, refresh_after_ingest=True
        )
        try:
            self._claim()
        except BaseException:
            SQLiteStore.close(self)
            raise

    @classmethod
    def _located(cls, config: Config, db: Location, options: dict[str, Any]) -> Built:
        """The collection ``store.collection`` in ``store.path`` (default ``<db>.chroma/``),
        its catalog ``db`` (default ``paths.knowledge_db``)."""
        path = catalog_path(config, db)
        folder = Path(options.pop("path", None) or f"{path}.chroma").expanduser()
        return (folder,), {**options, "db": path}

    def _claim(self) -> None:
        """Record this collection in the catalog, refusing a catalog of another collection or a
        collection synced from another catalog that still exists."""
        recorded = self.get_meta(COLLECTION_KEY)
        if recorded is not None and recorded != self.collection:
            raise IndexMismatchError(
                f"{self.path} is the catalog of the Chroma collection {recorded!r}, not "
                f"{self.collection!r}: use collection {recorded!r} (store.collection), or "
                f"give {self.collection!r} a database of its own (another --db)"
            )
        header = self._matrix.header() or {}
        owner, theirs = header.get("catalog"), str(header.get("tag", "")).split(":")[0]
        # another index (not a copy of this one) that still exists synced the collection
        if owner and theirs != self.get_meta("index_id") and _index_id(owner) == theirs:
            raise IndexMismatchError(
                f"The Chroma collection {self.collection!r} in {self.chroma_path} is built "
                f"from {owner}, not {self.path}: open that catalog (--db), or use another "
                "collection name"
            )
        if recorded is None:
            self.set_meta(COLLECTION_KEY, self.collection)


def _index_id(db: str) -> str | None:
    """The ``index_id`` of the kb database at ``db``, None when it is not one (any more)."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'index_id'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def _exact_scan(
    conn: sqlite3.Connection, query: Sequence[float], k: int, allowed: Sequence[int] | None
) -> list[tuple[int, float]]:
    """Cosine top ``k`` over the stored vectors of ``allowed`` (None: every chunk's), from
    the catalog (the truth, not the index)."""
    if allowed is not None and not len(allowed):
        return []
    if allowed is None:
        allowed = sorted(sqlite_vectors.stamps(conn))
        if not allowed:
            return []
    ids, matrix = sqlite_vectors.read_vectors(conn, allowed)
    if not len(ids):
        return []
    hits = top_k_cosine(as_unit_matrix(matrix.copy()), query, k, None)
    return [(int(ids[i]), score) for i, score in hits]
