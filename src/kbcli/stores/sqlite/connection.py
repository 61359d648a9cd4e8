"""One SQLite connection per store: opening, pragmas, write transactions and read snapshots.

The connection runs in autocommit mode; writes take ``BEGIN IMMEDIATE`` themselves (a
deferred transaction that reads and then writes can fail with SQLITE_BUSY under WAL even with a
busy timeout), reads run in a deferred transaction so several SELECTs see one snapshot while a
writer works (nesting: :class:`~kbcli.stores.nesting.Nesting`).

**Read-only indexes.** A database this process cannot write (a read-only file, folder or
mount) is opened read-only (``mode=ro``), so it can be searched; every write then raises
:class:`~kbcli.errors.ReadOnlyIndexError` naming the cause, before any work. A WAL database
needs its ``-shm`` beside it to be read; where none exists and none can be created, it is
opened ``immutable=1`` (no locks, no ``-shm``) but only where no writer can exist: on a
read-only mount, or in a folder without any write permission (no ``-wal``, ``-shm`` or journal
can be made there, so only an administrator could write it). A ``-wal``
still holding commits is never skipped: without a ``-shm`` to read it through, the open fails
with the fix (open it once where it can be written, which folds the log in).
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kbcli.errors import (
    DatabaseLockedError,
    NotAKnowledgeBaseError,
    ReadOnlyIndexError,
    StoreError,
)
from kbcli.stores.nesting import Nesting
from kbcli.stores.sqlite import schema
from kbcli.system.crashpoints import crash_point
from kbcli.system.locking import lock_file, lock_held

DEFAULT_BUSY_TIMEOUT = 60.0


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def _cannot_open(exc: sqlite3.Error) -> bool:
    """SQLite could not open a file it needs (``-shm`` where it cannot be created ...)."""
    name = getattr(exc, "sqlite_errorname", "")
    return "unable to open" in str(exc) or name.startswith(
        (
            "SQLITE_CANTOPEN",
            "SQLITE_READONLY_DIRECTORY",
            "SQLITE_READONLY_CANTINIT",
            "SQLITE_READONLY_RECOVERY",
        )
    )


def _is_readonly(exc: sqlite3.Error) -> bool:
    return "readonly" in str(exc) or getattr(exc, "sqlite_errorname", "").startswith(
        "SQLITE_READONLY"
    )


def readonly_cause(path: Path) -> str:
    """Why SQLite cannot write the database at ``path``, as one line naming the file and the
    fix. SQLite opens a ``-shm`` it may not write read-only, and then refuses every write with
    "attempt to write a readonly database" whatever the database file allows; a reader of a
    0444 database leaves such a ``-shm`` behind (SQLite gives it the database's mode)."""
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    try:
        if os.statvfs(path.parent).f_flag & os.ST_RDONLY:
            return f"{path} is on a read-only file system: copy it elsewhere, or mount it writable"
    except OSError:
        pass
    if path.exists() and not os.access(path, os.W_OK):
        return f"{path} is read-only: fix its permissions (chmod u+w) to write to it"
    if shm.exists() and not os.access(shm, os.W_OK):
        return (
            f"{shm} is read-only (left by a process that opened the database read-only, or "
            "owned by another user), so nothing can be written: remove it while no kb process "
            "uses the database (it holds no data), or fix its permissions; then run again"
        )
    if wal.exists() and not os.access(wal, os.W_OK):
        return (
            f"{wal} is read-only, so nothing can be written: fix its permissions (never delete "
            "it: it may hold the last writes); then run again"
        )
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return (
            f"The folder {path.parent} is not writable (read-only for this user): SQLite keeps "
            f"{path.name}-wal and {path.name}-shm beside the database; fix its permissions"
        )
    return (
        f"{path} cannot be written (read-only): check the permissions of the file, of "
        f"{path.name}-wal and {path.name}-shm beside it and of its folder"
    )


def on_readonly_mount(path: Path) -> bool:
    """True when ``path`` is on a file system mounted read-only (nothing there can change it)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs (Windows)
        return False


def writable_here(path: Path) -> bool:
    """Whether this process can write the database at ``path``: the file, and its ``-wal`` and
    ``-shm`` (existing, or creatable in the folder)."""
    if on_readonly_mount(path) or not os.access(path, os.W_OK):
        return False
    beside = [Path(f"{path}-wal"), Path(f"{path}-shm")]
    if all(p.exists() for p in beside):
        return all(os.access(p, os.W_OK) for p in beside)
    return os.access(path.parent, os.W_OK | os.X_OK)


def no_writer_can_exist(path: Path) -> bool:
    """True where SQLite may skip its locks (``immutable=1``): a read-only mount, or a folder
    without any write permission, where no ``-wal``, ``-shm`` or journal can be created, so
    nobody but an administrator could write the database."""
    if on_readonly_mount(path):
        return True
    writable = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    try:
        return not path.parent.stat().st_mode & writable
    except OSError:
        return False


def unreadable_cause(path: Path) -> str:
    """Why a database this process cannot write cannot be read either, with the fix."""
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    if wal.exists() and wal.stat().st_size > 0:
        how = (
            f"which SQLite reads only through {shm.name} (it cannot be created here)"
            if not shm.exists()
            else f"which SQLite must first recover by writing ({shm.name} is stale)"
        )
        return (
            f"{path} is read-only here and {wal.name} beside it holds writes not yet in the "
            f"database, {how}: open the index once where it can be written (any kb command "
            "folds the log in), then use it read-only"
        )
    return (
        f"{path} is read-only here and SQLite cannot create {shm.name} beside it, which it "
        "needs to read the index safely while someone may write it: make the folder writable "
        f"for this user, mount it read-only, or, if the index no longer changes, remove the "
        f"folder's write permission (chmod a-w {path.parent})"
    )


class Database(Nesting[sqlite3.Connection]):
    """The connection to one kb database file, checked and migrated on open: the engine part
    (:class:`~kbcli.stores.parts.Engine`) of the SQLite stores."""

    identity: dict[str, Any] = {}
    schema_version = schema.SCHEMA_VERSION
    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
    readonly = False  # opened read-only: every write raises ReadOnlyIndexError
    readonly_reason = ""

    def __init__(self, path: Path, *, busy_timeout: float, create: bool):
        self.path = path
        self.label = self.location = str(path)
        self.busy_timeout = busy_timeout
        # the files and folders the store's parts write beside the database (keyword pack,
        # vector cache, FAISS file, Chroma folder), counted by size_on_disk
        self.companions: list[Path] = []
        super().__init__()
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
        if exists and not writable_here(self.path):
            return self._open_read_only()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"Cannot create the folder for {self.path}: {exc.strerror}") from None
        if not exists and not os.access(self.path.parent, os.W_OK | os.X_OK):
            where = " (a read-only file system)" if on_readonly_mount(self.path.parent) else ""
            raise ReadOnlyIndexError(
                f"Cannot create {self.path}: its folder is read-only{where}: choose another "
                "--db path"
            )
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
            if exists and (_is_readonly(exc) or _cannot_open(exc)):
                return self._open_read_only()  # the checks above could not tell (ACLs ...)
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

    def _open_read_only(self) -> sqlite3.Connection:
        """Open the database for reading only (see the module docstring)."""
        path = self.path
        wal = Path(f"{path}-wal")
        pending = wal.exists() and wal.stat().st_size > 0
        immutable = no_writer_can_exist(path) and not pending
        self.readonly = True
        self.readonly_reason = readonly_cause(path)
        uri = f"file:{urllib.parse.quote(str(path))}?mode=ro"
        try:
            conn = sqlite3.connect(
                uri + ("&immutable=1" if immutable else ""),
                uri=True,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise StoreError(f"Cannot open {path}: {exc}") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            schema.ensure(conn, path)
        except sqlite3.DatabaseError as exc:
            conn.close()
            if _is_readonly(exc) and not _cannot_open(exc):  # a write: an older format
                raise ReadOnlyIndexError(
                    f"kb needs write access once to open this database (a one-time upgrade of "
                    f"its format): {self.readonly_reason}"
                ) from None
            if _cannot_open(exc) or _is_readonly(exc):
                raise ReadOnlyIndexError(unreadable_cause(path)) from None
            if _is_busy(exc):
                raise DatabaseLockedError(
                    f"{path} stayed locked by another kb process for "
                    f"{self.busy_timeout:g} s: try again when it finishes"
                ) from None
            raise NotAKnowledgeBaseError(
                f"{path} is not a kb database ({exc}): choose another --db path"
            ) from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _refuse_write(self) -> None:
        if self.readonly:
            raise ReadOnlyIndexError(self.readonly_reason)

    def figures(self) -> dict[str, Any]:
        """``read_only: True`` for an index opened read-only (:meth:`Store.stats`)."""
        return {"read_only": True} if self.readonly else {}

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
    def _write(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``; every commit bumps ``stats.generation``."""
        self._refuse_write()
        try:  # BEGIN inside: an interrupt right after it must not leave the lock held
            self._begin()
            self.depth = 1
            yield self.conn
            self.conn.execute("UPDATE stats SET generation = generation + 1 WHERE id = 1")
            crash_point("before-commit")
            self.conn.execute("COMMIT")
            crash_point("after-commit")
        except sqlite3.OperationalError as exc:
            self._rollback()
            if _is_readonly(exc):
                raise StoreError(readonly_cause(self.path)) from None
            raise
        except BaseException:
            self._rollback()
            raise
        finally:
            self.depth = 0

    def _rollback(self) -> None:
        # An interrupt (Ctrl-C, SIGTERM) can land just before BEGIN took effect or just after
        # COMMIT: a ROLLBACK then would replace it with "no transaction is active".
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def _begin(self) -> None:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                raise DatabaseLockedError(
                    f"{self.path} is locked by another writer (waited "
                    f"{self.busy_timeout:g} s): try again when it finishes"
                ) from None
            if _is_readonly(exc):
                raise StoreError(readonly_cause(self.path)) from None
            raise

    def check_writable(self) -> None:
        """Raise :class:`StoreError` naming the cause when nothing can be written (a read-only
        file, ``-shm`` or folder), before a writer does any slow work: one write, rolled back
        (a database SQLite opened read-only still begins a write transaction)."""
        self._refuse_write()
        with self.lock:
            if self.depth:
                return
            try:
                self._begin()
                self.conn.execute("UPDATE stats SET generation = generation WHERE id = 1")
            except sqlite3.OperationalError as exc:
                if _is_readonly(exc):
                    raise StoreError(readonly_cause(self.path)) from None
                raise
            finally:
                self._rollback()

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A deferred transaction: several SELECTs see one snapshot."""
        try:
            self.conn.execute("BEGIN")
            yield self.conn
        finally:
            if self.conn.in_transaction:
                self.conn.execute("COMMIT")

    @contextmanager
    def writer_lock(self, wait: float) -> Iterator[None]:
        """The one-ingest-at-a-time lock (a lock file beside the database); checks first that
        the database can be written, so an ingest fails before it reads or embeds anything."""
        self._refuse_write()  # before the lock file, which a read-only folder cannot hold
        with lock_file(Path(f"{self.path}.ingest-lock"), wait, str(self.path)):
            self.check_writable()
            yield

    def writer_busy(self) -> bool:
        """True when a process holds the ingest lock file now (:func:`lock_held`: not taken)."""
        return lock_held(Path(f"{self.path}.ingest-lock"))

    @staticmethod
    def generation(conn: sqlite3.Connection) -> int:
        """The counter every commit bumps."""
        return int(conn.execute("SELECT generation FROM stats WHERE id = 1").fetchone()[0])

    def size(self, conn: sqlite3.Connection | None = None) -> int:
        """Bytes of every file the index is kept in (:meth:`size_on_disk`)."""
        return self.size_on_disk()

    def checkpoint(self) -> None:
        """Fold the WAL back into the database file (PASSIVE: never waits for readers)."""
        with self.lock:
            if not self.depth and not self.readonly:
                self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def size_on_disk(self) -> int:
        """Bytes of every file kb writes for this index: the database, its ``-wal`` and
        ``-shm``, the ingest lock and the :attr:`companions` (a folder with all its files),
        each file counted once."""
        paths = [
            self.path,
            *(Path(f"{self.path}{suffix}") for suffix in ("-wal", "-shm", ".ingest-lock")),
            *self.companions,
        ]
        sizes: dict[tuple[int, int], int] = {}
        for path in paths:
            found = path.rglob("*") if path.is_dir() else (path,)
            for item in found:
                try:
                    st = item.stat()
                except OSError:  # gone meanwhile, or never written
                    continue
                if not item.is_dir():
                    sizes[(st.st_dev, st.st_ino)] = st.st_size
        return sum(sizes.values())

    def close(self) -> None:
        """Close the connection."""
        with self.lock:
            self.conn.close()
