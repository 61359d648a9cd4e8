"""One SQLite connection per store: opening, pragmas, write transactions and read snapshots.

The connection runs in autocommit mode; writes take ``BEGIN IMMEDIATE`` themselves (a
deferred transaction that reads and then writes can fail with SQLITE_BUSY under WAL even with a
busy timeout), reads run in a deferred transaction so several SELECTs see one snapshot while a
writer works. A thread lock makes the store usable from several threads.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ...crashpoints import crash_point
from ...errors import DatabaseLockedError, NotAKnowledgeBaseError, StoreError
from . import schema

DEFAULT_BUSY_TIMEOUT = 60.0


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


class Database:
    """The connection to one kb database file, checked and migrated on open."""

    def __init__(self, path: Path, *, busy_timeout: float, create: bool):
        self.path = path
        self.busy_timeout = busy_timeout
        self.lock = threading.RLock()
        self.depth = 0
        self.commits = 0  # write transactions committed through this connection
        self.conn = self._open(create)

    def _open(self, create: bool) -> sqlite3.Connection:
        exists = self.path.exists() and self.path.stat().st_size > 0
        if not exists and not create:
            raise StoreError(
                f"No knowledge base at {self.path}: run 'kb ingest PATH' first, or point --db "
                "at one"
            )
        if self.path.is_dir():
            raise NotAKnowledgeBaseError(f"{self.path} is a folder, not a kb database file")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"Cannot create the folder for {self.path}: {exc.strerror}") from None
        try:
            conn = sqlite3.connect(
                str(self.path),
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise StoreError(f"Cannot open {self.path}: {exc}") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            schema.ensure(conn, self.path)
            self._use_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.DatabaseError as exc:
            conn.close()
            if "readonly" in str(exc):
                raise StoreError(
                    f"Cannot write {self.path} ({exc}): kb needs write access to open it (a "
                    "one-time upgrade of its format, or its write-ahead log); check the "
                    "permissions of the file and its folder"
                ) from None
            if _is_busy(exc):
                raise DatabaseLockedError(
                    f"{self.path} stayed locked by another kb process for "
                    f"{self.busy_timeout:g} s: try again when it finishes"
                ) from None
            raise NotAKnowledgeBaseError(
                f"{self.path} is not a kb database ({exc}): choose another --db path"
            ) from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _use_wal(self, conn: sqlite3.Connection) -> None:
        """Switch to WAL when needed. The switch takes an exclusive lock without calling the
        busy handler, so it is retried here for up to the busy timeout."""
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
                if str(mode).lower() != "wal":
                    conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; nested calls join the outer one. Commits or rolls back whole.
        Every commit bumps ``stats.generation``."""
        with self.lock:
            if self.depth:
                self.depth += 1
                try:
                    yield self.conn
                finally:
                    self.depth -= 1
                return
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if _is_busy(exc):
                    raise DatabaseLockedError(
                        f"{self.path} is locked by another writer (waited "
                        f"{self.busy_timeout:g} s): try again when it finishes"
                    ) from None
                raise
            self.depth = 1
            try:
                yield self.conn
                self.conn.execute("UPDATE stats SET generation = generation + 1 WHERE id = 1")
                crash_point("before-commit")
                self.conn.execute("COMMIT")
                self.commits += 1
                crash_point("after-commit")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            finally:
                self.depth = 0

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for several SELECTs (joins an open write transaction)."""
        with self.lock:
            if self.depth:
                yield self.conn
                return
            self.conn.execute("BEGIN")
            try:
                yield self.conn
            finally:
                self.conn.execute("COMMIT")

    def checkpoint(self) -> None:
        """Fold the WAL back into the database file (PASSIVE: never waits for readers)."""
        with self.lock:
            if not self.depth:
                self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def size_on_disk(self) -> int:
        """Bytes of the database file and its write-ahead log."""
        files = (self.path, Path(f"{self.path}-wal"))
        return sum(p.stat().st_size for p in files if p.exists())

    def close(self) -> None:
        """Close the connection."""
        with self.lock:
            self.conn.close()
