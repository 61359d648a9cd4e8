"""``kb doctor`` for the SQLite family: each derived structure checked against the catalog
(the ``chunks`` and ``vectors`` tables) and, on request, rebuilt from it.

Checks, in order: SQLite's own ``PRAGMA integrity_check`` (never repaired here: the catalog
itself is damaged), the keyword tables (statistics, document and source frequencies, forward
indexes, log), vectors without a chunk, the packed keyword file and the derived vector index
(the matrix cache, a FAISS file or a Chroma collection).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from kbcli.stores.sqlite import integrity
from kbcli.stores.sqlite.connection import Database
from kbcli.stores.sqlite.packlog import current_tag, pack_path, read_header
from kbcli.stores.sqlite.vectors import DerivedVectors, bump, remove_dead_temp_files
from kbcli.types import Finding


class Checked(Protocol):
    """What the checks read and rebuild: a store of the SQLite family
    (:class:`~kbcli.stores.sqlite.store.SQLiteStore` and the FAISS and Chroma stores built on
    it): its database, its derived vector index and the store's own rebuilds."""

    path: Path
    _db: Database
    _matrix: DerivedVectors

    @property
    def keyword_signature(self) -> str: ...

    def rebuild_keyword_index(self) -> int: ...

    def refresh_vector_index(self) -> None: ...


def run_checks(store: Checked, repair: bool) -> list[Finding]:
    """Every check of ``store``; with ``repair``, each drifted one rebuilt and checked again."""
    with store._db.read() as conn:
        sqlite = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
    if sqlite != ["ok"]:
        detail = f"{sqlite[0]} (+{len(sqlite) - 1} more)" if len(sqlite) > 1 else sqlite[0]
        return [
            Finding(
                "sqlite",
                False,
                f"PRAGMA integrity_check: {detail}; restore a backup or re-ingest into a new file",
            )
        ]
    findings = [Finding("sqlite", True)]
    for name, check, fix in _CHECKS:
        problems = check(store)
        if not problems:
            findings.append(Finding(name, True))
            continue
        detail = problems[0] + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
        if not repair:
            findings.append(Finding(name, False, detail))
            continue
        action = fix(store)
        left = check(store)
        findings.append(Finding(name, not left, detail if not left else left[0], not left, action))
    return findings


def _keyword_tables(store: Checked) -> list[str]:
    with store._db.read() as conn:
        return (
            _signature(conn, store.keyword_signature)
            + integrity._corpus(conn)
            + integrity._frequencies(conn)
            + integrity._sources(conn)
            + integrity._keyword_log(conn)
        )


def _signature(conn: sqlite3.Connection, current: str) -> list[str]:
    """An index built with another analyzer or field set (re-tokenised by the repair)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'analyzer'").fetchone()
    n = conn.execute("SELECT n FROM stats WHERE id = 1").fetchone()[0]
    if row is None or row[0] == current or n == 0:
        return []
    return [f"built with [{row[0]}], not the current [{current}]"]


def _fix_keyword_tables(store: Checked) -> str:
    n = store.rebuild_keyword_index()
    return f"rebuilt the keyword index from {n} chunks"


def _orphans(store: Checked) -> list[str]:
    with store._db.read() as conn:
        return integrity._vectors(conn)


def _fix_orphans(store: Checked) -> str:
    with store._db.transaction() as conn:
        gone = conn.execute(
            "DELETE FROM vectors WHERE doc NOT IN (SELECT doc FROM chunks)"
        ).rowcount
        bump(conn)
    return f"deleted {gone} vectors that belonged to no chunk"


def _pack(store: Checked) -> list[str]:
    path = pack_path(store.path)
    if not path.exists():
        return []
    header = read_header(path)
    if header is None:
        return [f"{path.name} has no readable header (ignored by search)"]
    with store._db.read() as conn:
        if header.get("tag") != current_tag(conn):
            return []  # stale: replaced by the next search
        # lazy: packed imports numpy: off the keyword search of an index with no pack
        from kbcli.stores.sqlite import packed

        if packed.map_pack(path, header["tag"]) is None:
            return [f"{path.name} is damaged or cut short (ignored by search)"]
        return integrity._pack(conn)


def _fix_pack(store: Checked) -> str:
    path = pack_path(store.path)
    path.unlink(missing_ok=True)
    remove_dead_temp_files(path)
    return f"deleted {path.name} (the next search writes a new one)"


def _vector_index(store: Checked) -> list[str]:
    with store._db.read() as conn:
        problem = store._matrix.verify(conn)
    return [problem] if problem else []


def _fix_vector_index(store: Checked) -> str:
    name = Path(store._matrix.path).name
    note = store._matrix.discard()  # what it had to do beyond deleting the index, if anything
    store.refresh_vector_index()
    return note or f"rebuilt {name} from the catalog"


_CHECKS: tuple[tuple[str, Callable[[Checked], list[str]], Callable[[Checked], str]], ...] = (
    ("keyword-index", _keyword_tables, _fix_keyword_tables),
    ("vectors", _orphans, _fix_orphans),
    ("keyword-pack", _pack, _fix_pack),
    ("vector-index", _vector_index, _fix_vector_index),
)
