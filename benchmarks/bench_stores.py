"""Ingest and query figures per store at 10k and 100k chunks (random 384-d vectors).

    python benchmarks/bench_stores.py                       # every store, 10k and 100k
    python benchmarks/bench_stores.py --sizes 10000 --stores sqlite,faiss

For each store: ``add`` of N chunks in batches of 2,000 (text: 12 words from a 20,000-word
vocabulary, 50 chunks per source, metadata ``source`` and ``n``), then the first dense query
(which builds the derived vector index: the matrix cache, the FAISS file, the Chroma sync),
then p50/p95 over --queries queries of dense search, filtered dense search (one source: 50 of
N chunks allowed, a pre-filter) and keyword search. Stores whose extra is missing are skipped.
Speed does not depend on what the vectors mean, so they are random unit vectors.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import percentile, timings  # noqa: E402

from kbcli import Document, InMemoryStore, SQLiteStore  # noqa: E402

DIM = 384
BATCH = 2000
PER_SOURCE = 50


def make_store(name: str, folder: Path):
    if name == "memory":
        return InMemoryStore()
    if name == "sqlite":
        return SQLiteStore(folder / "kb.db")
    if name.startswith("faiss"):
        from kbcli.stores.faiss.store import FaissStore

        factory = {"faiss": "Flat", "faiss-hnsw": "HNSW32", "faiss-ivf": "IVF256,Flat"}[name]
        return FaissStore(DIM, factory, path=folder / "kb.db")
    if name == "chroma":
        from kbcli.stores.chroma.store import ChromaStore

        return ChromaStore(folder / "chroma")
    raise SystemExit(f"unknown store {name}")


def run(name: str, n: int, queries: int, seed: int = 7) -> dict[str, float]:
    import numpy as np

    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(20_000)]
    gen = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory(prefix="kb-bench-") as tmp:
        store = make_store(name, Path(tmp))
        t0 = time.perf_counter()
        for start in range(0, n, BATCH):
            count = min(BATCH, n - start)
            docs = [
                Document(
                    f"c{i}",
                    " ".join(rng.choices(vocab, k=12)),
                    {"source": f"/docs/f{i // PER_SOURCE}.md", "n": i},
                )
                for i in range(start, start + count)
            ]
            vecs = gen.standard_normal((count, DIM), dtype=np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            store.add(docs, vecs.tolist())
        ingest = time.perf_counter() - t0
        qs = gen.standard_normal((queries + 1, DIM), dtype=np.float32).tolist()
        t0 = time.perf_counter()
        store.search(qs[0], k=10)
        first = time.perf_counter() - t0
        dense = timings(lambda q: store.search(q, k=10), qs[1:])
        sources = [f"/docs/f{rng.randrange(n // PER_SOURCE)}.md" for _ in qs[1:]]
        pairs = list(zip(qs[1:], sources))
        filtered = timings(lambda p: store.search(p[0], k=10, filter={"source": p[1]}), pairs)
        words = [" ".join(rng.choices(vocab[50:5000], k=3)) for _ in range(queries)]
        keyword = timings(lambda w: store.keyword_search(w, k=10), words)
        store.close()
    return {
        "ingest_s": ingest,
        "chunks_per_s": n / ingest,
        "first_query_s": first,
        "dense_p50": statistics.median(dense),
        "dense_p95": percentile(dense, 95),
        "filtered_p50": statistics.median(filtered),
        "keyword_p50": statistics.median(keyword),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--stores", default="memory,sqlite,faiss,faiss-hnsw,chroma")
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    header = (
        f"{'store':<11}{'chunks':>8}{'ingest s':>10}{'chunks/s':>10}{'1st query s':>12}"
        f"{'dense p50':>11}{'p95 ms':>8}{'filtered':>10}{'keyword':>9}"
    )
    print(header)
    for n in (int(s) for s in args.sizes.split(",")):
        for name in args.stores.split(","):
            try:
                r = run(name, n, args.queries)
            except ImportError as exc:  # MissingDependencyError too
                print(f"{name:<11}{n:>8}  skipped: {exc}")
                continue
            print(
                f"{name:<11}{n:>8}{r['ingest_s']:>10.1f}{r['chunks_per_s']:>10.0f}"
                f"{r['first_query_s']:>12.2f}{r['dense_p50']:>11.2f}{r['dense_p95']:>8.2f}"
                f"{r['filtered_p50']:>10.2f}{r['keyword_p50']:>9.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
