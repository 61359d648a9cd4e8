"""The file ledger (what ``kb ingest`` indexed from which file) and the embedding cache
(vectors by embedder and text hash) in PostgreSQL: the chunks' own vectors first (an index on
``text_hash``), then ``{table}_cache``, which keeps only the vectors of chunks that left the
index (and those ``cache_embeddings`` is given), oldest (``kept``) first out beyond as many as
the index holds chunks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kbcli.embedders.base import EmbedderInfo
from kbcli.stores import common
from kbcli.stores.common import KEEP_AT_LEAST, cache_key, pack_vector, text_hash, unpack_vector
from kbcli.stores.postgres.catalog import floats
from kbcli.stores.postgres.schema import Tables, one
from kbcli.stores.postgres.vectors import recorded_embedder
from kbcli.types import FileRecord

if TYPE_CHECKING:
    from kbcli.stores.postgres.schema import PgConnection


def records(conn: PgConnection, t: Tables) -> dict[str, FileRecord]:
    """Every file record, by path."""
    rows = conn.execute(f"SELECT {common.FILE_COLUMNS} FROM {t.files}")
    return {r[0]: common.file_record(r) for r in rows}


def records_of(conn: PgConnection, t: Tables, paths: Sequence[str]) -> dict[str, FileRecord]:
    """The records of those of ``paths`` that are recorded, by path (primary-key lookups)."""
    wanted = list(dict.fromkeys(paths))
    if not wanted:
        return {}
    rows = conn.execute(
        f"SELECT {common.FILE_COLUMNS} FROM {t.files} WHERE path = ANY(%s)", (wanted,)
    )
    return {r[0]: common.file_record(r) for r in rows}


def count(conn: PgConnection, t: Tables) -> int:
    """How many files are recorded."""
    return int(one(conn.execute(f"SELECT count(*) FROM {t.files}"))[0])


def put(conn: PgConnection, t: Tables, record: FileRecord) -> None:
    """Insert or replace a file record."""
    conn.execute(
        f"INSERT INTO {t.files} VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s)"
        " ON CONFLICT (path) DO UPDATE SET size = EXCLUDED.size, mtime_ns = EXCLUDED.mtime_ns,"
        " sha256 = EXCLUDED.sha256, settings = EXCLUDED.settings,"
        " chunk_ids = EXCLUDED.chunk_ids, indexed_at = EXCLUDED.indexed_at",
        common.file_row(record),
    )


def forget(conn: PgConnection, t: Tables, path: str) -> None:
    """Drop a file record."""
    conn.execute(f"DELETE FROM {t.files} WHERE path = %s", (path,))


def cached(
    conn: PgConnection, t: Tables, info: EmbedderInfo, texts: list[str]
) -> dict[str, list[float]]:
    """Vectors ``info``'s embedder already made for any of ``texts``, by text: a stored
    chunk's of the same text (when the index's vectors are ``info``'s), else a kept one."""
    by_hash = {text_hash(text): text for text in texts}
    if not by_hash:
        return {}
    key = cache_key(info)
    found: dict[str, list[float]] = {}
    recorded = recorded_embedder(conn, t)
    if recorded is not None and cache_key(recorded) == key:
        rows = conn.execute(
            f"SELECT text_hash, embedding FROM {t.chunks}"
            " WHERE text_hash = ANY(%s) AND embedding IS NOT NULL",
            (list(by_hash),),
        )
        for h, vec in rows:
            found.setdefault(by_hash[h], floats(vec))
    rest = [h for h, text in by_hash.items() if text not in found]
    if rest:
        rows = conn.execute(
            f"SELECT text_hash, vec FROM {t.cache} WHERE embedder = %s AND text_hash = ANY(%s)",
            (key, rest),
        )
        found.update((by_hash[h], unpack_vector(bytes(blob))) for h, blob in rows)
    return found


def remember(
    conn: PgConnection, t: Tables, info: EmbedderInfo, vectors: dict[str, list[float]]
) -> None:
    """Keep vectors by (embedder, text hash), the oldest dropped beyond :func:`trim`'s bound."""
    if not vectors:
        return
    _put(conn, t, cache_key(info), {text_hash(text): v for text, v in vectors.items()})
    trim(conn, t)


def _put(conn: PgConnection, t: Tables, key: str, vectors: dict[str, Any]) -> None:
    by_hash = {h: pack_vector(vec) for h, vec in vectors.items()}
    conn.execute(
        f"INSERT INTO {t.cache} (embedder, text_hash, vec)"
        " SELECT %s, h, v FROM unnest(%s::text[], %s::bytea[]) AS x(h, v)"
        " ON CONFLICT (embedder, text_hash) DO UPDATE SET vec = EXCLUDED.vec,"
        " kept = EXCLUDED.kept",
        (key, list(by_hash), list(by_hash.values())),
    )


def keep(conn: PgConnection, t: Tables, docs: list[int]) -> None:
    """Keep the vectors of the chunks ``docs``, which are about to leave the index (nothing
    when the index's embedder is not worth caching)."""
    recorded = recorded_embedder(conn, t)
    if recorded is None or not recorded.cache or not docs:
        return
    # (not a text another chunk still holds with a vector: the index serves that one)
    rows = conn.execute(
        f"SELECT c.text_hash, c.embedding FROM {t.chunks} c"
        " WHERE c.doc = ANY(%s) AND c.embedding IS NOT NULL AND NOT EXISTS"
        f" (SELECT 1 FROM {t.chunks} o WHERE o.text_hash = c.text_hash"
        "  AND o.embedding IS NOT NULL AND NOT (o.doc = ANY(%s)))",
        (list(docs), list(docs)),
    ).fetchall()
    if rows:
        _put(conn, t, cache_key(recorded), {h: floats(vec) for h, vec in rows})
        trim(conn, t)


def drop(conn: PgConnection, t: Tables, docs: list[int]) -> None:
    """Forget the kept vectors of the texts of ``docs``, chunks stored with a vector again."""
    recorded = recorded_embedder(conn, t)
    if recorded is None or not docs:
        return
    conn.execute(
        f"DELETE FROM {t.cache} WHERE embedder = %s AND text_hash IN"
        f" (SELECT text_hash FROM {t.chunks} WHERE doc = ANY(%s))",
        (cache_key(recorded), list(docs)),
    )


def trim(conn: PgConnection, t: Tables) -> None:
    """Drop the oldest kept vectors beyond as many as the index holds chunks (at least
    :data:`~kbcli.stores.common.KEEP_AT_LEAST`)."""
    low, high = one(conn.execute(f"SELECT min(kept), max(kept) FROM {t.cache}"))
    if low is None:
        return
    n = one(conn.execute(f"SELECT n FROM {t.stats} WHERE id = 1"))[0]
    limit = max(KEEP_AT_LEAST, int(n))
    if high - low + 1 <= limit:  # kept only grows: the span bounds the count, cheaply
        return
    extra = one(conn.execute(f"SELECT count(*) FROM {t.cache}"))[0] - limit
    if extra > 0:
        conn.execute(
            f"DELETE FROM {t.cache} WHERE kept IN"
            f" (SELECT kept FROM {t.cache} ORDER BY kept LIMIT %s)",
            (extra,),
        )
