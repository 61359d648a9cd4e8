"""Integrity checks: SQLite's own plus every invariant the keyword and vector tables keep,
and the packed keyword index (when a pack of this index is on disk) against the tables."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kbcli.stores.sqlite.packlog import current_seq, current_tag, log_floor, pack_path, read_header


def problems(conn: sqlite3.Connection) -> list[str]:
    """Everything that is wrong, one line each; empty when all is well."""
    found: list[str] = []
    result = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
    if result != ["ok"]:
        found.extend(result)
    found.extend(_corpus(conn))
    found.extend(_frequencies(conn))
    found.extend(_sources(conn))
    found.extend(_vectors(conn))
    found.extend(_keyword_log(conn))
    found.extend(_pack(conn))
    return found


def _corpus(conn: sqlite3.Connection) -> list[str]:
    out = []
    n, total = conn.execute("SELECT n, total_length FROM stats WHERE id = 1").fetchone()
    real_n, real_total = conn.execute(
        "SELECT count(*), coalesce(sum(length), 0) FROM chunks"
    ).fetchone()
    if (n, total) != (real_n, real_total):
        out.append(f"stats say {n} chunks/{total} terms, table has {real_n}/{real_total}")
    return out


def _frequencies(conn: sqlite3.Connection) -> list[str]:
    """``terms.df`` and ``terms.sdf`` against the chunks' forward indexes, and each chunk's
    length against the sum of its tfs."""
    import numpy as np

    # lazy: packed imports numpy: off the keyword search of an index with no pack
    from kbcli.stores.sqlite import packed

    arrays = packed.build_arrays(conn)
    df = np.diff(arrays["offsets"])  # postings are ordered by term: chunks holding each
    n_terms, width = df.shape[0], arrays["srclen"].shape[0]
    term = np.repeat(np.arange(n_terms), df)
    src = arrays["src"][arrays["slot"]]
    sdf = np.bincount(np.unique(term * width + src) // width, minlength=n_terms)
    rows = conn.execute("SELECT id, df, sdf FROM terms").fetchall()
    recorded = np.array(rows, np.int64).reshape(-1, 3)
    known = np.zeros(n_terms, bool)
    known[recorded[:, 0]] = True
    out = []
    if unknown := int(np.count_nonzero(df[~known])):
        out.append(f"chunks' forward indexes name {unknown} terms the vocabulary lacks")
    if bad := int(np.count_nonzero(recorded[:, 1] != df[recorded[:, 0]])):
        out.append(f"{bad} terms have a wrong document frequency")
    if bad := int(np.count_nonzero(recorded[:, 2] != sdf[recorded[:, 0]])):
        out.append(f"{bad} terms have a wrong source frequency")
    length = np.bincount(arrays["slot"], weights=arrays["tf"], minlength=arrays["doc"].shape[0])
    if bad := int(np.count_nonzero(length.astype(np.int64) != arrays["dl"])):
        out.append(f"{bad} chunks' lengths disagree with their forward indexes")
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
    return out


def _vectors(conn: sqlite3.Connection) -> list[str]:
    orphans = conn.execute(
        "SELECT count(*) FROM vectors v WHERE NOT EXISTS"
        " (SELECT 1 FROM chunks c WHERE c.doc = v.doc)"
    ).fetchone()[0]
    return [f"{orphans} vectors belong to no chunk"] if orphans else []


def _keyword_log(conn: sqlite3.Connection) -> list[str]:
    """The log lies between its floor and end."""
    out = []
    low, high = conn.execute("SELECT min(seq), max(seq) FROM keyword_log").fetchone()
    if low is not None and (low <= log_floor(conn) or high > current_seq(conn)):
        out.append("keyword_log holds entries outside its floor and end")
    return out


def _db_path(conn: sqlite3.Connection) -> Path | None:
    for _, name, file in conn.execute("PRAGMA database_list"):
        if name == "main" and file:
            return Path(file)
    return None


def _pack(conn: sqlite3.Connection) -> list[str]:
    """A pack of this index that a search would use must hold exactly the forward indexes'
    postings once the log's delta is applied."""
    db = _db_path(conn)
    if db is None:
        return []
    path = pack_path(db)
    header = read_header(path)
    if header is None or header.get("tag") != current_tag(conn):
        return []
    # lazy: packed imports numpy: off the keyword search of an index with no pack
    from kbcli.stores.sqlite import packed

    pack = packed.map_pack(path, header["tag"])
    if pack is None:
        return []  # damaged or cut short: never used, rebuilt by the next search
    view = packed.make_view(conn, pack)
    if view is None:
        return []  # void or due for a merge: never used as it is
    got = packed.triples(view)
    want = packed.triples_of(packed.build_arrays(conn))
    if len(got) != len(want) or not all(
        a.shape == b.shape and bool((a == b).all()) for a, b in zip(got, want)
    ):
        return [f"the keyword pack {path.name} disagrees with the forward indexes (delete it)"]
    return []
