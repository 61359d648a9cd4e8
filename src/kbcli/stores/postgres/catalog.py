"""The document catalog in PostgreSQL: chunk rows, source identities and the meta table.

Writers call these inside :meth:`Database.transaction`; the keyword and vector modules keep
their tables in step in the same transaction. Bulk rows go in with ``COPY``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kbcli.filters.sql import dumps_metadata
from kbcli.stores.common import text_hash
from kbcli.stores.parts import EVERY, Listing
from kbcli.stores.postgres.filters import scan_filter
from kbcli.stores.postgres.schema import Tables, one
from kbcli.types import Document

if TYPE_CHECKING:
    from kbcli.stores.postgres.schema import PgConnection

DOC_COLUMNS = "c.id, c.text, c.metadata, c.created_at"
CHUNK_ROW = "c.doc, c.src, c.term_ids, c.tfs"


@dataclass(frozen=True)
class ChunkRow:
    """What a delete needs to know about a stored chunk: its forward index and source."""

    doc: int
    src: int
    term_ids: list[int]
    tfs: list[int]


def vector_text(vec: Sequence[float]) -> str:
    """pgvector's text form of ``vec``."""
    return "[" + ",".join(repr(float(x)) for x in vec) + "]"


def to_document(row: Sequence[Any], vec: Any = None) -> Document:
    """A Document from ``(id, text, metadata, created_at)`` and an optional stored vector."""
    return Document(
        id=row[0],
        text=row[1],
        metadata=row[2] if isinstance(row[2], dict) else json.loads(row[2]),
        created_at=datetime.fromisoformat(row[3]),
        embedding=floats(vec) if vec is not None else None,
    )


def floats(vec: Any) -> list[float]:
    """A stored vector (pgvector's ``Vector``, a numpy array or text) as a list of floats."""
    if hasattr(vec, "to_list"):
        return [float(x) for x in vec.to_list()]
    if isinstance(vec, str):
        return [float(x) for x in vec.strip("[]").split(",") if x]
    return [float(x) for x in vec]


# --- writes ---------------------------------------------------------------------------------


def allocate(conn: PgConnection, table: str, column: str, n: int) -> list[int]:
    """``n`` new ids from the serial sequence of ``table.column``, ascending."""
    if n <= 0:
        return []
    rows = conn.execute(
        "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
        (table, column, n),
    ).fetchall()
    return sorted(r[0] for r in rows)


def source_ids(
    conn: PgConnection, t: Tables, sources: Sequence[str | None]
) -> tuple[list[int], set[int]]:
    """The ``_sources`` row of each of ``sources`` (created empty when missing) and the set of
    new ones. A chunk without a source gets a source of its own."""
    named = sorted({s for s in sources if s is not None})
    known: dict[str, int] = {}
    if named:
        known.update(
            conn.execute(
                f"SELECT source, id FROM {t.sources} WHERE source = ANY(%s::text[])", (named,)
            ).fetchall()
        )
    missing = [s for s in named if s not in known]
    loose = sum(1 for s in sources if s is None)
    fresh = allocate(conn, t.sources, "id", len(missing) + loose)
    known.update(zip(missing, fresh))
    loose_ids = iter(fresh[len(missing) :])
    out = [known[s] if s is not None else next(loose_ids) for s in sources]
    new = set(fresh)
    if fresh:
        names: list[str | None] = [*missing, *([None] * loose)]
        conn.execute(
            f"INSERT INTO {t.sources} (id, source, length, chunks)"
            " SELECT id, source, 0, 0 FROM unnest(%s::bigint[], %s::text[]) AS x(id, source)",
            (fresh, names),
        )
    return out, new


def insert(conn: PgConnection, t: Tables, rows: list[tuple[Any, ...]]) -> None:
    """COPY chunk rows ``(doc, id, text, metadata dict, created_at, source, length, term_ids,
    tfs, src, vector or None)``."""
    columns = (
        "doc, id, text, metadata, created_at, source, text_hash, length, term_ids, tfs, src,"
        " embedding"
    )
    with conn.cursor() as cur:
        with cur.copy(f"COPY {t.chunks} ({columns}) FROM STDIN") as copy:
            for doc, doc_id, text, meta, created, source, length, term_ids, tfs, src, vec in rows:
                copy.write_row(
                    (
                        doc, doc_id, text, dumps_metadata(meta), created, source,
                        text_hash(text), length, term_ids, tfs, src,
                        vector_text(vec) if vec is not None else None,
                    )
                )  # fmt: skip


def delete_rows(conn: PgConnection, t: Tables, docs: Sequence[int]) -> None:
    """Delete chunk rows by ``doc``."""
    conn.execute(f"DELETE FROM {t.chunks} WHERE doc = ANY(%s::bigint[])", (list(docs),))


def rows_by_ids(conn: PgConnection, t: Tables, ids: Sequence[str]) -> list[ChunkRow]:
    """The rows of the chunks among ``ids``."""
    sql = f"SELECT {CHUNK_ROW} FROM {t.chunks} c WHERE c.id = ANY(%s::text[])"
    return [ChunkRow(*r) for r in conn.execute(sql, (list(dict.fromkeys(ids)),))]


def rowids(conn: PgConnection, t: Tables, ids: Sequence[str]) -> dict[str, int]:
    """The row id of each chunk among ``ids`` that is in the index."""
    sql = f"SELECT c.id, c.doc FROM {t.chunks} c WHERE c.id = ANY(%s::text[])"
    return dict(conn.execute(sql, (list(dict.fromkeys(ids)),)))


def rows_by_source(conn: PgConnection, t: Tables, source: str) -> list[ChunkRow]:
    """The rows of every chunk of ``source``."""
    sql = f"SELECT {CHUNK_ROW} FROM {t.chunks} c WHERE c.source = %s"
    return [ChunkRow(*r) for r in conn.execute(sql, (source,))]


def rows_where(conn: PgConnection, t: Tables, filter: dict[str, Any] | None) -> list[ChunkRow]:
    """The rows of every chunk passing ``filter``."""
    where, params = scan_filter(filter)
    sql = f"SELECT {CHUNK_ROW} FROM {t.chunks} c WHERE {where}"
    return [ChunkRow(*r) for r in conn.execute(sql, params)]


# --- reads ----------------------------------------------------------------------------------


def documents_by_rowid(conn: PgConnection, t: Tables, docs: Sequence[int]) -> dict[int, Document]:
    """Documents by ``doc`` (without vectors)."""
    sql = f"SELECT c.doc, {DOC_COLUMNS} FROM {t.chunks} c WHERE c.doc = ANY(%s::bigint[])"
    return {row[0]: to_document(row[1:]) for row in conn.execute(sql, (list(docs),))}


def get(conn: PgConnection, t: Tables, ids: Sequence[str], with_embeddings: bool) -> list[Document]:
    """The documents among ``ids`` in the order asked."""
    vec = "c.embedding" if with_embeddings else "NULL"
    sql = f"SELECT {DOC_COLUMNS}, {vec} FROM {t.chunks} c WHERE c.id = ANY(%s::text[])"
    found = {row[0]: to_document(row[:4], row[4]) for row in conn.execute(sql, (list(ids),))}
    return [found[i] for i in ids if i in found]


def select_documents(
    conn: PgConnection, t: Tables, filter: dict[str, Any] | None, how: Listing = EVERY
) -> list[Document]:
    """Documents passing ``filter``, as ``how`` asks (oldest first unless newest first)."""
    where, params = scan_filter(filter)
    if how.source is not None:
        where += " AND c.source = %s"
        params.append(how.source)
    vec = "c.embedding" if how.with_embeddings else "NULL"
    order = "DESC" if how.newest_first else ""
    sql = f"SELECT {DOC_COLUMNS}, {vec} FROM {t.chunks} c WHERE {where} ORDER BY c.doc {order}"
    if how.limit is not None:
        sql += " LIMIT %s"
        params.append(max(0, int(how.limit)))
    return [to_document(row[:4], row[4]) for row in conn.execute(sql, params)]


def count(conn: PgConnection, t: Tables, filter: dict[str, Any] | None) -> int:
    """How many chunks pass ``filter``."""
    where, params = scan_filter(filter)
    if where == "TRUE":
        return int(one(conn.execute(f"SELECT n FROM {t.stats} WHERE id = 1"))[0])
    sql = f"SELECT count(*) FROM {t.chunks} c WHERE {where}"
    return int(one(conn.execute(sql, params))[0])


def sources(conn: PgConnection, t: Tables) -> list[tuple[str, int]]:
    """Each named source with its chunk count, sorted (code point order, as in Python)."""
    rows = conn.execute(
        f"SELECT source, chunks FROM {t.sources} WHERE source IS NOT NULL"
        ' ORDER BY source COLLATE "C"'
    ).fetchall()
    return [(s, int(n)) for s, n in rows]


def get_meta(conn: PgConnection, t: Tables, key: str) -> str | None:
    """A value of the meta table."""
    row = conn.execute(f"SELECT value FROM {t.meta} WHERE key = %s", (key,)).fetchone()
    return row[0] if row else None


def set_meta(conn: PgConnection, t: Tables, key: str, value: str) -> None:
    """Set a value of the meta table."""
    conn.execute(
        f"INSERT INTO {t.meta} VALUES (%s, %s)"
        " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        (key, value),
    )
