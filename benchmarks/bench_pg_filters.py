"""Filters pinning ``source`` on PostgresStore: a range of the source index (after) against
testing the filter on every chunk (before), on one index, in one process; prints the figures.

    python benchmarks/bench_pg_filters.py                    # 100,000 chunks, embedded server
    python benchmarks/bench_pg_filters.py --chunks 20000 --queries 10
    KB_PG_DSN=postgresql://kb@db/kb python benchmarks/bench_pg_filters.py   # your own server

Chunk ``i`` lies in file ``f{i // 10}`` (ten chunks each), files in ``/corpus/g{0..9}/h{0..9}``
in turn: *folder 10 %* is ``kb search --in /corpus/g3``, *folder 1 %* ``--in /corpus/g3/h7``,
*one file* ``--filter source=PATH`` (10 chunks), *3 files* a ``$in`` of three paths. Text is
Zipf(1.1) words (15-30 per chunk) over 20,000 words; vectors random unit, ``--dim`` (32)
dimensions, with pgvector's HNSW index. *before* is this same tree with the range left out
(``filters.scan_filter`` replaced by the plain ``compile_filter``, what the store ran until
now); each measurement alternates before/after query by query, so both see the same load.
Figures are p50 of ``--queries`` runs after one warm-up. The tables are dropped at the end.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import shutil
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_postgres import server_dsn  # noqa: E402
from bench_store import make_vocab  # noqa: E402

from kbcli import Analyzer, Document  # noqa: E402
from kbcli.filters.syntax import under_folders  # noqa: E402
from kbcli.stores.postgres import catalog, filters, keyword, vectors  # noqa: E402

USERS = (catalog, keyword, vectors)  # the modules that compile a filter for a scan


def source_of(i: int) -> str:
    f = i // 10
    return f"/corpus/g{f % 10}/h{(f // 10) % 10}/f{f}.md"


def build(store, n: int, dim: int) -> float:
    import numpy as np

    rng = random.Random(7)
    vocab = make_vocab(20_000, rng)
    cum = list(itertools.accumulate(1 / (r + 1) ** 1.1 for r in range(len(vocab))))
    nprng = np.random.default_rng(7)
    started = time.perf_counter()
    docs = [
        Document(
            f"c{i}",
            " ".join(rng.choices(vocab, cum_weights=cum, k=rng.randint(15, 30))),
            {"source": source_of(i), "lang": "en" if i % 2 else "de"},
        )
        for i in range(n)
    ]
    vecs = nprng.standard_normal((n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    store.add(docs, vecs.tolist())  # one transaction: the HNSW index is built once, after
    with store.transaction() as conn:
        conn.execute(f"ANALYZE {store._t.chunks}")
    return time.perf_counter() - started


def narrowing(on: bool) -> None:
    """Switch the source range on (this tree) or off (what the store ran before)."""
    for module in USERS:
        module.scan_filter = (
            filters.scan_filter
            if on
            else lambda f, alias="c.": filters.compile_filter(f, alias + "metadata")
        )


def compare(label: str, fn, inputs: list) -> dict:
    times: dict[str, list[float]] = {"before": [], "after": []}
    for x in [inputs[0], *inputs]:  # the first is a warm-up, dropped
        for name in ("before", "after"):
            narrowing(name == "after")
            start = time.perf_counter()
            fn(x)
            times[name].append((time.perf_counter() - start) * 1000)
    narrowing(True)
    row = {k: statistics.median(v[1:]) for k, v in times.items()}
    ratio = row["before"] / row["after"] if row["after"] else float("inf")
    print(f"| {label} | {row['before']:.2f} ms | {row['after']:.2f} ms | {ratio:.1f}x |")
    return row


def plan_nodes(store, flt: dict, vec: list[float]) -> str:
    """The scan nodes of an HNSW dense search's walk for ``flt`` (which index it reads)."""
    import numpy as np

    where, params = filters.scan_filter(flt)
    sql = (
        f"EXPLAIN SELECT c.doc, c.embedding <=> %s AS distance FROM {store._t.chunks} c"
        f" WHERE c.embedding IS NOT NULL AND {where} ORDER BY distance LIMIT 10"
    )
    with store._db.read() as conn:
        lines = [r[0] for r in conn.execute(sql, [np.asarray(vec, np.float32), *params])]
    return "; ".join(line.strip().lstrip("-> ").split("  (")[0] for line in lines if "Scan" in line)


def drop(dsn: str, table: str) -> None:
    import psycopg

    from kbcli.stores.postgres.schema import Tables

    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in Tables(table).all():
            conn.execute(f"DROP TABLE IF EXISTS {name} CASCADE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--queries", type=int, default=20)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the embedded server on kill
    dsn, server, folder = server_dsn()
    from kbcli.stores.postgres import PostgresStore

    table = f"bench_pgf_{args.chunks}"
    drop(dsn, table)  # a fresh index
    store = PostgresStore(
        dsn, table, analyzer=Analyzer(language="none", stem=False, stopwords=False)
    )
    try:
        print(f"load average at start: {os.getloadavg()}")
        seconds = build(store, args.chunks, args.dim)
        print(f"ingest: {args.chunks:,} chunks in {seconds:.1f} s, exact={store.exact}")
        big, small = under_folders(["/corpus/g3"]), under_folders(["/corpus/g3/h7"])
        one = {"source": source_of(1230)}
        three = {"source": {"$in": [source_of(i) for i in (10, 5550, 99990 % args.chunks)]}}
        cases = {"folder 10 %": big, "folder 1 %": small, "one file": one, "3 files ($in)": three}
        rng = random.Random(3)
        n = args.queries
        vocab_rng = random.Random(7)
        words = make_vocab(20_000, vocab_rng)[:2000]
        queries = [" ".join(rng.sample(words, 2)) for _ in range(n)]
        vecs = [[rng.gauss(0, 1) for _ in range(args.dim)] for _ in range(n)]
        print(f"\n{args.chunks:,} chunks; p50 of {n} runs each\n")
        print("| measurement | before (every row) | after (source range) | ratio |")
        print("|---|---|---|---|")
        for name, flt in cases.items():
            compare(f"count, {name}", lambda _, f=flt: store.count(f), list(range(n)))
        for name in ("folder 10 %", "folder 1 %"):
            flt = cases[name]
            compare(
                f"iter_documents, {name}",
                lambda _, f=flt: sum(1 for _ in store.iter_documents(f)),
                list(range(n)),
            )

            def rows_where(_, f=flt):
                with store._db.read() as conn:
                    return catalog.rows_where(conn, store._t, f)

            compare(f"delete_where's read, {name}", rows_where, list(range(n)))
        for name, flt in cases.items():
            compare(
                f"keyword_search, {name}", lambda q, f=flt: store.keyword_search(q, 10, f), queries
            )
        for name, flt in cases.items():
            compare(f"search (dense), {name}", lambda v, f=flt: store.search(v, 10, f), vecs)
        compare("search (dense), no filter", lambda v: store.search(v, 10), vecs)
        print("\nplans of the dense walk (after):")
        for name, flt in cases.items():
            print(f"  {name}: {plan_nodes(store, flt, vecs[0])}")
        print(f"\nload average at end: {os.getloadavg()}")
    finally:
        store.close()
        drop(dsn, table)
        if server is not None:
            server.cleanup()
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
