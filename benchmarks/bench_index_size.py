"""Where an index's bytes go: each table and index of the database (SQLite's ``dbstat``), the
files beside it, and what ``kb stats`` says; with ``--upgrade``, the same for a copy opened
(and so upgraded) by this kbcli, side by side.

    python benchmarks/bench_index_size.py INDEX.db [--upgrade]

Issue 41 measured 58.5 MB of embedding cache for 12,480 vectors of 1,536 bytes (25.6 MB of
``vectors``) in a 105 MB database of the tldr pages: ``--upgrade`` on such an index (one an
older kbcli wrote) shows what schema 6 keeps. Needs an SQLite with the ``dbstat`` table.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SUFFIXES = ("-wal", "-shm", ".keyword-pack", ".vectors-cache", ".faiss", ".ingest-lock")


def tables(db: Path) -> dict[str, int]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC")
        return {name: int(size) for name, size in rows}


def counts(db: Path) -> dict[str, int]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return {
            "schema": conn.execute("PRAGMA user_version").fetchone()[0],
            "vectors": conn.execute("SELECT count(*) FROM vectors").fetchone()[0],
            "cached vectors": conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0],
        }


def files(db: Path) -> dict[str, int]:
    found = {db.name: db.stat().st_size}
    for suffix in SUFFIXES:
        path = Path(f"{db}{suffix}")
        if path.exists():
            found[path.name] = path.stat().st_size
    return found


def report(db: Path) -> dict[str, object]:
    from kbcli.stores import SQLiteStore

    store = SQLiteStore(db, create=False)  # an index of an older kbcli is upgraded here
    try:
        size = store.stats()["size_bytes"]
    finally:
        store.close()
    return {"tables": tables(db), "files": files(db), **counts(db), "kb stats size": size}


def mb(n: int) -> str:
    return f"{n / 1e6:7.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db", type=Path)
    parser.add_argument("--upgrade", action="store_true", help="also a copy opened by this kbcli")
    args = parser.parse_args()
    shown = {"as it is": args.db}
    with tempfile.TemporaryDirectory() as tmp:
        if args.upgrade:
            copy = Path(tmp) / "copy.db"
            with sqlite3.connect(f"file:{args.db}?mode=ro", uri=True) as src:
                with sqlite3.connect(copy) as dst:
                    src.backup(dst)
            pristine = {"tables": tables(copy), "files": files(copy), **counts(copy)}
            shown = {"copy": copy}
            results = {"before": pristine}
        else:
            results = {}
        for label, db in shown.items():
            results["after" if args.upgrade else label] = report(db)
    for label, figures in results.items():
        print(f"--- {label}: schema {figures['schema']}, {figures['vectors']:,} vectors, "
              f"{figures['cached vectors']:,} in the embedding cache table")  # fmt: skip
        for name, size in list(figures["tables"].items())[:8]:  # type: ignore[union-attr]
            print(f"  table/index {name:28} {mb(size)}")
        for name, size in figures["files"].items():  # type: ignore[union-attr]
            print(f"  file {name:35} {mb(size)}")
        if "kb stats size" in figures:
            print(f"  kb stats 'Size on disk' {mb(figures['kb stats size'])}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
