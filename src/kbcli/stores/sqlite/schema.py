"""The kb database layout and its numbered migrations.

``PRAGMA application_id`` is :data:`APP_ID` ("KBLI"); ``PRAGMA user_version`` is the schema
version. Tables:

- ``chunks``: one row per document (chunk): id, text, metadata JSON, source, text hash, term
  count (BM25 length), its forward index (term id, tf pairs: the postings of the keyword
  index, which the packed index inverts) and ``src``, its row in ``sources``.
- ``sources``: one row per source (file) with its total length and chunk count; a chunk with no
  source is a source of its own.
- ``vectors``: a float32 BLOB per chunk.
- ``terms`` (term, df, sdf): the vocabulary with its chunk and source frequencies. There is
  no postings table since schema 4: keeping one clustered by term cost an ingest more than
  everything else together (every commit rewrote a page per distinct term), and the packed
  index is built from the forward indexes. ``stats`` holds N, the total length, the number of
  sources and generation counters bumped by writes.
- ``keyword_log``: the chunks each write added or removed, in order (``seq``); the packed
  keyword index (:mod:`.packed`, a file beside the database) reads the entries after its own
  position as its delta. Writers prune entries a pack on disk holds (``meta.keyword_log_floor``).
- ``files``: what ``kb ingest`` indexed from which file (incremental sync).
- ``embedding_cache``: vectors by (embedder, text hash).
- ``meta``: the embedder and analyzer the index was built with, last ingest, a random
  ``index_id``.

Each migration is one function from version N to N+1 in :data:`MIGRATIONS`; all pending ones
run in one transaction, only when ``user_version`` says so, never on a read path. Every schema a
released kbcli wrote is upgraded by a test with a real old database file (``tests/data``).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from ...crashpoints import crash_point
from ...errors import NotAKnowledgeBaseError

SCHEMA_VERSION = 5
APP_ID = 0x4B42_4C49  # "KBLI"

TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE chunks (
    doc INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    text TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    source TEXT,
    text_hash TEXT NOT NULL,
    length INTEGER NOT NULL,
    terms BLOB NOT NULL,
    src INTEGER NOT NULL
);
CREATE INDEX chunks_source ON chunks (source);
CREATE INDEX chunks_src ON chunks (src);
CREATE TABLE sources (
    id INTEGER PRIMARY KEY,
    source TEXT UNIQUE,
    length INTEGER NOT NULL,
    chunks INTEGER NOT NULL
);
CREATE TABLE vectors (doc INTEGER PRIMARY KEY, vec BLOB NOT NULL);
CREATE TABLE terms (
    id INTEGER PRIMARY KEY,
    term TEXT NOT NULL UNIQUE,
    df INTEGER NOT NULL,
    sdf INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE stats (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n INTEGER NOT NULL,
    total_length INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    vector_generation INTEGER NOT NULL,
    sources INTEGER NOT NULL DEFAULT 0
);
INSERT INTO stats (id, n, total_length, generation, vector_generation) VALUES (1, 0, 0, 0, 0);
CREATE TABLE keyword_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, doc INTEGER NOT NULL);
CREATE TABLE files (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    settings TEXT NOT NULL,
    chunk_ids TEXT NOT NULL,
    indexed_at TEXT NOT NULL
);
CREATE TABLE embedding_cache (
    embedder TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    vec BLOB NOT NULL,
    PRIMARY KEY (embedder, text_hash)
) WITHOUT ROWID;
"""


def migrate_1_to_2(conn: sqlite3.Connection) -> None:
    """Schema 2 groups chunks by source for source-level BM25: a ``sources`` table, ``src`` on
    chunks and postings (postings re-clustered by term, source, chunk), ``terms.sdf``."""
    conn.execute(
        "CREATE TABLE sources (id INTEGER PRIMARY KEY, source TEXT UNIQUE,"
        " length INTEGER NOT NULL, chunks INTEGER NOT NULL)"
    )
    conn.execute(
        "INSERT INTO sources (source, length, chunks) SELECT source, sum(length), count(*)"
        " FROM chunks WHERE source IS NOT NULL GROUP BY source ORDER BY min(doc)"
    )
    conn.execute("ALTER TABLE chunks ADD COLUMN src INTEGER NOT NULL DEFAULT 0")
    conn.execute(
        "UPDATE chunks SET src = (SELECT id FROM sources s WHERE s.source = chunks.source)"
        " WHERE source IS NOT NULL"
    )
    # A chunk without a source is a source of its own.
    loose = conn.execute("SELECT doc, length FROM chunks WHERE source IS NULL ORDER BY doc")
    for doc, length in loose.fetchall():
        src = conn.execute(
            "INSERT INTO sources (source, length, chunks) VALUES (NULL, ?, 1)", (length,)
        ).lastrowid
        conn.execute("UPDATE chunks SET src = ? WHERE doc = ?", (src, doc))
    conn.execute(
        "CREATE TABLE postings_v2 (term INTEGER NOT NULL, src INTEGER NOT NULL,"
        " doc INTEGER NOT NULL, tf INTEGER NOT NULL, dl INTEGER NOT NULL,"
        " PRIMARY KEY (term, src, doc)) WITHOUT ROWID"
    )
    conn.execute(
        "INSERT INTO postings_v2 SELECT p.term, c.src, p.doc, p.tf, p.dl"
        " FROM postings p JOIN chunks c ON c.doc = p.doc"
    )
    conn.execute("DROP TABLE postings")
    conn.execute("ALTER TABLE postings_v2 RENAME TO postings")
    conn.execute("ALTER TABLE terms ADD COLUMN sdf INTEGER NOT NULL DEFAULT 0")
    conn.execute(
        "UPDATE terms SET sdf ="
        " (SELECT count(DISTINCT src) FROM postings p WHERE p.term = terms.id)"
    )
    conn.execute("ALTER TABLE stats ADD COLUMN sources INTEGER NOT NULL DEFAULT 0")
    conn.execute("UPDATE stats SET sources = (SELECT count(*) FROM sources)")


def migrate_2_to_3(conn: sqlite3.Connection) -> None:
    """Schema 3 logs the chunks every write adds or removes (``keyword_log``) so the packed
    keyword index can stay exact between merges; an upgraded index starts with an empty log
    (and no pack: the first search writes one)."""
    conn.execute(
        "CREATE TABLE keyword_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, doc INTEGER NOT NULL)"
    )


def migrate_3_to_4(conn: sqlite3.Connection) -> None:
    """Schema 4 drops the ``postings`` table (the chunks' forward indexes hold the same pairs)
    and indexes chunks by ``src``, which source frequencies are counted by."""
    conn.execute("DROP TABLE postings")
    conn.execute("CREATE INDEX chunks_src ON chunks (src)")


def migrate_4_to_5(conn: sqlite3.Connection) -> None:
    """Schema 5 writes forward indexes in the narrow layout (a tag byte, uint32 term ids,
    uint16 tfs: 6 bytes a term instead of 16). Rows of schema 4 keep their int64 pairs, which
    every reader still decodes, so nothing is rewritten; the version changes so that an older
    kbcli, which would misread the new rows, refuses the file instead ("written by a newer
    kbcli")."""


# Migration from version N to N+1, by N.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: migrate_1_to_2,
    2: migrate_2_to_3,
    3: migrate_3_to_4,
    4: migrate_4_to_5,
}


def _read_header(conn: sqlite3.Connection) -> tuple[int, int, int]:
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    return app_id, version, tables


def _refuse(path: Path, app_id: int, version: int, tables: int) -> None:
    if app_id != APP_ID and tables:
        raise NotAKnowledgeBaseError(
            f"{path} is an SQLite database of another program, not a kb database: "
            "choose another --db path"
        )
    if app_id == APP_ID and version < 1:  # every kb database has a version from 1 on
        raise NotAKnowledgeBaseError(
            f"{path} is not a kb database: unknown format version {version} (kb writes 1 to "
            f"{SCHEMA_VERSION}); it was left unchanged: choose another --db path, or restore "
            "it from a backup"
        )
    if version > SCHEMA_VERSION:
        raise NotAKnowledgeBaseError(
            f"{path} was written by a newer kbcli (schema {version}, this one reads "
            f"{SCHEMA_VERSION}): upgrade kbcli"
        )


def ensure(conn: sqlite3.Connection, path: Path) -> None:
    """Create a new database or migrate an old one; refuse another program's database.

    The header is read in one snapshot (a creator in another process commits the tables and
    the application id together) and read again under the write lock before anything is
    written, so processes that open a new database at once agree on who creates it.
    """
    conn.execute("BEGIN")
    try:
        header = _read_header(conn)
    finally:
        conn.execute("COMMIT")
    if header[0] == APP_ID and header[1] == SCHEMA_VERSION:
        return
    _refuse(path, *header)
    conn.execute("BEGIN IMMEDIATE")
    try:
        app_id, version, tables = _read_header(conn)
        _refuse(path, app_id, version, tables)
        if app_id != APP_ID:
            for statement in TABLES.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA application_id = {APP_ID}")
            conn.execute("INSERT INTO meta VALUES ('index_id', ?)", (os.urandom(16).hex(),))
            version = SCHEMA_VERSION
        while version < SCHEMA_VERSION:
            MIGRATIONS[version](conn)
            version += 1
            crash_point("mid-migration")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
