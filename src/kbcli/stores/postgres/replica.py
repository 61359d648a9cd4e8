"""The read server of a PostgreSQL store: a streaming-replication hot standby of the primary
(``store.read_dsn`` or ``$KB_PG_READ_DSN``) that serves searches and reads, while every write,
lock, ledger read and schema statement goes to the primary (:mod:`.connection` routes them).

A standby replays the primary's write-ahead log commit by commit, and each of kb's writes is one
transaction (a file's chunks, postings, statistics and ledger row together), so a read snapshot
on the standby holds a file's old version or its new one, never part of either. What a standby
can miss is the *lag*: commits it has not replayed yet. A process reads its own writes: after
the store commits, reads stay on the primary until the standby has replayed that commit
(:meth:`ReadServer.replayed`, asked before the read's snapshot is taken).

The connection is opened on the first read that needs it, so writes (``kb ingest``) never
depend on the standby; a standby that cannot be reached, or that is not a replica of the
primary's index, is one :class:`~kbcli.errors.StoreError` naming ``store.read_dsn``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kbcli.errors import StoreError
from kbcli.stores.postgres import schema
from kbcli.stores.postgres.dsn import describe, first_line

if TYPE_CHECKING:
    from kbcli.stores.postgres.schema import PgConnection

ENV_READ_DSN = "KB_PG_READ_DSN"


# Where the standby's replay stands; the delay is 0 once it has replayed all it received.
_REPLAY = (
    "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text,"
    " CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0"
    " ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp()) END"
)


def resolve_read_dsn(read_dsn: str | None) -> str | None:
    """``read_dsn``, else ``$KB_PG_READ_DSN`` (None: reads go to the primary; ``""`` says so
    even when the variable is set)."""
    value = os.environ.get(ENV_READ_DSN) if read_dsn is None else read_dsn
    return value.strip() if value and value.strip() else None


#: the fix every message about the read server ends with
_FIX = (
    "check that the standby is running and that store.read_dsn or $KB_PG_READ_DSN names it, "
    "or remove both to search the primary"
)


class ReadServer:
    """The standby ``dsn`` names, for the index ``tables`` of the primary whose system
    identifier is ``system_id`` (None: not readable there, not checked); ``lost(exc, conn)``
    tells a lost connection from a failed statement."""

    def __init__(
        self,
        psycopg: ModuleType,
        dsn: str,
        tables: schema.Tables,
        system_id: int | None,
        lost: Callable[[BaseException, PgConnection], bool],
    ):
        self.psycopg = psycopg
        self.lost = lost
        self.dsn = dsn
        self.where = describe(dsn)
        self.tables = tables
        self.system_id = system_id
        self.conn: PgConnection | None = None
        self.checked = False  # the index is there, at this schema version

    def reader(self) -> PgConnection:
        """The connection for a read snapshot: :meth:`live`, the index's copy checked once."""
        conn = self.live()
        if not self.checked:
            try:
                self._check_index(conn)
            except self.psycopg.Error as exc:
                raise self.failure(exc) from None
            self.checked = True
        return conn

    def live(self) -> PgConnection:
        """The connection to the standby, opened (and checked) on first use and again after
        it was lost."""
        if self.conn is not None and not (self.conn.closed or self.conn.broken):
            return self.conn
        if self.conn is not None:
            self.conn.close()
        pg = self.psycopg
        try:
            conn: PgConnection = pg.connect(self.dsn, autocommit=True, connect_timeout=10)
        except pg.Error as exc:
            raise StoreError(
                f"Cannot connect to the read server (store.read_dsn) at {self.where}: "
                f"{self.clean(exc)}: {_FIX}"
            ) from None
        try:
            self._check(conn)
            from pgvector.psycopg import register_vector

            register_vector(conn)
        except pg.Error as exc:
            error = self.failure(exc, conn)
            conn.close()
            raise error from None
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        return conn

    def _check(self, conn: PgConnection) -> None:
        """Refuse a server that is not a physical replica of the primary (another system
        identifier)."""
        theirs = system_id(conn, self.psycopg)
        if self.system_id is not None and theirs is not None and theirs != self.system_id:
            raise StoreError(
                f"The read server (store.read_dsn) at {self.where} is not a replica of "
                "store.dsn (another database system identifier): point store.read_dsn at a "
                "streaming-replication standby of the primary"
            )

    def _check_index(self, conn: PgConnection) -> None:
        """Refuse a standby that holds no current copy of the index."""
        t = self.tables
        if not schema.exists(conn, t) or schema.version(conn, t) != schema.SCHEMA_VERSION:
            raise StoreError(
                f"The read server (store.read_dsn) at {self.where} has no copy of the index "
                f"{t.base} at schema {schema.SCHEMA_VERSION} yet: wait for the standby to "
                f"replay the primary's writes, or {_FIX}"
            )

    def replayed(self, lsn: str) -> bool:
        """Whether the standby has replayed the primary's WAL up to ``lsn`` (a server not in
        recovery, such as the primary itself, has everything)."""
        sql = "SELECT NOT pg_is_in_recovery() OR pg_last_wal_replay_lsn() >= %s::pg_lsn"
        return bool(schema.one(self.live().execute(sql, (lsn,)))[0])

    def figures(self, primary: PgConnection) -> dict[str, Any]:
        """Where the standby's replay stands, for ``kb stats``: ``replay_lsn``, ``behind_bytes``
        (WAL the primary wrote that the standby has not replayed) and ``replay_delay_seconds``
        (0 when it has replayed all it received, else the age of the last replayed commit);
        ``error`` instead when the standby cannot be reached."""
        out: dict[str, Any] = {"path": self.where}
        try:
            row = schema.one(self.live().execute(_REPLAY))
        except StoreError as exc:
            return {**out, "error": str(exc)}
        except self.psycopg.Error as exc:
            return {**out, "error": str(self.failure(exc))}
        recovering, lsn, delay = row
        out["in_recovery"] = bool(recovering)
        if recovering and lsn is not None:
            behind = schema.one(
                primary.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", (lsn,))
            )[0]
            out.update(
                replay_lsn=lsn,
                behind_bytes=max(0, int(behind)),
                replay_delay_seconds=round(float(delay or 0.0), 3),
            )
        return out

    def failure(self, exc: BaseException, conn: PgConnection | None = None) -> StoreError:
        """The one-line error for a failed read on the standby (on ``conn``, default the
        store's): a lost connection, a read cancelled by replay (a recovery conflict), or
        PostgreSQL's message."""
        conn = conn if conn is not None else self.conn
        if conn is not None and self.lost(exc, conn):
            return StoreError(
                f"Lost the connection to the read server (store.read_dsn) at {self.where} "
                f"({self.clean(exc)}): {_FIX}; then search again"
            )
        if getattr(exc, "sqlstate", None) == "40001":
            return StoreError(
                f"A read on the standby (store.read_dsn) at {self.where} was cancelled by WAL "
                f"replay ({self.clean(exc)}): search again; to keep long reads, set "
                "hot_standby_feedback = on or raise max_standby_streaming_delay on the standby"
            )
        return StoreError(f"The read server at {self.where} failed: {self.clean(exc)}")

    def clean(self, exc: BaseException) -> str:
        """The first line of an error's message, every password redacted."""
        return first_line(exc, self.dsn)

    def close(self) -> None:
        """Close the connection (if one was opened)."""
        if self.conn is not None:
            self.conn.close()


def system_id(conn: PgConnection, psycopg: ModuleType) -> int | None:
    """The database system identifier (shared by a primary and its physical standbys), None
    when this role may not read it."""
    try:
        with conn.transaction():
            return int(
                schema.one(conn.execute("SELECT system_identifier FROM pg_control_system()"))[0]
            )
    except psycopg.errors.InsufficientPrivilege:
        return None
