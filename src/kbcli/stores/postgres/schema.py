"""The tables of one PostgreSQL knowledge base and their numbered migrations.

Every table is named after ``table`` (default ``kb_chunks``), so several indexes share one
database or schema:

- ``{table}``: one row per document (chunk): ``doc`` (insertion order), id, text, ``metadata``
  JSONB, source (``COLLATE "C"`` and indexed, so a filter pinning sources reads a range), text
  hash, BM25 length, the forward index (``term_ids``/``tfs``, to undo its postings exactly),
  ``src`` (its row in ``_sources``) and ``embedding``, a pgvector ``vector`` column; once the
  dimension is known it is typed ``vector(d)`` and carries an HNSW index with
  ``vector_cosine_ops``.
- ``{table}_sources`` (source, length, chunks), ``{table}_terms`` (term, df, sdf),
  ``{table}_postings`` (term, src, doc, tf, dl; its key covers every column, so a query's
  postings are read by index-only scans): the inverted index of :mod:`kbcli.text.bm25`;
  ``{table}_stats`` holds N, the total length, the number of sources and the generation.
- ``{table}_files``: the file ledger; ``{table}_cache``: vectors by (embedder, text hash) of
  chunks that left the index (its own are found by ``text_hash``), oldest ``kept`` first out;
  ``{table}_meta``: embedder, analyzer, schema version, last ingest.

Creation and each migration (one function from version N to N+1 in :data:`MIGRATIONS`) run in
one transaction under the index's advisory write lock, so processes that open a new index at
once agree on who creates it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kbcli.errors import ConfigError, NotAKnowledgeBaseError, StoreError

if TYPE_CHECKING:
    from psycopg import Connection, Cursor

    #: the connection the PostgreSQL parts take (rows come as tuples)
    PgConnection = Connection[tuple[Any, ...]]
    PgCursor = Cursor[tuple[Any, ...]]

SCHEMA_VERSION = 3
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,39}$")


def one(cursor: PgCursor) -> tuple[Any, ...]:
    """The row of a query that returns exactly one (an aggregate, the stats row)."""
    row = cursor.fetchone()
    assert row is not None, "the query returns one row"
    return row


@dataclass(frozen=True)
class Tables:
    """The quoted names of one index's tables (``table`` is checked, so quoting is safe)."""

    base: str

    def __post_init__(self) -> None:
        if not _NAME.match(self.base):
            raise ConfigError(
                f"store.table {self.base!r} is not a valid table name: use 1-40 lowercase "
                "letters, digits and underscores, starting with a letter"
            )

    def _q(self, suffix: str = "") -> str:
        return f'"{self.base}{suffix}"'

    @property
    def chunks(self) -> str:
        return self._q()

    @property
    def sources(self) -> str:
        return self._q("_sources")

    @property
    def terms(self) -> str:
        return self._q("_terms")

    @property
    def postings(self) -> str:
        return self._q("_postings")

    @property
    def stats(self) -> str:
        return self._q("_stats")

    @property
    def meta(self) -> str:
        return self._q("_meta")

    @property
    def files(self) -> str:
        return self._q("_files")

    @property
    def cache(self) -> str:
        return self._q("_cache")

    @property
    def staging(self) -> str:
        return self._q("_staging")

    @property
    def hnsw(self) -> str:
        return self._q("_hnsw")

    def all(self) -> list[str]:
        """Every table (for sizes and drops), the chunk table first."""
        return [
            self.chunks, self.sources, self.terms, self.postings, self.stats, self.meta,
            self.files, self.cache,
        ]  # fmt: skip

    def unquoted(self, quoted: str) -> str:
        return quoted.strip('"')


def _create(conn: PgConnection, t: Tables) -> None:
    statements = f"""
    CREATE TABLE {t.meta} (key text PRIMARY KEY, value text NOT NULL);
    CREATE TABLE {t.sources} (
        id bigserial PRIMARY KEY, source text UNIQUE, length bigint NOT NULL,
        chunks bigint NOT NULL);
    CREATE TABLE {t.chunks} (
        doc bigserial PRIMARY KEY, id text NOT NULL UNIQUE, text text NOT NULL,
        metadata jsonb NOT NULL DEFAULT '{{}}', created_at text NOT NULL, source text COLLATE "C",
        text_hash text NOT NULL, length integer NOT NULL, term_ids bigint[] NOT NULL,
        tfs integer[] NOT NULL, src bigint NOT NULL, embedding vector);
    CREATE INDEX "{t.base}_source" ON {t.chunks} (source);
    CREATE TABLE {t.terms} (
        id bigserial PRIMARY KEY, term text NOT NULL UNIQUE, df bigint NOT NULL,
        sdf bigint NOT NULL);
    CREATE TABLE {t.postings} (
        term bigint NOT NULL, src bigint NOT NULL, doc bigint NOT NULL, tf integer NOT NULL,
        dl integer NOT NULL, PRIMARY KEY (term, src, doc) INCLUDE (tf, dl));
    CREATE TABLE {t.stats} (
        id integer PRIMARY KEY CHECK (id = 1), n bigint NOT NULL, total_length bigint NOT NULL,
        sources bigint NOT NULL, generation bigint NOT NULL);
    INSERT INTO {t.stats} VALUES (1, 0, 0, 0, 0);
    CREATE TABLE {t.files} (
        path text PRIMARY KEY, size bigint NOT NULL, mtime_ns bigint NOT NULL,
        sha256 text NOT NULL, settings text NOT NULL, chunk_ids jsonb NOT NULL,
        indexed_at text NOT NULL);
    CREATE TABLE {t.cache} (
        embedder text NOT NULL, text_hash text NOT NULL, vec bytea NOT NULL,
        kept bigserial NOT NULL, PRIMARY KEY (embedder, text_hash));
    CREATE INDEX "{t.base}_cache_kept" ON {t.cache} (kept);
    CREATE INDEX "{t.base}_text_hash" ON {t.chunks} (text_hash);
    """
    for statement in statements.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute(
        f"INSERT INTO {t.meta} VALUES ('schema_version', %s), ('index_id', md5(random()::text))",
        (str(SCHEMA_VERSION),),
    )


def _source_in_code_point_order(conn: PgConnection, t: Tables) -> None:
    """1 -> 2: the chunks' ``source`` column (and so its index) in ``COLLATE "C"``, so that a
    filter pinning sources reads a range of that index. Only the index is rebuilt: the rows
    are not rewritten, as the type stays ``text``."""
    conn.execute(f'ALTER TABLE {t.chunks} ALTER COLUMN source TYPE text COLLATE "C"')


def _cache_keeps_what_left(conn: PgConnection, t: Tables) -> None:
    """2 -> 3: the chunks' own vectors are the embedding cache (an index on ``text_hash``);
    ``_cache`` keeps only what left the index, in order (``kept``), bounded: the rows of
    texts a chunk holds with a vector of the index's embedder are dropped."""
    import json

    conn.execute(f"ALTER TABLE {t.cache} ADD COLUMN IF NOT EXISTS kept bigserial NOT NULL")
    conn.execute(f'CREATE INDEX IF NOT EXISTS "{t.base}_cache_kept" ON {t.cache} (kept)')
    conn.execute(f'CREATE INDEX IF NOT EXISTS "{t.base}_text_hash" ON {t.chunks} (text_hash)')
    row = conn.execute(f"SELECT value FROM {t.meta} WHERE key = 'embedder'").fetchone()
    if row is not None:
        data = json.loads(row[0])
        conn.execute(
            f"DELETE FROM {t.cache} c USING {t.chunks} k WHERE c.embedder = %s"
            " AND k.text_hash = c.text_hash AND k.embedding IS NOT NULL",
            (f"{data['provider']}/{data['model']}",),
        )


# Migration from version N to N+1, by N.
MIGRATIONS: dict[int, Callable[[Any, Tables], None]] = {
    1: _source_in_code_point_order,
    2: _cache_keeps_what_left,
}


def exists(conn: PgConnection, t: Tables) -> bool:
    """True when the index's tables are there."""
    row = one(conn.execute("SELECT to_regclass(%s), to_regclass(%s)", (t.meta, t.chunks)))
    return row[0] is not None and row[1] is not None


def version(conn: PgConnection, t: Tables) -> int:
    row = conn.execute(f"SELECT value FROM {t.meta} WHERE key = 'schema_version'").fetchone()
    if row is None:
        raise NotAKnowledgeBaseError(
            f"Table {t.chunks} is not a kb index (no schema version): choose another store.table"
        )
    try:
        number = int(row[0])
    except ValueError:
        number = 0
    if number < 1:  # every kb index has a version from 1 on
        raise NotAKnowledgeBaseError(
            f"Table {t.chunks} is not a kb index: unknown format version {row[0]!r} (kb writes "
            f"1 to {SCHEMA_VERSION}); it was left unchanged: choose another store.table"
        )
    return number


def ensure(conn: PgConnection, t: Tables, *, create: bool, where: str) -> None:
    """Create the tables or migrate them, inside the caller's write transaction."""
    if not exists(conn, t):
        if not create:
            raise StoreError(
                f"No knowledge base in table {t.base} at {where}: run 'kb ingest PATH' first"
            )
        if one(conn.execute("SELECT to_regclass(%s)", (t.chunks,)))[0] is not None:
            raise NotAKnowledgeBaseError(
                f"Table {t.base} at {where} belongs to another program: choose another store.table"
            )
        _create(conn, t)
        return
    current = version(conn, t)
    if current > SCHEMA_VERSION:
        raise NotAKnowledgeBaseError(
            f"The index {t.base} at {where} was written by a newer kbcli (schema {current}, "
            f"this one reads {SCHEMA_VERSION}): upgrade kbcli"
        )
    while current < SCHEMA_VERSION:
        MIGRATIONS[current](conn, t)
        current += 1
        conn.execute(
            f"UPDATE {t.meta} SET value = %s WHERE key = 'schema_version'", (str(current),)
        )
