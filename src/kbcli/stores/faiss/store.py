"""FaissStore: the SQLite parts with dense search on a FAISS index (extra ``kbcli[faiss]``).

Documents, the keyword index, the file ledger and the vectors themselves stay in the SQLite file
(the truth). The FAISS index is derived from the ``vectors`` table: an ``IndexIDMap2`` over the
chosen ``index_factory`` (:mod:`.faiss_index`), kept in ``<db>.faiss`` with the vectors
generation it was built for (:mod:`.faiss_file`). A stale file is brought up to date by
difference, a missing or corrupt one is rebuilt from the catalog, and every write of the file
goes temp -> fsync -> rename -> fsync(folder), so a killed process never leaves a half file in
use. Filtered search hands FAISS an id selector (a pre-filter), never a post-filtered top k.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbcli.errors import IndexMismatchError
from kbcli.stores.common import few_allowed
from kbcli.stores.faiss.file import FILE_MAGIC, FaissFile
from kbcli.stores.faiss.index import (
    DEFAULT_EF_SEARCH,
    EF_SEARCH_BY_SIZE,
    LARGE_EF_SEARCH,
    FaissVectorIndex,
    _faiss,
    check_ef_search,
    default_ef_search,
    resolve_metric,
)
from kbcli.stores.parts import Built, Filter, Hit, Location, Vector
from kbcli.stores.sqlite import SQLiteStore, catalog
from kbcli.stores.sqlite.connection import DEFAULT_BUSY_TIMEOUT
from kbcli.stores.sqlite.store import catalog_path
from kbcli.stores.sqlite.vectors import TableVectors
from kbcli.text.analysis import Analyzer

if TYPE_CHECKING:
    from kbcli.config.schema import Config

__all__ = [
    "DEFAULT_EF_SEARCH",
    "EF_SEARCH_BY_SIZE",
    "FILE_MAGIC",
    "LARGE_EF_SEARCH",
    "FaissFile",
    "FaissStore",
    "FaissVectorIndex",
    "FaissVectors",
    "default_ef_search",
]

FIRST_LOOK = 64  # nearest vectors checked against a filter before the selector search


def _check_faiss() -> None:
    """Fail now, naming the pip command, when faiss is missing, without importing it (faiss
    and numpy cost ~100 ms, which keyword search, ``kb stats`` or ``kb list`` never need)."""
    import importlib.util

    loaded = "faiss" in sys.modules
    if (sys.modules["faiss"] is None) if loaded else importlib.util.find_spec("faiss") is None:
        _faiss()


class FaissVectors(TableVectors):
    """The vector part of :class:`FaissStore`: the ``vectors`` table, searched through the
    :class:`FaissFile` derived from it. ``dim``: the length every vector must have (None:
    whatever the first vectors have)."""

    derived: FaissFile

    def __init__(
        self, path: Path, derived: FaissFile, allowed: catalog.AllowedRowids, dim: int | None
    ):
        super().__init__(path, derived, allowed)
        self.dim = dim

    def check(self, conn: sqlite3.Connection, dim: int, rows: int) -> None:
        """As the table's check; vectors must also have ``dim`` numbers when it is set."""
        if self.dim is not None and dim != self.dim:
            raise IndexMismatchError(
                f"New vectors have {dim} dimensions but the faiss store at {self.path} "
                f"is set to {self.dim}: set store.dim or use the embedder that built it"
            )
        super().check(conn, dim, rows)

    def search(self, conn: sqlite3.Connection, query: Vector, k: int, filter: Filter) -> list[Hit]:
        """Without a filter, FAISS's nearest. With one: one look at the nearest
        ``max(4k, 64)`` (enough when the filter passes most chunks), else a single search
        restricted to the allowed rowids (a pre-filter: every allowed vector is a candidate),
        instead of widening windows of full searches. An allowed set already kept for this
        generation and small enough (:func:`~kbcli.stores.common.few_allowed`) skips the
        first look."""
        if filter is None:
            return super().search(conn, query, k, filter)
        index = self.derived.index(conn)
        if len(index) == 0 or k <= 0:
            return []
        known = self.allowed.peek(conn, filter)
        if few_allowed(known, len(index)):
            return index.search(query, k, known)[:k]  # few allowed, already known
        first = index.search(query, min(len(index), max(4 * k, FIRST_LOOK)))
        ok = catalog.passing(conn, [i for i, _ in first], filter)
        hits = [h for h in first if h[0] in ok]
        if len(hits) < k and len(first) < len(index):
            hits = index.search(query, k, self.allowed.get(conn, filter))
        return hits[:k]

    def figures(self, conn: sqlite3.Connection) -> dict[str, Any]:
        """The FAISS index settings and file."""
        s = self.derived.settings
        return {
            "vector_index": {
                "backend": "faiss",
                "index_factory": s["factory"],
                "metric": s["metric"],
                "normalize": s["normalize"],
                "ef_search": self.derived.ef_search,
                "file": str(self.derived.path),
            }
        }


class FaissStore(SQLiteStore):
    """SQLite catalog, keyword index and file ledger; dense search on a FAISS index.

    ``dim``: the vectors' length (None: taken from the first vectors; checked on every add).
    ``index_factory``: a FAISS factory string (``"Flat"`` exact; ``"IVF256,Flat"``,
    ``"HNSW32"`` approximate). ``normalize``: unit-length vectors, so inner product is cosine.
    ``metric``: ``"ip"``/``"cosine"`` (default) or ``"l2"``. ``ef_search``: HNSW candidates per
    query (recall against speed; None: :func:`default_ef_search`, 128 up to 400k distinct
    vectors, where FAISS's own default of 16 gave recall@10 0.70 on a 100k set, and 512
    beyond; a filtered search uses at least 2k).
    ``path``: the SQLite file; the index lives in ``<path>.faiss``. Without one the store is
    private to this object (a temporary folder deleted on :meth:`close`, see
    :class:`SQLiteStore`): ``FaissStore(dim)`` never opens ``paths.knowledge_db``.
    """

    _vectors: FaissVectors

    def __init__(
        self,
        dim: int | None = None,
        index_factory: str = "Flat",
        normalize: bool = True,
        metric: str | None = None,
        path: str | os.PathLike[str] | None = None,
        ef_search: int | None = None,
        *,
        analyzer: Analyzer | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        create: bool = True,
    ):
        _check_faiss()
        self.dim = dim
        self.index_factory = index_factory
        self.normalize = normalize
        self.metric = resolve_metric(metric, normalize)
        self.ef_search = check_ef_search(ef_search)

        def vectors(db: Path, allowed: catalog.AllowedRowids) -> FaissVectors:
            file = FaissFile(db, dim, index_factory, normalize, self.metric, self.ef_search)
            return FaissVectors(db, file, allowed, dim)

        self._open_sqlite(path, analyzer, busy_timeout, create, vectors, refresh_after_ingest=True)

    @classmethod
    def _located(cls, config: Config, db: Location, options: dict[str, Any]) -> Built:
        """The catalog ``db`` (default ``paths.knowledge_db``), its index in ``<db>.faiss``."""
        return (), {**options, "path": catalog_path(config, db)}

    @property
    def faiss_path(self) -> Path:
        """The derived FAISS index file (safe to delete: it is rebuilt from the catalog)."""
        return self._matrix.path
