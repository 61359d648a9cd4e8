"""PgVectorIndex: the :class:`~kbcli.protocols.VectorIndex` contract on a pgvector table, for a
store that keeps its catalog elsewhere and wants only nearest-neighbour search in PostgreSQL.

One table ``(id bigint, embedding vector(d))``; with ``hnsw`` (the default) an HNSW cosine
index serves searches (approximate: ``exact`` is False), and an ``allowed`` pre-filter runs
inside the index walk with iterative scans, falling back to an exact scan of the allowed ids
when the walk comes back short. ``hnsw=False`` scans exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .catalog import vector_text
from .dsn import describe, redact, resolve_dsn
from .schema import Tables
from .vectors import EF_SEARCH, EF_SEARCH_MAX, HNSW_MAX_DIM, _score


class PgVectorIndex:
    """Vectors keyed by integer ids in the table ``table`` of the database at ``dsn``."""

    def __init__(self, dsn: str | None = None, table: str = "kb_vectors", *, hnsw: bool = True):
        from ...errors import StoreError, require

        psycopg = require("psycopg", extra="postgres", feature="The postgres vector index")
        require("pgvector.psycopg", extra="postgres", feature="The postgres vector index")
        dsn = resolve_dsn(dsn)
        self.hnsw = hnsw
        self._name = Tables(table).chunks
        self._index = Tables(table).hnsw
        try:
            self._conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            message = redact(str(exc).strip().splitlines()[0], dsn)
            where = describe(dsn)
            raise StoreError(f"Cannot connect to PostgreSQL at {where}: {message}") from None
        self._conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        self._conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self._name} (id bigint PRIMARY KEY, embedding vector)"
        )
        from pgvector.psycopg import register_vector

        register_vector(self._conn)

    @property
    def exact(self) -> bool:
        """True when searches are exact scans (no HNSW index)."""
        return not self.hnsw

    def _dimension(self) -> int | None:
        row = self._conn.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass"
            " AND attname = 'embedding'",
            (self._name,),
        ).fetchone()
        return int(row[0]) if row and row[0] > 0 else None

    def upsert(self, ids: Sequence[int], vectors: Sequence[Sequence[float]]) -> None:
        """Insert or replace the vectors of ``ids``."""
        if not len(ids):
            return
        with self._conn.transaction():
            if self._dimension() is None:
                dim = len(vectors[0])
                self._conn.execute(
                    f"ALTER TABLE {self._name} ALTER COLUMN embedding TYPE vector({int(dim)})"
                )
                if self.hnsw and dim <= HNSW_MAX_DIM:
                    self._conn.execute(
                        f"CREATE INDEX IF NOT EXISTS {self._index} ON {self._name}"
                        " USING hnsw (embedding vector_cosine_ops)"
                    )
            self._conn.execute(
                f"INSERT INTO {self._name} SELECT id, vec::vector"
                " FROM unnest(%s::bigint[], %s::text[]) AS x(id, vec)"
                " ON CONFLICT (id) DO UPDATE SET embedding = EXCLUDED.embedding",
                ([int(i) for i in ids], [vector_text(v) for v in vectors]),
            )

    def remove(self, ids: Sequence[int]) -> None:
        """Remove the vectors of ``ids`` (unknown ids are ignored)."""
        if len(ids):
            self._conn.execute(
                f"DELETE FROM {self._name} WHERE id = ANY(%s::bigint[])", ([int(i) for i in ids],)
            )

    def search(
        self, query: Sequence[float], k: int, allowed: Sequence[int] | None = None
    ) -> list[tuple[int, float]]:
        """``(id, cosine)`` of the ``k`` nearest vectors among ``allowed``, best first."""
        import numpy as np

        if k <= 0 or self._dimension() is None or (allowed is not None and not len(allowed)):
            return []
        where, params = "TRUE", []
        if allowed is not None:
            where, params = "id = ANY(%s::bigint[])", [[int(i) for i in allowed]]
        sql = (
            f"SELECT id, embedding <=> %s AS distance FROM {self._name} WHERE {where}"
            " ORDER BY distance, id LIMIT %s"
        )
        args: list[Any] = [np.asarray(query, dtype=np.float32), *params, int(k)]
        with self._conn.transaction():
            if self.hnsw:
                ef = min(EF_SEARCH_MAX, max(EF_SEARCH, int(k)))
                self._conn.execute(f"SET LOCAL hnsw.ef_search = {ef}")
                self._conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            else:
                self._conn.execute("SET LOCAL enable_indexscan = off")
            rows = self._conn.execute(sql, args).fetchall()
            wanted = k if allowed is None else min(k, len(set(allowed)))
            if self.hnsw and len(rows) < wanted:
                self._conn.execute("SET LOCAL enable_indexscan = off")
                rows = self._conn.execute(sql, args).fetchall()
        hits = [(int(i), _score(d)) for i, d in rows]
        hits.sort(key=lambda h: (-h[1], h[0]))
        return hits

    def __len__(self) -> int:
        return self._conn.execute(f"SELECT count(*) FROM {self._name}").fetchone()[0]

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()
