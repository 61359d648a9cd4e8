"""The file ledger (what ``kb ingest`` indexed from which file) and the embedding cache
(vectors by embedder and text hash) in PostgreSQL."""

from __future__ import annotations

from typing import Any

from ...embedders.base import EmbedderInfo
from ...types import FileRecord
from .. import common
from ..common import cache_key, pack_vector, text_hash, unpack_vector
from .schema import Tables


def records(conn: Any, t: Tables) -> dict[str, FileRecord]:
    """Every file record, by path."""
    rows = conn.execute(f"SELECT {common.FILE_COLUMNS} FROM {t.files}")
    return {r[0]: common.file_record(r) for r in rows}


def count(conn: Any, t: Tables) -> int:
    """How many files are recorded."""
    return conn.execute(f"SELECT count(*) FROM {t.files}").fetchone()[0]


def put(conn: Any, t: Tables, record: FileRecord) -> None:
    """Insert or replace a file record."""
    conn.execute(
        f"INSERT INTO {t.files} VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s)"
        " ON CONFLICT (path) DO UPDATE SET size = EXCLUDED.size, mtime_ns = EXCLUDED.mtime_ns,"
        " sha256 = EXCLUDED.sha256, settings = EXCLUDED.settings,"
        " chunk_ids = EXCLUDED.chunk_ids, indexed_at = EXCLUDED.indexed_at",
        common.file_row(record),
    )


def forget(conn: Any, t: Tables, path: str) -> None:
    """Drop a file record."""
    conn.execute(f"DELETE FROM {t.files} WHERE path = %s", (path,))


def cached(conn: Any, t: Tables, info: EmbedderInfo, texts: list[str]) -> dict[str, list[float]]:
    """Vectors ``info``'s embedder already made for any of ``texts``, by text."""
    by_hash = {text_hash(text): text for text in texts}
    if not by_hash:
        return {}
    rows = conn.execute(
        f"SELECT text_hash, vec FROM {t.cache} WHERE embedder = %s AND text_hash = ANY(%s)",
        (cache_key(info), list(by_hash)),
    )
    return {by_hash[h]: unpack_vector(bytes(blob)) for h, blob in rows}


def remember(conn: Any, t: Tables, info: EmbedderInfo, vectors: dict[str, list[float]]) -> None:
    """Store vectors by (embedder, text hash)."""
    if not vectors:
        return
    by_hash = {text_hash(text): pack_vector(vec) for text, vec in vectors.items()}
    conn.execute(
        f"INSERT INTO {t.cache} (embedder, text_hash, vec)"
        " SELECT %s, h, v FROM unnest(%s::text[], %s::bytea[]) AS x(h, v)"
        " ON CONFLICT (embedder, text_hash) DO UPDATE SET vec = EXCLUDED.vec",
        (cache_key(info), list(by_hash), list(by_hash.values())),
    )
