"""Vectors in a pgvector ``vector`` column, the embedder they came from, and dense search.

The column starts untyped; the first vectors fix it to ``vector(d)`` and create an HNSW index
with ``vector_cosine_ops`` (pgvector indexes up to 2000 dimensions; above that search is an
exact scan). A filtered search runs inside the index with pgvector 0.8's iterative scans
(``hnsw.iterative_scan = relaxed_order``), so the filter applies during the walk, and falls back
to an exact scan of the allowed rows when the walk ends with fewer than ``k`` hits: a search
returns ``min(k, allowed rows with vectors)`` hits, never a post-filtered top ``k``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kbcli.embedders.base import EmbedderInfo
from kbcli.errors import IndexMismatchError
from kbcli.stores.common import check_embedder
from kbcli.stores.postgres.catalog import vector_text
from kbcli.stores.postgres.filters import scan_filter
from kbcli.stores.postgres.schema import Tables, one

if TYPE_CHECKING:
    from kbcli.stores.postgres.schema import PgConnection

HNSW_MAX_DIM = 2000
EF_SEARCH_MAX = 1000
# Candidates the HNSW walk keeps (pgvector's default is 40). On 384-d random vectors, the worst
# case for any graph index, recall@5 is about 0.3 at 40, 0.55 at 100 and 0.9 at 400; real
# embeddings cluster and do much better (benchmarks/bench_postgres.py).
EF_SEARCH = 100


def recorded_embedder(conn: PgConnection, t: Tables) -> EmbedderInfo | None:
    """The embedder recorded with the index's vectors."""
    row = conn.execute(f"SELECT value FROM {t.meta} WHERE key = 'embedder'").fetchone()
    if row is None:
        return None
    data = json.loads(row[0])
    return EmbedderInfo(
        data["provider"], data["model"], data.get("dimension"), cache=data.get("cache", True)
    )


def record_embedder(
    conn: PgConnection, t: Tables, info: EmbedderInfo, dim: int, where: str
) -> None:
    """Record ``info`` with the first vectors; later vectors must come from the same model.
    Whether its vectors are worth caching (``info.cache``) is recorded too, and kept current."""
    recorded = recorded_embedder(conn, t)
    if recorded is not None and (recorded.provider, recorded.model) != (
        info.provider,
        info.model,
    ):
        check_embedder(recorded, EmbedderInfo(info.provider, info.model, dim), where)
    if recorded is None or recorded.cache != info.cache:
        value: dict[str, Any] = {"provider": info.provider, "model": info.model, "dimension": dim}
        if recorded is not None and recorded.dimension:
            value["dimension"] = recorded.dimension
        if not info.cache:
            value["cache"] = False
        conn.execute(
            f"INSERT INTO {t.meta} VALUES ('embedder', %s)"
            " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (json.dumps(value),),
        )


def column_dimension(conn: PgConnection, t: Tables) -> int | None:
    """The declared dimension of the ``embedding`` column (None while untyped)."""
    row = conn.execute(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass"
        " AND attname = 'embedding'",
        (t.chunks,),
    ).fetchone()
    return int(row[0]) if row and row[0] > 0 else None


def has_vectors(conn: PgConnection, t: Tables) -> bool:
    return (
        conn.execute(f"SELECT 1 FROM {t.chunks} WHERE embedding IS NOT NULL LIMIT 1").fetchone()
        is not None
    )


def set_dimension(conn: PgConnection, t: Tables, dim: int, *, hnsw: bool) -> None:
    """Type the column ``vector(dim)`` (every stored vector must be NULL) and index it."""
    conn.execute(f"DROP INDEX IF EXISTS {t.hnsw}")
    conn.execute(
        f"ALTER TABLE {t.chunks} ALTER COLUMN embedding TYPE vector({int(dim)}) USING NULL"
    )
    if hnsw:
        create_index(conn, t, dim)


def create_index(conn: PgConnection, t: Tables, dim: int) -> None:
    """The HNSW cosine index (pgvector indexes up to 2000 dimensions; above, searches scan)."""
    if dim <= HNSW_MAX_DIM:
        conn.execute(
            f"CREATE INDEX IF NOT EXISTS {t.hnsw} ON {t.chunks}"
            " USING hnsw (embedding vector_cosine_ops)"
        )


def ensure_dimension(
    conn: PgConnection, t: Tables, dim: int, where: str, *, hnsw: bool, bulk: bool = False
) -> bool:
    """Refuse vectors of another length than the stored ones; type the column on first use.
    With ``bulk`` a newly typed column gets its index later (:func:`create_index` after the
    rows are in: building it once is far faster than growing it row by row); returns whether
    the caller must create it."""
    current = column_dimension(conn, t)
    if current == dim:
        return False
    if current is not None and has_vectors(conn, t):
        raise IndexMismatchError(
            f"New vectors have {dim} dimensions but the index {t.base} at {where} has "
            f"{current}: use the embedder that built it or 'kb ingest --rebuild'"
        )
    set_dimension(conn, t, dim, hnsw=hnsw and not bulk)
    return hnsw and bulk


def indexed(conn: PgConnection, t: Tables) -> bool:
    """True when the HNSW index exists (searches may then be approximate)."""
    return one(conn.execute("SELECT to_regclass(%s)", (t.hnsw,)))[0] is not None


def search(
    conn: PgConnection,
    t: Tables,
    query: Sequence[float],
    k: int,
    filter: dict[str, Any] | None,
    *,
    ef_search: int = EF_SEARCH,
    iterative: bool = True,
    exact: bool = False,
) -> list[tuple[int, float]]:
    """``(doc, cosine)`` of the ``k`` nearest vectors passing ``filter``, best first, ties by
    doc; ``exact`` scans every vector instead of walking the HNSW index. Runs inside a read
    transaction (the settings are ``SET LOCAL``)."""
    import numpy as np

    if k <= 0:
        return []
    dim = column_dimension(conn, t)
    if dim is None:
        return []
    if len(query) != dim:
        raise IndexMismatchError(
            f"The query vector has {len(query)} dimensions but the index {t.base} has {dim}: "
            "use the embedder that built it"
        )
    vec = np.asarray(query, dtype=np.float32)
    where, params = scan_filter(filter)

    def nearest(distance: str) -> str:
        return (
            f"SELECT c.doc, {distance} AS distance FROM {t.chunks} c"
            f" WHERE c.embedding IS NOT NULL AND {where} ORDER BY distance LIMIT %s"
        )

    # The exact form orders by an expression the HNSW index cannot serve: turning index scans
    # off (SET LOCAL) would not reach a plan psycopg has prepared after a few calls, which then
    # walked the index again. Any other index (the source range) stays usable.
    indexed_sql = nearest("c.embedding <=> %s")
    exact_sql = nearest("(c.embedding <=> %s) + 0.0::float8")
    args = [vec, *params, int(k)]
    if exact:
        rows = conn.execute(exact_sql, args).fetchall()
        return sorted(((int(d), _score(x)) for d, x in rows), key=lambda h: (-h[1], h[0]))
    conn.execute(f"SET LOCAL hnsw.ef_search = {min(EF_SEARCH_MAX, max(int(ef_search), int(k)))}")
    if iterative:
        conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
    rows = conn.execute(indexed_sql, args).fetchall()
    if len(rows) < k and indexed(conn, t):
        # The walk ended early (very selective filter): an exact scan of the allowed rows.
        rows = conn.execute(exact_sql, args).fetchall()
    hits = [(int(doc), _score(distance)) for doc, distance in rows]
    hits.sort(key=lambda h: (-h[1], h[0]))  # relaxed order: sort the k found exactly
    return hits


def _score(distance: float | None) -> float:
    if distance is None or math.isnan(distance):
        return 0.0  # a zero vector has no direction
    return 1.0 - float(distance)


# --- re-embedding: a staging table, committed batch by batch (Store.reembed) -----------------


def stage(conn: PgConnection, t: Tables, target: str) -> None:
    """Create the staging table; empty it unless it holds vectors for ``target``."""
    conn.execute(f"CREATE TABLE IF NOT EXISTS {t.staging} (doc bigint PRIMARY KEY, vec vector)")
    row = conn.execute(f"SELECT value FROM {t.meta} WHERE key = 'reembed_target'").fetchone()
    if row is None or row[0] != target:
        conn.execute(f"TRUNCATE {t.staging}")
        conn.execute(
            f"INSERT INTO {t.meta} VALUES ('reembed_target', %s)"
            " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (target,),
        )


def unstaged(conn: PgConnection, t: Tables) -> tuple[list[tuple[int, str]], int]:
    """The chunks without a staged vector, and how many chunks there are."""
    todo = conn.execute(
        f"SELECT doc, text FROM {t.chunks} WHERE doc NOT IN (SELECT doc FROM {t.staging})"
        " ORDER BY doc"
    ).fetchall()
    return todo, one(conn.execute(f"SELECT count(*) FROM {t.chunks}"))[0]


def put(conn: PgConnection, t: Tables, rows: list[tuple[int, Any]]) -> None:
    """Store the vectors of chunks already written (by ``doc``); a chunk that holds that
    vector already (the catalog wrote it with its row) is not rewritten."""
    conn.execute(
        f"UPDATE {t.chunks} AS c SET embedding = x.vec::vector"
        " FROM unnest(%s::bigint[], %s::text[]) AS x(doc, vec)"
        " WHERE c.doc = x.doc AND c.embedding IS DISTINCT FROM x.vec::vector",
        ([doc for doc, _ in rows], [vector_text(v) for _, v in rows]),
    )


def put_staged(
    conn: PgConnection, t: Tables, rows: list[tuple[int, str]], vectors: list[list[float]]
) -> None:
    """Stage vectors of ``rows``."""
    conn.execute(
        f"INSERT INTO {t.staging} SELECT doc, vec::vector"
        " FROM unnest(%s::bigint[], %s::text[]) AS x(doc, vec)"
        " ON CONFLICT (doc) DO UPDATE SET vec = EXCLUDED.vec",
        ([doc for doc, _ in rows], [vector_text(v) for v in vectors]),
    )


def swap_staged(
    conn: PgConnection, t: Tables, info: EmbedderInfo, where: str, *, hnsw: bool
) -> None:
    """The staged vectors replace the stored ones (the column retyped, and indexed, for a new
    dimension); ``info`` is recorded with them."""
    dims = [r[0] for r in conn.execute(f"SELECT DISTINCT vector_dims(vec) FROM {t.staging}")]
    if len(dims) > 1:
        raise IndexMismatchError(f"The new embedder gave vectors of lengths {sorted(dims)}")
    conn.execute(f"UPDATE {t.chunks} SET embedding = NULL WHERE embedding IS NOT NULL")
    if dims and dims[0] != column_dimension(conn, t):
        set_dimension(conn, t, dims[0], hnsw=hnsw)
    conn.execute(
        f"UPDATE {t.chunks} AS c SET embedding = s.vec FROM {t.staging} s WHERE c.doc = s.doc"
    )
    conn.execute(f"DROP TABLE {t.staging}")
    conn.execute(f"DELETE FROM {t.meta} WHERE key IN ('reembed_target', 'embedder')")
    if dims:
        record_embedder(conn, t, info, dims[0], where)
