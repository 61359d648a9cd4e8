"""The document catalog in SQLite: ``chunks`` rows, source identities and the ``meta`` table.

Writers call these functions inside :meth:`Database.transaction`; the keyword and vector
modules keep their own tables in step in the same transaction.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kbcli.filters.model import ensure_checked
from kbcli.filters.sql import compile_sql, dumps_metadata, source_ranges
from kbcli.stores.common import text_hash, unpack_vector
from kbcli.stores.parts import EVERY, Listing
from kbcli.text.bm25 import ChunkTerms
from kbcli.types import Document

BATCH = 500  # ids per IN (...) list
DOC_COLUMNS = "c.id, c.text, c.metadata, c.created_at"
ALLOWED_CACHE = 8  # filters whose allowed rowids a store keeps (AllowedRowids)


@dataclass(frozen=True)
class ChunkRow:
    """What a delete needs to know about a stored chunk."""

    doc: int
    length: int
    terms: bytes
    src: int


def _batches(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), BATCH):
        yield items[start : start + BATCH]


def to_document(row: Sequence[Any], vec: bytes | None = None) -> Document:
    """A Document from ``(id, text, metadata, created_at)`` and an optional vector blob."""
    return Document(
        id=row[0],
        text=row[1],
        metadata=json.loads(row[2]),
        created_at=datetime.fromisoformat(row[3]),
        embedding=unpack_vector(vec) if vec is not None else None,
    )


NARROW_TAG = 1  # first byte of a narrow forward index (see pack_terms)
_SWAP = sys.byteorder == "big"  # the blobs are little-endian on every machine


def pack_terms(counts: dict[int, int]) -> bytes:
    """The forward index of a chunk, narrow: a tag byte (:data:`NARROW_TAG`), the term ids as
    uint32, then their tfs as uint16, all little-endian: 6 bytes a term and an odd length.

    A chunk with a term id or a tf too big for those is written wide, as int64 (term id, tf)
    pairs: the only encoding before (16 bytes a term, an even length). Both are read by
    :func:`unpack_terms` and the pack builder (:func:`.packfile.term_pairs`), so an index
    written by an older kbcli keeps working and gets narrow rows as chunks are rewritten."""
    if not counts:
        return b""
    try:
        ids, tfs = array("I", counts), array("H", counts.values())
    except OverflowError:
        return _pack_wide(counts)
    if _SWAP:
        ids.byteswap()
        tfs.byteswap()
    return b"\x01" + ids.tobytes() + tfs.tobytes()


def _pack_wide(counts: dict[int, int]) -> bytes:
    flat = array("q")
    for term_id, tf in counts.items():
        flat.append(term_id)
        flat.append(tf)
    if _SWAP:
        flat.byteswap()
    return flat.tobytes()


def unpack_terms(blob: bytes) -> dict[int, int]:
    """The (term id -> tf) pairs of :func:`pack_terms`, of either encoding."""
    if len(blob) % 2 == 0:
        flat = array("q")
        flat.frombytes(blob)
        if _SWAP:
            flat.byteswap()
        return dict(zip(flat[0::2], flat[1::2]))
    if blob[0] != NARROW_TAG:
        raise ValueError(f"a forward index of unknown encoding (first byte {blob[0]})")
    n = (len(blob) - 1) // 6
    ids, tfs = array("I"), array("H")
    ids.frombytes(blob[1 : 1 + 4 * n])
    tfs.frombytes(blob[1 + 4 * n :])
    if _SWAP:
        ids.byteswap()
        tfs.byteswap()
    return dict(zip(ids, tfs))


# --- writes ---------------------------------------------------------------------------------


def source_ids(conn: sqlite3.Connection, names: Sequence[str | None], new: set[int]) -> list[int]:
    """The ``sources`` row of each of ``names``, created (empty) when missing, in the order
    first met; ``new`` collects those. A chunk without a source (None) gets a source of its
    own. One lookup and one insert for all of them."""
    known: dict[str, int] = {}
    wanted = list(dict.fromkeys(n for n in names if n is not None))
    for part in _batches(wanted):
        marks = ",".join("?" * len(part))
        sql = f"SELECT source, id FROM sources WHERE source IN ({marks})"
        known.update(conn.execute(sql, part))
    next_id = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM sources").fetchone()[0]
    created: list[tuple[int, str | None]] = []
    out: list[int] = []
    for name in names:
        src = known.get(name) if name is not None else None
        if src is None:
            src = next_id + len(created)  # the id SQLite would give: max + 1
            created.append((src, name))
            if name is not None:
                known[name] = src
        out.append(src)
    sql = "INSERT INTO sources (id, source, length, chunks) VALUES (?, ?, 0, 0)"
    conn.executemany(sql, created)
    new.update(src for src, _ in created)
    return out


def insert(
    conn: sqlite3.Connection, rows: list[tuple[Document, Any, dict[int, int]]]
) -> tuple[list[ChunkTerms], set[int]]:
    """Insert chunk rows ``(doc, vector, tf by term id)`` with their forward indexes (vectors
    go to the ``vectors`` table, not here); returns each row's :class:`ChunkTerms` and the
    sources created for them. One statement for all rows: each gets the rowid SQLite would
    give it (max + 1, in order)."""
    new_sources: set[int] = set()
    names = [_source_name(doc) for doc, _, _ in rows]
    srcs = source_ids(conn, names, new_sources)
    first = conn.execute("SELECT coalesce(max(doc), 0) + 1 FROM chunks").fetchone()[0]
    conn.executemany(
        "INSERT INTO chunks (doc, id, text, metadata, created_at, source, text_hash, length,"
        " terms, src) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            (
                first + i,
                doc.id,
                doc.text,
                dumps_metadata(doc.metadata),
                doc.created_at.isoformat(),
                name,
                text_hash(doc.text),
                sum(tf.values()),
                pack_terms(tf),
                src,
            )
            for i, ((doc, _, tf), name, src) in enumerate(zip(rows, names, srcs))
        ),
    )
    chunks = [ChunkTerms(first + i, src, tf) for i, ((_, _, tf), src) in enumerate(zip(rows, srcs))]
    return chunks, new_sources


def _source_name(doc: Document) -> str | None:
    source = doc.metadata.get("source")
    return str(source) if source is not None else None


def overflow(conn: sqlite3.Connection) -> list[ChunkRow]:
    """Rows to evict after an insert: none (the catalog is unbounded)."""
    return []


def delete_rows(conn: sqlite3.Connection, docs: Iterable[int]) -> None:
    """Delete chunk rows by rowid."""
    conn.executemany("DELETE FROM chunks WHERE doc = ?", ((d,) for d in docs))


def rowids(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, int]:
    """The row id of each chunk among ``ids`` that is in the index."""
    found: dict[str, int] = {}
    for part in _batches(list(dict.fromkeys(ids))):
        marks = ",".join("?" * len(part))
        found.update(conn.execute(f"SELECT id, doc FROM chunks WHERE id IN ({marks})", part))
    return found


def rows_by_ids(conn: sqlite3.Connection, ids: Sequence[str]) -> list[ChunkRow]:
    """The rows of the chunks among ``ids``."""
    rows: list[ChunkRow] = []
    for part in _batches(list(dict.fromkeys(ids))):
        marks = ",".join("?" * len(part))
        rows.extend(
            ChunkRow(*r)
            for r in conn.execute(
                f"SELECT doc, length, terms, src FROM chunks WHERE id IN ({marks})", part
            )
        )
    return rows


def scan_where(filter: dict[str, Any] | None, alias: str = "") -> tuple[str, list[Any]]:
    """``(sql, params)`` testing ``filter`` on ``{alias}metadata``, for a statement that would
    read every chunk. When the filter pins ``source`` to text values or prefixes (``kb search
    --in``, an access scope), a range on the indexed ``source`` column leads, so SQLite reads
    only those sources' rows; the filter itself is still tested on each."""
    where, params = compile_sql(filter, f"{alias}metadata")
    ranges = source_ranges(filter, f"{alias}source", "?")
    if ranges is None:
        return where, params
    return f"{ranges[0]} AND {where}", [*ranges[1], *params]


def rows_by_source(conn: sqlite3.Connection, source: str) -> list[ChunkRow]:
    """The rows of every chunk of ``source``."""
    sql = "SELECT doc, length, terms, src FROM chunks WHERE source = ?"
    return [ChunkRow(*r) for r in conn.execute(sql, (source,))]


def rows_where(conn: sqlite3.Connection, filter: dict[str, Any] | None) -> list[ChunkRow]:
    """The rows of every chunk passing ``filter``."""
    where, params = scan_where(ensure_checked(filter))
    sql = f"SELECT doc, length, terms, src FROM chunks WHERE {where}"
    return [ChunkRow(*r) for r in conn.execute(sql, params)]


# --- reads ----------------------------------------------------------------------------------


def documents_by_rowid(conn: sqlite3.Connection, rowids: Sequence[int]) -> dict[int, Document]:
    """Documents by rowid (without vectors)."""
    out: dict[int, Document] = {}
    for part in _batches(list(rowids)):
        marks = ",".join("?" * len(part))
        for row in conn.execute(
            f"SELECT c.doc, {DOC_COLUMNS} FROM chunks c WHERE c.doc IN ({marks})", part
        ):
            out[row[0]] = to_document(row[1:])
    return out


def metadata_by_rowid(conn: sqlite3.Connection, rowids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Metadata by rowid."""
    out: dict[int, dict[str, Any]] = {}
    for part in _batches(list(rowids)):
        marks = ",".join("?" * len(part))
        for doc, meta in conn.execute(
            f"SELECT doc, metadata FROM chunks WHERE doc IN ({marks})", part
        ):
            out[doc] = json.loads(meta)
    return out


def passing(conn: sqlite3.Connection, rowids: Sequence[int], filter: dict[str, Any]) -> set[int]:
    """Which of ``rowids`` pass ``filter`` (checked in SQL)."""
    where, params = compile_sql(filter, "c.metadata")
    out: set[int] = set()
    for part in _batches(list(rowids)):
        marks = ",".join("?" * len(part))
        sql = f"SELECT c.doc FROM chunks c WHERE c.doc IN ({marks}) AND {where}"
        out.update(r[0] for r in conn.execute(sql, [*part, *params]))
    return out


def rowids_where(conn: sqlite3.Connection, filter: dict[str, Any]) -> list[int]:
    """Rowids of every chunk passing ``filter``."""
    where, params = scan_where(filter)
    return [r[0] for r in conn.execute(f"SELECT doc FROM chunks WHERE {where}", params)]


class AllowedRowids:
    """:func:`rowids_where` for the last few filters, kept while the database's generation
    holds (every commit bumps it, so an entry never outlives the chunks it was read from).

    A filter that lets few chunks through falls back to its allowed set on every dense search,
    and a hybrid search asks for it twice (keyword and dense); without this each would read
    every chunk's metadata again (about 0.9 s at 1M chunks). One per store, shared by its
    keyword index and its dense search."""

    def __init__(self, size: int = ALLOWED_CACHE):
        self.size = size
        self.scans = 0  # how many times the table was read (tests, stats)
        self._entries: dict[tuple[str, int, str], array[int]] = {}

    def _key(self, conn: sqlite3.Connection, filter: dict[str, Any]) -> tuple[str, int, str]:
        # the index's id too: another index moved over this file may count the same generation
        generation, index = conn.execute(
            "SELECT generation, (SELECT value FROM meta WHERE key = 'index_id') FROM stats "
            "WHERE id = 1"
        ).fetchone()
        return json.dumps(filter, sort_keys=True, default=str), int(generation), str(index)

    def peek(self, conn: sqlite3.Connection, filter: dict[str, Any]) -> array[int] | None:
        """The kept rowids of ``filter`` for ``conn``'s snapshot, or None (nothing is read)."""
        return self._entries.get(self._key(conn, filter))

    def get(self, conn: sqlite3.Connection, filter: dict[str, Any]) -> array[int]:
        """The rowids passing ``filter`` in ``conn``'s snapshot (int64, ascending)."""
        key = self._key(conn, filter)
        found = self._entries.pop(key, None)
        if found is None:
            found = array("q", sorted(rowids_where(conn, filter)))
            self.scans += 1
            for old in [k for k in self._entries if k[1:] != key[1:]]:
                del self._entries[old]  # another generation: never asked for again, mostly
            while len(self._entries) >= self.size:
                del self._entries[next(iter(self._entries))]
        self._entries[key] = found  # the most recently used last
        return found


def get(conn: sqlite3.Connection, ids: Sequence[str], with_embeddings: bool) -> list[Document]:
    """The documents among ``ids`` in the order asked."""
    found: dict[str, Document] = {}
    vec = "v.vec" if with_embeddings else "NULL"
    for part in _batches(list(ids)):
        marks = ",".join("?" * len(part))
        sql = (
            f"SELECT {DOC_COLUMNS}, {vec} FROM chunks c LEFT JOIN vectors v ON v.doc = c.doc"
            f" WHERE c.id IN ({marks})"
        )
        for row in conn.execute(sql, part):
            found[row[0]] = to_document(row[:4], row[4])
    return [found[i] for i in ids if i in found]


def select_documents(
    conn: sqlite3.Connection, filter: dict[str, Any] | None, how: Listing = EVERY
) -> list[Document]:
    """Documents passing ``filter``, as ``how`` asks (oldest first unless newest first)."""
    filter = ensure_checked(filter)
    source, limit, with_embeddings = how.source, how.limit, how.with_embeddings
    # With a limit, a scan in rowid order may stop early: the source range would sort first.
    where, params = (
        compile_sql(filter, "c.metadata") if limit is not None else scan_where(filter, "c.")
    )
    if source is not None:
        where += " AND c.source = ?"
        params.append(source)
    vec = "v.vec" if with_embeddings else "NULL"
    join = " LEFT JOIN vectors v ON v.doc = c.doc" if with_embeddings else ""
    order = "DESC" if how.newest_first else ""
    sql = f"SELECT {DOC_COLUMNS}, {vec} FROM chunks c{join} WHERE {where} ORDER BY c.doc {order}"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(int(limit))
    return [to_document(row[:4], row[4]) for row in conn.execute(sql, params)]


def count(conn: sqlite3.Connection, filter: dict[str, Any] | None) -> int:
    """How many chunks pass ``filter``."""
    filter = ensure_checked(filter)
    if not filter:
        return int(conn.execute("SELECT n FROM stats WHERE id = 1").fetchone()[0])
    where, params = scan_where(filter)
    return int(conn.execute(f"SELECT count(*) FROM chunks WHERE {where}", params).fetchone()[0])


def sources(conn: sqlite3.Connection) -> list[tuple[str, int]]:
    """Each named source with its chunk count, sorted."""
    return conn.execute(
        "SELECT source, chunks FROM sources WHERE source IS NOT NULL ORDER BY source"
    ).fetchall()


def named_sources(conn: sqlite3.Connection) -> int:
    """How many named sources there are."""
    return len(sources(conn))


def totals(conn: sqlite3.Connection) -> tuple[int, int]:
    """How many chunks, and their total length in terms."""
    n, total = conn.execute("SELECT n, total_length FROM stats WHERE id = 1").fetchone()
    return n, total


def get_meta(conn: sqlite3.Connection, key: str) -> str | None:
    """A value of the ``meta`` table."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    """Set a value of the ``meta`` table."""
    conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))
