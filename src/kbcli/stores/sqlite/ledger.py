"""The file ledger (``files``: what ``kb ingest`` indexed from which file) and the embedding
cache: vectors by embedder and text hash.

The index's own vectors are the first cache: a chunk of the same text with a vector of the same
embedder (``chunks.text_hash``, indexed, joined to ``vectors``). The ``embedding_cache`` table
keeps only what the index no longer holds: the vectors of chunks as they leave it (a file
edited, deleted, moved away) and what ``cache_embeddings`` is given, oldest dropped first beyond
:func:`bound` (as many as the index holds chunks, at least ``KEEP_AT_LEAST``). An index
whose embedder is cheaper to run again than to cache (the built-in one) keeps nothing.
Schema 5 cached every vector a second time, in ``WITHOUT ROWID`` rows of about 4.7 KB for a
1.5 KB vector: three times the vectors it cached."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from kbcli.embedders.base import EmbedderInfo
from kbcli.stores.common import (
    FILE_COLUMNS,
    KEEP_AT_LEAST,
    cache_key,
    file_record,
    file_row,
    pack_vector,
    text_hash,
    unpack_vector,
)
from kbcli.stores.sqlite.catalog import BATCH
from kbcli.stores.sqlite.vectors import recorded_embedder
from kbcli.types import FileRecord


def records(conn: sqlite3.Connection) -> dict[str, FileRecord]:
    """Every file record, by path."""
    rows = conn.execute(f"SELECT {FILE_COLUMNS} FROM files")
    return {r[0]: file_record(r) for r in rows}


def records_of(conn: sqlite3.Connection, paths: Sequence[str]) -> dict[str, FileRecord]:
    """The records of those of ``paths`` that are recorded, by path (the primary key: one
    lookup each, never a scan)."""
    found: dict[str, FileRecord] = {}
    wanted = list(dict.fromkeys(paths))
    for start in range(0, len(wanted), BATCH):
        part = wanted[start : start + BATCH]
        marks = ", ".join("?" * len(part))
        rows = conn.execute(f"SELECT {FILE_COLUMNS} FROM files WHERE path IN ({marks})", part)
        found.update((r[0], file_record(r)) for r in rows)
    return found


def count(conn: sqlite3.Connection) -> int:
    """How many files are recorded."""
    return int(conn.execute("SELECT count(*) FROM files").fetchone()[0])


def put(conn: sqlite3.Connection, record: FileRecord) -> None:
    """Insert or replace a file record."""
    conn.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?)", file_row(record))


def forget(conn: sqlite3.Connection, path: str) -> None:
    """Drop a file record."""
    conn.execute("DELETE FROM files WHERE path = ?", (path,))


def cached(
    conn: sqlite3.Connection, info: EmbedderInfo, texts: list[str]
) -> dict[str, list[float]]:
    """Vectors ``info``'s embedder already made for any of ``texts``, by text: a stored
    chunk's of the same text (when the index's vectors are ``info``'s), else a kept one."""
    key = cache_key(info)
    by_hash = {text_hash(t): t for t in texts}
    found: dict[str, list[float]] = {}
    recorded = recorded_embedder(conn)
    if recorded is not None and cache_key(recorded) == key:
        _lookup(conn, by_hash, found, "SELECT c.text_hash, v.vec FROM chunks c"
                " JOIN vectors v ON v.doc = c.doc WHERE c.text_hash IN ({marks})", ())  # fmt: skip
    rest = {h: t for h, t in by_hash.items() if t not in found}
    _lookup(conn, rest, found, "SELECT text_hash, vec FROM embedding_cache"
            " WHERE embedder = ? AND text_hash IN ({marks})", (key,))  # fmt: skip
    return found


def _lookup(
    conn: sqlite3.Connection,
    by_hash: dict[str, str],
    found: dict[str, list[float]],
    sql: str,
    args: tuple[Any, ...],
) -> None:
    hashes = list(by_hash)
    for start in range(0, len(hashes), BATCH):
        part = hashes[start : start + BATCH]
        marks = ",".join("?" * len(part))
        for h, blob in conn.execute(sql.format(marks=marks), [*args, *part]):
            found.setdefault(by_hash[h], unpack_vector(blob))


def remember(conn: sqlite3.Connection, info: EmbedderInfo, vectors: dict[str, list[float]]) -> None:
    """Keep vectors by (embedder, text hash), the oldest dropped beyond :func:`bound`."""
    key = cache_key(info)
    conn.executemany(
        "INSERT OR REPLACE INTO embedding_cache (embedder, text_hash, vec) VALUES (?, ?, ?)",
        ((key, text_hash(t), pack_vector(v)) for t, v in vectors.items()),
    )
    trim(conn)


def keep(conn: sqlite3.Connection, docs: list[int]) -> None:
    """Keep the vectors of the chunks ``docs``, which are about to leave the index (nothing
    when the index's embedder is not worth caching)."""
    recorded = recorded_embedder(conn)
    if recorded is None or not recorded.cache or not docs:
        return
    key = cache_key(recorded)
    for start in range(0, len(docs), BATCH):
        part = docs[start : start + BATCH]
        marks = ",".join("?" * len(part))
        # (not a text another chunk still holds with a vector: the index serves that one)
        conn.execute(
            "INSERT OR REPLACE INTO embedding_cache (embedder, text_hash, vec)"
            " SELECT ?, c.text_hash, v.vec FROM chunks c JOIN vectors v ON v.doc = c.doc"
            f" WHERE c.doc IN ({marks}) AND NOT EXISTS (SELECT 1 FROM chunks o"
            "  JOIN vectors w ON w.doc = o.doc"
            f"  WHERE o.text_hash = c.text_hash AND o.doc NOT IN ({marks}))",
            [key, *part, *part],
        )
    trim(conn)


def drop(conn: sqlite3.Connection, docs: list[int]) -> None:
    """Forget the kept vectors of the texts of ``docs``, chunks the index holds with a vector
    again (the index serves them)."""
    recorded = recorded_embedder(conn)
    if recorded is None or not docs:
        return
    key = cache_key(recorded)
    for start in range(0, len(docs), BATCH):
        part = docs[start : start + BATCH]
        marks = ",".join("?" * len(part))
        conn.execute(
            "DELETE FROM embedding_cache WHERE embedder = ? AND text_hash IN"
            f" (SELECT text_hash FROM chunks WHERE doc IN ({marks}))",
            [key, *part],
        )


def bound(conn: sqlite3.Connection) -> int:
    """How many vectors the table keeps at most: as many as the index holds chunks (one row
    of ``stats``, where counting the vectors would read them all), at least
    :data:`KEEP_AT_LEAST`."""
    return max(KEEP_AT_LEAST, int(conn.execute("SELECT n FROM stats WHERE id = 1").fetchone()[0]))


def trim(conn: sqlite3.Connection) -> None:
    """Drop the oldest kept vectors beyond :func:`bound`."""
    low, high = conn.execute("SELECT min(id), max(id) FROM embedding_cache").fetchone()
    if low is None:
        return
    limit = bound(conn)
    if high - low + 1 <= limit:  # ids only grow: the span bounds the count, cheaply
        return
    extra = conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0] - limit
    if extra > 0:
        conn.execute(
            "DELETE FROM embedding_cache WHERE id IN"
            " (SELECT id FROM embedding_cache ORDER BY id LIMIT ?)",
            (extra,),
        )
