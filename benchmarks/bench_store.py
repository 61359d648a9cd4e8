"""Build an N-chunk SQLiteStore from generated text; print build time and query latency.

    python benchmarks/bench_store.py            # 100,000 chunks (a few minutes)
    python benchmarks/bench_store.py --chunks 20000 --db /tmp/kb-bench.db --keep

Text: words drawn from a Zipf(1.1) distribution over a 50,000-word synthetic vocabulary,
40-90 words per chunk, ``--chunks-per-file`` chunks per source file. Keyword queries: 2-4
words drawn uniformly from vocabulary ranks 50-5,000 (content words; the top 50 ranks play
the role of stopwords), plus a separate figure for queries made of the most common words
(worst case: long posting lists), each also with source context off. Dense: 384-d random unit
vectors (speed does not depend on what the vectors mean). Latency is measured
in-process, after one warm-up query, over --queries queries.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import string
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import percentile, timings  # noqa: E402

from kbcli import Analyzer, Document, SQLiteStore  # noqa: E402


def make_vocab(n: int, rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 10))))
    return sorted(words, key=lambda w: rng.random())


def timed(fn, queries) -> list[float]:
    return timings(fn, queries, warm=True)


def report(label: str, ms: list[float]) -> None:
    print(
        f"{label:<34} p50 {statistics.median(ms):7.2f} ms   p95 {percentile(ms, 95):7.2f} ms"
        f"   max {max(ms):7.2f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--chunks-per-file", type=int, default=10)
    ap.add_argument("--db", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="reuse/keep the database at --db")
    args = ap.parse_args()

    import numpy as np

    rng = random.Random(7)
    vocab = make_vocab(50_000, rng)
    weights = [1 / (r + 1) ** 1.1 for r in range(len(vocab))]
    cum = list(itertools.accumulate(weights))
    db = args.db or Path(tempfile.mkdtemp()) / "bench.db"
    if db.exists() and not args.keep:
        db.unlink()
    store = SQLiteStore(db, analyzer=Analyzer(language="none", stem=False, stopwords=False))
    if store.count() < args.chunks:
        nprng = np.random.default_rng(7)
        started = time.perf_counter()
        batch = 2000
        for start in range(store.count(), args.chunks, batch):
            n = min(batch, args.chunks - start)
            docs = []
            for i in range(n):
                words = rng.choices(vocab, cum_weights=cum, k=rng.randint(40, 90))
                meta = {
                    "group": (start + i) % 10,
                    "source": f"/docs/file{(start + i) // args.chunks_per_file}.md",
                }
                docs.append(Document(f"c{start + i}", " ".join(words), meta))
            vecs = nprng.standard_normal((n, args.dim)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            store.add(docs, vecs.tolist())
        build = time.perf_counter() - started
        rate = args.chunks / build
        print(f"built {args.chunks:,} chunks in {build:.1f} s ({rate:,.0f} chunks/s)")
    size = db.stat().st_size / 1e6
    print(f"database: {db} ({size:,.0f} MB), vocabulary {store.stats()['vocabulary']:,}")

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
    chunk_only = {"source_weight": 0.0}
    report(
        "keyword, chunk only, content words",
        timed(lambda q: store.keyword_search(q, 5, **chunk_only), content),
    )
    report(
        "keyword, chunk only, common words",
        timed(lambda q: store.keyword_search(q, 5, **chunk_only), common),
    )

    store.vector_cache_path.unlink(missing_ok=True)
    t = time.perf_counter()
    store.search([0.0] * args.dim, 1)
    print(f"dense first query, no cache file    {(time.perf_counter() - t) * 1000:7.1f} ms")
    reopened = SQLiteStore(db, analyzer=store.analyzer)  # as a new `kb search` process would
    t = time.perf_counter()
    reopened.search([0.0] * args.dim, 1)
    print(f"dense first query, from cache file  {(time.perf_counter() - t) * 1000:7.1f} ms")
    qv = np.random.default_rng(3).standard_normal((args.queries, args.dim)).astype(np.float32)
    qlist = [v.tolist() for v in qv]
    report("dense (exact cosine)", timed(lambda v: store.search(v, 5), qlist))
    report("dense, with filter group=3", timed(lambda v: store.search(v, 5, {"group": 3}), qlist))
    if not args.keep and args.db is None:
        store.close()


if __name__ == "__main__":
    main()
