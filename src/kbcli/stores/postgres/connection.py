"""The connection of one PostgreSQL store: opening, write transactions, read snapshots, locks.

The connection runs in autocommit mode and every block is a psycopg transaction block. Writes
run at READ COMMITTED and take a transaction-level advisory lock first, so writers of one index
are serialised across processes and machines and every statement after the lock sees every
earlier commit (the BM25 bookkeeping reads the index before it changes it). Reads run at
REPEATABLE READ, READ ONLY: several SELECTs see one snapshot while writers work. ``kb ingest``
holds a session-level advisory lock (:meth:`Database.writer_lock`) on a connection of its own;
PostgreSQL drops it if the process dies (nesting: :class:`~kbcli.stores.nesting.Nesting`).
With a read server (``read_dsn``: a hot standby, :mod:`.replica`), read snapshots are taken
there, except those that must see every commit (``read(latest=True)``, a writer's, and a
process's reads until the standby has replayed its last commit).

A lost connection (the server stopped or killed, the backend terminated, the network gone) is
one :class:`StoreError` naming the server; the transaction it cut rolls back whole on the
server, and the next block opens a new connection, so a long-lived process (``kb mcp``)
recovers when the server is back.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from kbcli.errors import DatabaseLockedError, StoreError, require
from kbcli.stores.nesting import Nesting
from kbcli.stores.postgres import schema
from kbcli.stores.postgres.dsn import describe, first_line
from kbcli.stores.postgres.replica import ReadServer, system_id
from kbcli.system.crashpoints import crash_point

if TYPE_CHECKING:
    from kbcli.stores.postgres.schema import PgConnection

DEFAULT_BUSY_TIMEOUT = 60.0


def _lock_key(kind: str, schema_name: str, table: str) -> int:
    """A signed 64-bit advisory-lock key for ``kind`` of the index ``schema_name.table``."""
    digest = hashlib.sha256(f"kbcli:{kind}:{schema_name}.{table}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class Database(Nesting["PgConnection"]):
    """One connection to the server, the index's tables checked and created on open: the
    engine part (:class:`~kbcli.stores.parts.Engine`) of :class:`PostgresStore`. With
    ``read_dsn``, reads go to that hot standby (:mod:`.replica`) except while :meth:`primary`
    or the writer lock is held, or until the standby has replayed this engine's last commit."""

    replica: ReadServer | None = None
    pinned = 0  # reads must see the primary (primary(), writer_lock)
    unreplayed: str | None = None  # the primary's WAL position after this engine's last commit

    identity = {"backend": "postgres"}
    schema_version = schema.SCHEMA_VERSION
    errors: tuple[type[BaseException], ...] = ()

    def __init__(
        self,
        dsn: str,
        tables: schema.Tables,
        *,
        busy_timeout: float,
        create: bool,
        read_dsn: str | None = None,
    ):
        self.psycopg = require("psycopg", extra="postgres", feature="The postgres store")
        require("pgvector.psycopg", extra="postgres", feature="The postgres store")
        self.dsn = dsn
        self.where = describe(dsn)
        self.tables = tables
        self.label = self.location = f"{self.where}#{tables.base}"
        self.busy_timeout = busy_timeout
        super().__init__()
        self.conn = self.connect()
        try:
            schema_name = schema.one(self.conn.execute("SELECT current_schema()"))[0]
            self.write_key = _lock_key("write", schema_name, tables.base)
            self.ingest_key = _lock_key("ingest", schema_name, tables.base)
            self._prepare(create)
            if read_dsn:
                ours = system_id(self.conn, self.psycopg)
                self.replica = ReadServer(self.psycopg, read_dsn, tables, ours, self.lost)
                # reads never see less than the primary held when the store opened
                self.unreplayed = self._wal_position()
        except self.psycopg.OperationalError as exc:
            self.conn.close()
            raise self.failure(exc) from None
        except BaseException:
            self.conn.close()
            raise

    # --- connections ---------------------------------------------------------------------------

    def connect(self) -> PgConnection:
        """A new autocommit connection (errors redacted: the DSN's password never shows)."""
        try:
            conn: PgConnection = self.psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
        except self.psycopg.Error as exc:
            raise StoreError(
                f"Cannot connect to PostgreSQL at {self.where}: {self.clean(exc)}: check that "
                "the server is running and that store.dsn or $KB_PG_DSN names it"
            ) from None
        return conn

    def writer_busy(self) -> bool:
        """True when a session holds the index's ingest advisory lock now (``pg_locks`` on
        the primary: asked, never taken)."""
        key = self.ingest_key & 0xFFFFFFFFFFFFFFFF  # pg_locks splits the key into two oids
        with self.primary(), self.read() as conn:
            row = schema.one(
                conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'"
                    " AND granted AND objsubid = 1 AND classid = %s AND objid = %s"
                    " AND database = (SELECT oid FROM pg_database"
                    " WHERE datname = current_database()))",
                    (key >> 32, key & 0xFFFFFFFF),
                )
            )
        return bool(row[0])

    def failure(self, exc: BaseException) -> StoreError:
        """The one-line error for a failed statement: a lost connection says so and what to
        do; anything else names the server and PostgreSQL's message (passwords redacted)."""
        if self.lost(exc):
            return StoreError(
                f"Lost the connection to PostgreSQL at {self.where} ({self.clean(exc)}): check "
                "that the server is running and reachable, then run the command again (what "
                "was committed before stays; kb ingest goes on from there)"
            )
        return StoreError(f"PostgreSQL at {self.where} failed: {self.clean(exc)}")

    def lost(self, exc: BaseException, conn: PgConnection | None = None) -> bool:
        """Whether ``exc`` means the connection is gone (not a failed statement on a live one)."""
        conn = conn if conn is not None else self.conn
        state = str(getattr(exc, "sqlstate", None) or "")
        # class 08: connection exceptions; 57P01-03: admin / crash shutdown, cannot connect now
        return conn.closed or conn.broken or state.startswith("08") or state.startswith("57P0")

    def _live(self) -> PgConnection:
        """The connection, opened again if the last one was lost (outside any transaction)."""
        if self.conn.closed or self.conn.broken:
            from pgvector.psycopg import register_vector

            self.conn.close()
            conn = self.connect()
            try:
                register_vector(conn)
            except self.psycopg.OperationalError as exc:
                conn.close()
                raise self.failure(exc) from None
            self.conn = conn
        return self.conn

    def clean(self, exc: BaseException) -> str:
        """The first line of an error's message, every password redacted."""
        return first_line(exc, self.dsn)

    def _prepare(self, create: bool) -> None:
        conn = self.conn
        have = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
        if have is None or not self._current():
            with self.transaction(bump=False) as tx:
                if tx.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
                    pass
                elif not create:
                    raise StoreError(
                        f"No knowledge base at {self.where} (no pgvector extension): run "
                        "'kb ingest PATH' first"
                    )
                else:
                    try:
                        with tx.transaction():  # a savepoint: the error message is ours
                            tx.execute("CREATE EXTENSION IF NOT EXISTS vector")
                    except self.psycopg.Error as exc:
                        raise StoreError(
                            f"The database at {self.where} has no pgvector extension and kb "
                            f"cannot create it ({self.clean(exc)}): run 'CREATE EXTENSION "
                            "vector' as a superuser"
                        ) from None
                schema.ensure(tx, self.tables, create=create, where=self.where)
        from pgvector.psycopg import register_vector

        register_vector(conn)
        sql = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        row = schema.one(conn.execute(sql))
        parts = [int(p) for p in str(row[0]).split(".")[:2] if p.isdigit()]
        # pgvector 0.8 walks an HNSW index with a filter (iterative scans); older ones fall
        # back to an exact scan when the walk comes back short.
        self.iterative_scans = tuple(parts) >= (0, 8)

    def _current(self) -> bool:
        t = self.tables
        return schema.exists(self.conn, t) and schema.version(self.conn, t) == (
            schema.SCHEMA_VERSION
        )

    # --- transactions --------------------------------------------------------------------------

    @contextmanager
    def _write(self, *, bump: bool = True) -> Iterator[PgConnection]:
        """A READ COMMITTED transaction under the index's write lock; every commit bumps the
        generation (``bump``)."""
        pg = self.psycopg
        try:
            conn = self._live()
            conn.isolation_level = pg.IsolationLevel.READ_COMMITTED
            conn.read_only = False
            with conn.transaction():
                self._lock_for_write()
                self.depth = 1
                try:
                    yield conn
                    if bump:
                        conn.execute(
                            f"UPDATE {self.tables.stats} SET generation = generation + 1"
                            " WHERE id = 1"
                        )
                    crash_point("before-commit")
                finally:
                    self.depth = 0
            crash_point("after-commit")
            if self.replica is not None:
                self.unreplayed = self._wal_position()
        except pg.OperationalError as exc:
            if isinstance(exc, pg.errors.LockNotAvailable):
                raise DatabaseLockedError(
                    f"The index {self.tables.base} at {self.where} is locked by another "
                    f"writer (waited {self.busy_timeout:g} s): try again when it finishes"
                ) from None
            raise self.failure(exc) from None

    def _lock_for_write(self) -> None:
        ms = max(1, int(self.busy_timeout * 1000))
        self.conn.execute(f"SET LOCAL lock_timeout = {ms}")
        self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (self.write_key,))

    @contextmanager
    def primary(self) -> Iterator[None]:
        """Reads inside this block see the primary (a writer's, ``kb doctor``'s)."""
        with self.lock:
            self.pinned += 1
        try:
            yield
        finally:
            with self.lock:
                self.pinned -= 1

    def _read(self) -> AbstractContextManager[PgConnection]:
        """A read snapshot on the standby when one is configured and may serve it, else on
        the primary."""
        replica = self.replica
        if replica is None or self.pinned or not self._replayed(replica):
            return self._snapshot(self._live, self.failure)
        return self._snapshot(replica.reader, replica.failure)

    def _replayed(self, replica: ReadServer) -> bool:
        """Whether the standby holds this engine's last commit (asked before the read's
        snapshot is taken, so the snapshot holds it too)."""
        if self.unreplayed is None:
            return True
        try:
            done = replica.replayed(self.unreplayed)
        except self.psycopg.OperationalError as exc:
            raise replica.failure(exc) from None
        if done:
            self.unreplayed = None
        return done

    @contextmanager
    def _snapshot(
        self, live: Callable[[], PgConnection], failure: Callable[[BaseException], StoreError]
    ) -> Iterator[PgConnection]:
        """A REPEATABLE READ, READ ONLY transaction on ``live()``: several SELECTs see one
        snapshot."""
        pg = self.psycopg
        try:
            conn = live()
            conn.isolation_level = pg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            with conn.transaction():
                yield conn
        except pg.OperationalError as exc:
            raise failure(exc) from None

    def _wal_position(self) -> str:
        """The primary's WAL position now (after every commit made so far)."""
        return str(schema.one(self.conn.execute("SELECT pg_current_wal_lsn()::text"))[0])

    def _read_latest(self) -> AbstractContextManager[PgConnection]:
        """A snapshot on the primary (the ledger, the cache, ``stats``)."""
        return self._snapshot(self._live, self.failure)

    def figures(self) -> dict[str, Any]:
        """With a read server, ``read_server``: where its replay stands
        (:meth:`.replica.ReadServer.figures`)."""
        if self.replica is None:
            return {}
        with self.lock:
            return {"read_server": self.replica.figures(self._live())}

    def generation(self, conn: PgConnection) -> int:
        """The counter every commit bumps."""
        sql = f"SELECT generation FROM {self.tables.stats} WHERE id = 1"
        return int(schema.one(conn.execute(sql))[0])

    def size(self, conn: PgConnection) -> int:
        """Bytes of the index's tables and their indexes."""
        size = schema.one(
            conn.execute(
                "SELECT sum(pg_total_relation_size(to_regclass(x))) FROM unnest(%s::text[]) AS x",
                (self.tables.all(),),
            )
        )[0]
        return int(size or 0)

    def checkpoint(self) -> None:
        """Nothing to do: PostgreSQL checkpoints its write-ahead log itself."""

    @contextmanager
    def writer_lock(self, wait: float) -> Iterator[None]:
        """The one-ingest-at-a-time lock: a session advisory lock on a connection of its own,
        waiting up to ``wait`` seconds before :class:`DatabaseLockedError`."""
        conn = self.connect()
        pg = self.psycopg
        try:
            deadline = time.monotonic() + max(0.0, wait)
            try:
                while not schema.one(
                    conn.execute("SELECT pg_try_advisory_lock(%s)", (self.ingest_key,))
                )[0]:
                    if time.monotonic() >= deadline:
                        raise DatabaseLockedError(
                            f"Another kb ingest is writing to {self.tables.base} at "
                            f"{self.where}; waited {wait:g} s. Try again when it finishes, or "
                            "raise --wait"
                        )
                    time.sleep(0.05)
            except pg.OperationalError as exc:
                raise self.failure(exc) from None
            try:
                with self.primary():  # the writer reads what it wrote
                    yield
            finally:
                try:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (self.ingest_key,))
                except pg.OperationalError as exc:
                    # A lost session has lost its lock too; the error that ended the run (if
                    # any) is the one to report.
                    if not self.lost(exc, conn):
                        raise self.failure(exc) from None
        finally:
            conn.close()

    def close(self) -> None:
        """Close the connections."""
        with self.lock:
            try:
                if self.replica is not None:
                    self.replica.close()
            finally:
                self.conn.close()
