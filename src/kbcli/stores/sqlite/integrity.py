"""Integrity checks: SQLite's own plus every invariant the keyword and vector tables keep."""

from __future__ import annotations

import sqlite3


def problems(conn: sqlite3.Connection) -> list[str]:
    """Everything that is wrong, one line each; empty when all is well."""
    found: list[str] = []
    result = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
    if result != ["ok"]:
        found.extend(result)
    found.extend(_corpus(conn))
    found.extend(_sources(conn))
    found.extend(_vectors(conn))
    return found


def _corpus(conn: sqlite3.Connection) -> list[str]:
    out = []
    n, total = conn.execute("SELECT n, total_length FROM stats WHERE id = 1").fetchone()
    real_n, real_total = conn.execute(
        "SELECT count(*), coalesce(sum(length), 0) FROM chunks"
    ).fetchone()
    if (n, total) != (real_n, real_total):
        out.append(f"stats say {n} chunks/{total} terms, table has {real_n}/{real_total}")
    bad_df = conn.execute(
        "SELECT count(*) FROM terms t WHERE df != (SELECT count(*) FROM postings p"
        " WHERE p.term = t.id)"
    ).fetchone()[0]
    if bad_df:
        out.append(f"{bad_df} terms have a wrong document frequency")
    return out


def _sources(conn: sqlite3.Connection) -> list[str]:
    """Invariants of the source grouping (source-level BM25)."""
    out = []
    real = {
        src: (length, count)
        for src, length, count in conn.execute(
            "SELECT src, sum(length), count(*) FROM chunks GROUP BY src"
        )
    }
    recorded = {
        src: (length, count)
        for src, length, count in conn.execute("SELECT id, length, chunks FROM sources")
    }
    if real != recorded:
        out.append(f"{len(set(real.items()) ^ set(recorded.items()))} sources are off")
    stated = conn.execute("SELECT sources FROM stats WHERE id = 1").fetchone()[0]
    if stated != len(recorded):
        out.append(f"stats say {stated} sources, table has {len(recorded)}")
    misplaced = conn.execute(
        "SELECT count(*) FROM postings p JOIN chunks c ON c.doc = p.doc WHERE p.src != c.src"
    ).fetchone()[0]
    if misplaced:
        out.append(f"{misplaced} postings name the wrong source")
    bad_sdf = conn.execute(
        "SELECT count(*) FROM terms t WHERE sdf != (SELECT count(DISTINCT src)"
        " FROM postings p WHERE p.term = t.id)"
    ).fetchone()[0]
    if bad_sdf:
        out.append(f"{bad_sdf} terms have a wrong source frequency")
    return out


def _vectors(conn: sqlite3.Connection) -> list[str]:
    orphans = conn.execute(
        "SELECT count(*) FROM vectors v WHERE NOT EXISTS"
        " (SELECT 1 FROM chunks c WHERE c.doc = v.doc)"
    ).fetchone()[0]
    return [f"{orphans} vectors belong to no chunk"] if orphans else []
