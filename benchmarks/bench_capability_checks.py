"""What asking a store what it can do costs: ``isinstance(store, Capability)`` against
``kbcli.protocols.supports(store, Capability)``, on an SQLite store.

For each storage capability it prints the microseconds per check and the SQL statements each
check runs (counted with the connection's ``sqlite3`` trace callback), then the statements and
time of one whole keyword search through ``KnowledgeBase.search``, which makes its checks on
the way. On Python 3.10 and 3.11 ``isinstance`` on a runtime-checkable protocol evaluates the
object's properties (``version``, ``embedder_info``... each a query); from 3.12 it does not.

Usage::

    python benchmarks/bench_capability_checks.py [--checks 2000] [--searches 200]
    PYTHONPATH=/path/to/other/src python benchmarks/bench_capability_checks.py --src ''

``--src`` is the kbcli source tree to measure (default: this checkout's ``src``; empty: what
the interpreter imports, e.g. through ``PYTHONPATH``). A tree without ``supports`` (before it
existed) gets the ``isinstance`` figures and the search only.
"""

from __future__ import annotations

import argparse
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

WORDS = "password reset settings security invoice delivery garden tomato basil water".split()


def connections(obj: Any, depth: int = 4, seen: set[int] | None = None) -> list[sqlite3.Connection]:
    """The sqlite3 connections reachable from ``obj``'s attributes (no property is read)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth < 0:
        return []
    seen.add(id(obj))
    if isinstance(obj, sqlite3.Connection):
        return [obj]
    found: list[sqlite3.Connection] = []
    try:
        values = list(vars(obj).values())
    except TypeError:
        return []
    for value in values:
        found += connections(value, depth - 1, seen)
    return found


class Counter:
    def __init__(self, conns: list[sqlite3.Connection]):
        self.statements = 0
        for conn in conns:
            conn.set_trace_callback(self.seen)

    def seen(self, _sql: str) -> None:
        self.statements += 1


def per_check(check: Any, store: Any, capability: type, n: int, counter: Counter) -> tuple:
    check(store, capability)  # warm: a first call fills caches
    before = counter.statements
    start = time.perf_counter()
    for _ in range(n):
        check(store, capability)
    seconds = time.perf_counter() - start
    return seconds / n * 1e6, (counter.statements - before) / n, check(store, capability)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checks", type=int, default=2000, help="isinstance checks per capability")
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--src", default=str(HERE.parent / "src"))
    args = parser.parse_args()
    if args.src:
        sys.path.insert(0, args.src)

    import kbcli
    from kbcli import protocols
    from kbcli.embedders import SimpleEmbedder
    from kbcli.pipeline import KnowledgeBase
    from kbcli.stores import SQLiteStore

    class Embedder(SimpleEmbedder):
        weak = False  # searched like a model's vectors: hybrid runs its dense route

    supports = getattr(protocols, "supports", None)
    capabilities = [
        protocols.DocumentCatalog,
        protocols.KeywordIndex,
        protocols.FileLedger,
        protocols.EmbeddingCache,
        protocols.Doctor,
        protocols.VectorStoreProtocol,
    ]
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "kb.db")
        kb = KnowledgeBase(store=store, embedder=Embedder())
        for i in range(200):
            kb.add(" ".join(WORDS[(i + j) % len(WORDS)] for j in range(12)), {"n": i})
        counter = Counter(connections(store))
        print(
            f"Python {platform.python_version()}   kbcli from {Path(kbcli.__file__).parent}   "
            f"{len(connections(store))} connection(s) traced"
        )
        print(f"{'capability':22} {'isinstance':>24} {'supports':>24}")
        for capability in capabilities:
            us, sql, answer = per_check(isinstance, store, capability, args.checks, counter)
            row = f"{capability.__name__:22} {us:8.2f} us {sql:4.1f} SQL {answer!s:5}"
            if supports is not None:
                us2, sql2, answer2 = per_check(
                    supports, store, capability, 100 * args.checks, counter
                )
                row += f"   {us2:8.3f} us {sql2:4.1f} SQL {answer2!s:5}"
            print(row)
        for mode in ("keyword", "semantic", "hybrid"):
            kb.search("password reset", mode=mode)  # warm: the keyword pack, the matrix cache
            before = counter.statements
            start = time.perf_counter()
            for i in range(args.searches):
                kb.search(f"{WORDS[i % len(WORDS)]} reset", k=5, mode=mode)
            ms = (time.perf_counter() - start) / args.searches * 1e3
            sql = (counter.statements - before) / args.searches
            print(f"KnowledgeBase.search ({mode}): {ms:.3f} ms, {sql:.1f} SQL statements each")
        kb.close()


if __name__ == "__main__":
    main()
