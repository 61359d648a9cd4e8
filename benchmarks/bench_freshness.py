"""What the per-hit freshness check costs ``kb search -k 10`` (issue 39; goal: at most 5 %).

    python benchmarks/bench_freshness.py                       # 100,000 chunks, 200 queries
    python benchmarks/bench_freshness.py --chunks 20000 --queries 100   # a loaded machine

One SQLite index of synthetic chunks (Zipf-distributed words, as ``bench_scoped.py`` makes
them), ten chunks per file, from real files on disk (``kb ingest``'s sync with the built-in
embedder: every file has its ledger record), is written once into ``--workdir`` and reused.
Each query (words copied from random chunks, ``common.chunk_queries``) is searched the way
``kb search`` searches (``kbcli.search.query.search``, by file, lines located) with the check
(``fresh=True``: one ledger read of the hits' files, a ``stat`` each, one read of which hits
have a vector) and without it (``fresh=False``), the two taken in turns query by query, each
query timed once on each (``common.once_in_turns``). Prints p50 / p95 of both, the overhead
of the check in percent, what the index watermark costs (``--json`` and MCP read it once a
search), the load average and the machine.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_scoped import TERMS_PER_CHUNK, words  # noqa: E402
from common import (  # noqa: E402
    SRC,
    chunk_queries,
    load_average,
    machine_info,
    once_in_turns,
    p50_p95,
)

sys.path.insert(0, str(SRC))

CHUNKS_PER_FILE = 10


def build(workdir: Path, chunks: int) -> None:
    """``chunks`` chunks in ``chunks / 10`` Markdown files under ``workdir/docs``, ingested
    into ``workdir/kb.db`` (once: a finished index is reused)."""
    from kbcli import KnowledgeBase, SimpleEmbedder
    from kbcli.ingest.sync import sync

    done = workdir / "built.json"
    if done.exists() and json.loads(done.read_text()).get("chunks") == chunks:
        return
    rng = random.Random(7)
    docs = workdir / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    for f in range(chunks // CHUNKS_PER_FILE):
        folder = docs / f"g{f % 10}"
        folder.mkdir(exist_ok=True)
        parts = [
            f"## Part {p}\n\n" + " ".join(words(rng, TERMS_PER_CHUNK))
            for p in range(CHUNKS_PER_FILE)
        ]
        (folder / f"f{f:06d}.md").write_text("\n\n".join(parts) + "\n")
    started = time.perf_counter()
    with KnowledgeBase.open(workdir / "kb.db", embedder=SimpleEmbedder()) as kb:
        report = sync(kb, [docs])
        count = kb.store.count()
    print(
        f"ingested {count:,} chunks from {report.added:,} files in "
        f"{time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
    done.write_text(json.dumps({"chunks": chunks, "indexed": count}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--mode", default="hybrid")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/kb-bench-freshness"))
    args = parser.parse_args()

    build(args.workdir, args.chunks)
    from kbcli import KnowledgeBase, SimpleEmbedder
    from kbcli.search.freshness import check_hits, index_watermark
    from kbcli.search.query import search
    from kbcli.types import SearchOptions

    kb = KnowledgeBase.open(args.workdir / "kb.db", embedder=SimpleEmbedder(), create=False)
    texts = [d.text for d in kb.store.iter_documents(limit=20_000)]
    queries = chunk_queries(texts, args.queries)
    options = SearchOptions(k=args.k, mode=args.mode)
    fns = {
        "without the check": lambda q: search(kb, q, options, fresh=False),
        "with the check": lambda q: search(kb, q, options, fresh=True),
    }
    load_before = load_average()
    figures = once_in_turns(fns, queries, warmup="warm up the caches", repeat=1)
    load_after = load_average()
    alone = []  # the check by itself, on each query's hits (searched without it, once)
    for q in queries:
        results = [h.result for h in search(kb, q, options, fresh=False)]
        started = time.perf_counter()
        check_hits(kb.store, results)
        alone.append((time.perf_counter() - started) * 1000)
    marks = []  # what --json and MCP add once per search: the watermark
    for _ in range(min(50, len(queries))):
        started = time.perf_counter()
        index_watermark(kb)
        marks.append((time.perf_counter() - started) * 1000)
    hits = search(kb, queries[0], options)
    states = sorted({h.result.freshness.state for h in hits if h.result.freshness})
    indexed = kb.store.count()
    kb.close()
    off, on = figures["without the check"], figures["with the check"]
    print(
        f"{indexed:,} chunks, {len(queries)} queries, "
        f"-k {args.k}, --mode {args.mode}, by file; each query once per route, in turns"
    )
    for name, row in figures.items():
        print(f"  {name:<18} p50 {row['p50']:8.2f} ms   p95 {row['p95']:8.2f} ms")
    print(
        f"  overhead           p50 {100 * (on['p50'] / off['p50'] - 1):+6.1f} %   "
        f"p95 {100 * (on['p95'] / off['p95'] - 1):+6.1f} %   (goal: at most +5 %)"
    )
    check = p50_p95(alone)
    print(
        f"  the check alone (the hits of each query): p50 {check['p50']:.2f} ms, "
        f"p95 {check['p95']:.2f} ms"
    )
    mark = p50_p95(marks)
    print(
        f"  the watermark (--json, MCP; once a search): p50 {mark['p50']:.2f} ms, "
        f"p95 {mark['p95']:.2f} ms"
    )
    print(f"  states of the first query's hits: {', '.join(states)}")
    print(f"load average before {load_before}, after {load_after}; {machine_info()}")


if __name__ == "__main__":
    main()
