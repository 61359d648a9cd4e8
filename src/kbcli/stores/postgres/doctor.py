"""``kb doctor`` for the PostgreSQL store: the keyword tables checked against the chunks
(statistics, document and source frequencies, source rows, forward indexes) and, on request,
rebuilt from them. The HNSW index is PostgreSQL's own and needs no check here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from kbcli.stores.postgres.connection import Database
from kbcli.stores.postgres.schema import Tables, one
from kbcli.types import Finding

if TYPE_CHECKING:
    from kbcli.stores.postgres.schema import PgConnection


class Checked(Protocol):
    """What the check reads and rebuilds: a :class:`~kbcli.stores.postgres.store.PostgresStore`
    (its tables, its database and its keyword rebuild)."""

    _t: Tables
    _db: Database

    @property
    def keyword_signature(self) -> str: ...

    def rebuild_keyword_index(self) -> int: ...


def problems(conn: PgConnection, t: Tables) -> list[str]:
    """Every keyword-table invariant that does not hold, one line each."""
    out = []
    n, total, sources = one(conn.execute(f"SELECT n, total_length, sources FROM {t.stats}"))
    real_n, real_total = one(
        conn.execute(f"SELECT count(*), coalesce(sum(length), 0) FROM {t.chunks}")
    )
    if (n, total) != (real_n, real_total):
        out.append(f"stats say {n} chunks/{total} terms, table has {real_n}/{real_total}")
    bad_df = one(
        conn.execute(
            f"SELECT count(*) FROM {t.terms} x WHERE df != (SELECT count(*) FROM {t.postings} p"
            " WHERE p.term = x.id) OR sdf != (SELECT count(DISTINCT src) FROM"
            f" {t.postings} p WHERE p.term = x.id)"
        )
    )[0]
    if bad_df:
        out.append(f"{bad_df} terms have a wrong document or source frequency")
    off = one(
        conn.execute(
            f"SELECT count(*) FROM {t.sources} s LEFT JOIN (SELECT src, sum(length) AS length,"
            f" count(*) AS chunks FROM {t.chunks} GROUP BY src) c ON c.src = s.id"
            " WHERE s.length != coalesce(c.length, 0) OR s.chunks != coalesce(c.chunks, 0)"
        )
    )[0]
    if off:
        out.append(f"{off} sources are off")
    pairs = one(conn.execute(f"SELECT coalesce(sum(cardinality(term_ids)), 0) FROM {t.chunks}"))[0]
    postings = one(conn.execute(f"SELECT count(*) FROM {t.postings}"))[0]
    if pairs != postings:
        out.append(f"chunks' forward indexes hold {pairs} postings, the index {postings}")
    return out


def _signature(conn: PgConnection, t: Tables, current: str) -> list[str]:
    """An index built with another analyzer or field set (re-tokenised by the repair)."""
    row = conn.execute(f"SELECT value FROM {t.meta} WHERE key = 'analyzer'").fetchone()
    n = one(conn.execute(f"SELECT n FROM {t.stats} WHERE id = 1"))[0]
    if row is None or row[0] == current or n == 0:
        return []
    return [f"built with [{row[0]}], not the current [{current}]"]


def run_checks(store: Checked, repair: bool) -> list[Finding]:
    """The keyword-index check; with ``repair``, rebuilt and checked again."""
    t = store._t
    with store._db.read() as conn:
        found = _signature(conn, t, store.keyword_signature) + problems(conn, t)
    if not found:
        return [Finding("keyword-index", True)]
    detail = found[0] + (f" (+{len(found) - 1} more)" if len(found) > 1 else "")
    if not repair:
        return [Finding("keyword-index", False, detail)]
    n = store.rebuild_keyword_index()
    with store._db.read() as conn:
        left = _signature(conn, t, store.keyword_signature) + problems(conn, t)
    action = f"rebuilt the keyword index from {n} chunks"
    return [Finding("keyword-index", not left, left[0] if left else detail, not left, action)]
