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
- ``embedding_cache``: vectors by (embedder, text hash) that the index no longer holds (its own
  vectors are found through ``chunks.text_hash``), oldest first by ``id``, bounded.
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

from kbcli.errors import NotAKnowledgeBaseError
from kbcli.stores.common import KEEP_AT_LEAST
from kbcli.system.crashpoints import crash_point

SCHEMA_VERSION = 6
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
CREATE INDEX chunks_text_hash ON chunks (text_hash);
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
    id INTEGER PRIMARY KEY,
    embedder TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    vec BLOB NOT NULL
);
CREATE UNIQUE INDEX embedding_cache_key ON embedding_cache (embedder, text_hash);
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


def migrate_5_to_6(conn: sqlite3.Connection) -> None:
    """Schema 6 stops caching every vector twice: the index's own vectors are the cache (found
    through an index on ``chunks.text_hash``), and ``embedding_cache`` keeps only those of
    chunks that left the index, in rowid rows (schema 5's ``WITHOUT ROWID`` rows of a 1.5 KB
    vector took about 4.7 KB each: 58.5 MB for 12,480 vectors). The rows kept are those no
    chunk holds any more, newest last, at most as many as the index has chunks (at least
    ``KEEP_AT_LEAST``); the space freed is given back once the upgrade commits
    (:func:`reclaim`)."""
    import json

    conn.execute("CREATE INDEX chunks_text_hash ON chunks (text_hash)")
    conn.execute(
        "CREATE TABLE embedding_cache_6 (id INTEGER PRIMARY KEY, embedder TEXT NOT NULL,"
        " text_hash TEXT NOT NULL, vec BLOB NOT NULL)"
    )
    row = conn.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
    recorded = json.loads(row[0]) if row else {}
    live = f"{recorded.get('provider')}/{recorded.get('model')}" if recorded else None
    chunks = conn.execute("SELECT n FROM stats WHERE id = 1").fetchone()[0]
    # Schema 5 wrote no order: the rows go in by rowid of the old table's key order.
    conn.execute(
        "INSERT INTO embedding_cache_6 (embedder, text_hash, vec) SELECT embedder, text_hash,"
        " vec FROM embedding_cache e WHERE e.embedder IS NOT ? OR NOT EXISTS"
        " (SELECT 1 FROM chunks c JOIN vectors v ON v.doc = c.doc"
        "  WHERE c.text_hash = e.text_hash)",
        (live,),
    )
    extra = conn.execute("SELECT count(*) FROM embedding_cache_6").fetchone()[0] - max(
        KEEP_AT_LEAST, chunks
    )
    if extra > 0:
        conn.execute(
            "DELETE FROM embedding_cache_6 WHERE id IN"
            " (SELECT id FROM embedding_cache_6 ORDER BY id LIMIT ?)",
            (extra,),
        )
    conn.execute("DROP TABLE embedding_cache")
    conn.execute("ALTER TABLE embedding_cache_6 RENAME TO embedding_cache")
    conn.execute("CREATE UNIQUE INDEX embedding_cache_key ON embedding_cache (embedder, text_hash)")


# Migration from version N to N+1, by N.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: migrate_1_to_2,
    2: migrate_2_to_3,
    3: migrate_3_to_4,
    4: migrate_4_to_5,
    5: migrate_5_to_6,
}

# An upgrade that freed at least this share of the file gives the space back (VACUUM).
RECLAIM_SHARE = 0.25


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
        upgraded = version < SCHEMA_VERSION
        while version < SCHEMA_VERSION:
            MIGRATIONS[version](conn)
            version += 1
            crash_point("mid-migration")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    if upgraded:
        reclaim(conn)


def reclaim(conn: sqlite3.Connection) -> bool:
    """Give the space an upgrade freed back to the file system (``VACUUM``) when it is at least
    :data:`RECLAIM_SHARE` of the file; skipped (False) while another connection reads it:
    the free pages are then reused by later writes."""
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    if not pages or free < RECLAIM_SHARE * pages:
        return False
    waits = conn.execute("PRAGMA busy_timeout").fetchone()[0]
    conn.execute("PRAGMA busy_timeout = 0")  # a reader elsewhere: skip, never wait for it
    try:
        conn.execute("VACUUM")
        # in WAL mode the smaller file is written at the checkpoint: now, not at close
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.OperationalError:
        return False
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(waits)}")
    return True
