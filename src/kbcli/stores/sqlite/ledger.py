"""The file ledger (``files``: what ``kb ingest`` indexed from which file) and the embedding
cache (``embedding_cache``: vectors by embedder and text hash)."""

from __future__ import annotations

import sqlite3

from ...embedders.base import EmbedderInfo
from ...types import FileRecord
from ..common import (
    FILE_COLUMNS,
    cache_key,
    file_record,
    file_row,
    pack_vector,
    text_hash,
    unpack_vector,
)
from .catalog import BATCH


def records(conn: sqlite3.Connection) -> dict[str, FileRecord]:
    """Every file record, by path."""
    rows = conn.execute(f"SELECT {FILE_COLUMNS} FROM files")
    return {r[0]: file_record(r) for r in rows}


def count(conn: sqlite3.Connection) -> int:
    """How many files are recorded."""
    return conn.execute("SELECT count(*) FROM files").fetchone()[0]


def put(conn: sqlite3.Connection, record: FileRecord) -> None:
    """Insert or replace a file record."""
    conn.execute(
        "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?)", file_row(record)
    )


def forget(conn: sqlite3.Connection, path: str) -> None:
    """Drop a file record."""
    conn.execute("DELETE FROM files WHERE path = ?", (path,))


def cached(
    conn: sqlite3.Connection, info: EmbedderInfo, texts: list[str]
) -> dict[str, list[float]]:
    """Vectors ``info``'s embedder already made for any of ``texts``, by text."""
    key = cache_key(info)
    by_hash = {text_hash(t): t for t in texts}
    hashes = list(by_hash)
    found: dict[str, list[float]] = {}
    for start in range(0, len(hashes), BATCH):
        part = hashes[start : start + BATCH]
        marks = ",".join("?" * len(part))
        for h, blob in conn.execute(
            "SELECT text_hash, vec FROM embedding_cache"
            f" WHERE embedder = ? AND text_hash IN ({marks})",
            [key, *part],
        ):
            found[by_hash[h]] = unpack_vector(blob)
    return found


def remember(conn: sqlite3.Connection, info: EmbedderInfo, vectors: dict[str, list[float]]) -> None:
    """Store vectors by (embedder, text hash)."""
    key = cache_key(info)
    conn.executemany(
        "INSERT OR REPLACE INTO embedding_cache VALUES (?, ?, ?)",
        ((key, text_hash(t), pack_vector(v)) for t, v in vectors.items()),
    )
