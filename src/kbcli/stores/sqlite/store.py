"""SQLiteStore: catalog, keyword index, vectors, file ledger and embedding cache in one file.

The store is :class:`~kbcli.stores.composite.Store` over the SQLite parts, one module per
concept (see the package docstring): the engine :class:`~.connection.Database`, the catalog
:mod:`.catalog`, the keyword index :class:`~.keyword.KeywordTables`, the vectors
:class:`~.vectors.TableVectors` with the matrix cache, the ledger and cache :mod:`.ledger`.
FAISS and Chroma are the same parts with another vector part. Every write runs in one
``BEGIN IMMEDIATE`` transaction, so the statistics stay exact after any mix of adds, upserts
and deletes and a crash leaves the file at the previous commit.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbcli.stores.common import scratch_folder
from kbcli.stores.composite import Store
from kbcli.stores.parts import Built, Location
from kbcli.stores.sqlite import catalog, integrity, ledger
from kbcli.stores.sqlite.connection import DEFAULT_BUSY_TIMEOUT, Database
from kbcli.stores.sqlite.doctor import run_checks
from kbcli.stores.sqlite.keyword import KeywordTables
from kbcli.stores.sqlite.packlog import pack_path
from kbcli.stores.sqlite.vectors import DerivedVectors, MatrixCache, TableVectors
from kbcli.stores.upkeep import Upkeep
from kbcli.text.analysis import Analyzer
from kbcli.types import Finding

if TYPE_CHECKING:
    from kbcli.config.schema import Config


class SQLiteStore(Store[sqlite3.Connection, catalog.ChunkRow]):
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
    _db: Database
    _keywords: KeywordTables
    _vectors: TableVectors
    _matrix: DerivedVectors

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        analyzer: Analyzer | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        create: bool = True,
    ):
        self._open_sqlite(
            path, analyzer, busy_timeout, create, lambda db, allowed: TableVectors(
                db, MatrixCache(db), allowed
            )
        )  # fmt: skip

    def _open_sqlite(
        self,
        path: str | os.PathLike[str] | None,
        analyzer: Analyzer | None,
        busy_timeout: float,
        create: bool,
        vectors: Callable[[Path, catalog.AllowedRowids], TableVectors],
        *,
        refresh_after_ingest: bool = False,
    ) -> None:
        """Assemble the SQLite parts around the vector part ``vectors(db_path, allowed)``;
        ``refresh_after_ingest``: its derived index is brought up to date when a store that
        ingested files closes (see :class:`~kbcli.stores.upkeep.Upkeep`). Without ``path``,
        the database lives in a private temporary folder."""
        if path is None:
            folder, self._scratch = scratch_folder(self)
            path = folder / "knowledge.db"
        self.path = Path(path).expanduser()
        self.busy_timeout = busy_timeout
        self._allowed = catalog.AllowedRowids()
        keywords = KeywordTables(analyzer or Analyzer(), self.path, self._allowed)
        self._db = Database(self.path, busy_timeout=busy_timeout, create=create)
        part = vectors(self.path, self._allowed)
        self._matrix = part.derived  # the index dense search runs on (matrix, FAISS, Chroma)
        if self._db.readonly:  # searched as it is: nothing derived is written beside it
            keywords.read_only = True
            self._matrix.read_only = True
        self._db.companions = [pack_path(self.path), Path(part.derived.path)]
        upkeep = Upkeep(
            self._db,
            keywords,
            part,
            keyword_pack=True,
            vectors_after_ingest=refresh_after_ingest,
            scratch=self._scratch is not None,
        )
        self._assemble(self._db, catalog, keywords, part, ledger, ledger, upkeep=upkeep)

    _persistent = True

    @classmethod
    def _located(cls, config: Config, db: Location, options: dict[str, Any]) -> Built:
        """The database ``db`` (default ``paths.knowledge_db``)."""
        return (catalog_path(config, db),), options

    def close(self) -> None:
        """Close the connection (the store cannot be used afterwards). After writes, first
        write the keyword pack if the next search would (:meth:`prepare_search`): a later
        ``kb search`` then ranks from it without importing numpy. A store built without a path
        deletes its temporary folder."""
        try:
            super().close()
        finally:
            if self._scratch is not None:
                self._scratch()

    def integrity_check(self) -> list[str]:
        """SQLite's integrity check plus kbcli's own invariants; empty list when all is well."""
        with self._db.read() as conn:
            return integrity.problems(conn)

    def doctor(self, repair: bool = False) -> list[Finding]:
        """Check the keyword tables, the packed keyword file and the derived vector index
        against the catalog; with ``repair``, rebuild what drifted (see :mod:`.doctor`)."""
        return run_checks(self, repair)

    @property
    def vector_cache_path(self) -> Path:
        """The file of the derived vector index (safe to delete at any time)."""
        return self._matrix.path


def catalog_path(config: Config, db: str | os.PathLike[str] | None) -> Path:
    """The SQLite file a configured store opens: ``db``, else ``paths.knowledge_db``."""
    return Path(db if db is not None else config.paths.knowledge_db).expanduser()
