"""What scoring every query term costs against the former cap of the 32 rarest: the same
SQLite index (drcd dev, the usable split with the longest queries: half exceed 32 terms),
both limits interleaved query by query.

    python benchmarks/bench_scored_terms.py [--data /work/shared/eval] [--queries 1000]

Prints mean and p95 ms per query and the ratio (all / 32) for the packed executor (the SQL
executor it also measured went with the postings table in schema 4).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import kbcli.stores.sqlite.keyword as sqlite_keyword  # noqa: E402
from kbcli import KnowledgeBase, SimpleEmbedder, SQLiteStore  # noqa: E402
from kbcli.eval.beir import _ingest_corpus, load_beir  # noqa: E402
from kbcli.text.bm25 import MAX_SCORED_TERMS, select_terms  # noqa: E402


def stats(ms: list[float]) -> str:
    ms = sorted(ms)
    return f"mean {sum(ms) / len(ms):6.2f} ms  p95 {ms[int(0.95 * len(ms))]:6.2f} ms"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "eval")
    p.add_argument("--queries", type=int, default=1000)
    args = p.parse_args()
    ds = load_beir(args.data / "drcd-retrieval", "dev")
    queries = [ds.queries[q] for q in sorted(ds.qrels) if q in ds.queries][: args.queries]
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "kb.db")
        _ingest_corpus(KnowledgeBase(store=store, embedder=SimpleEmbedder()), ds, None)
        for executor in ("packed",):
            times: dict[int, list[float]] = {32: [], MAX_SCORED_TERMS: []}
            for query in queries[:20]:  # warm up (the pack is written on first use)
                store.keyword_search(query, k=200)
            for query in queries:
                for limit in times:
                    sqlite_keyword.select_terms = partial(select_terms, limit=limit)
                    start = time.perf_counter()
                    store.keyword_search(query, k=200)
                    times[limit].append((time.perf_counter() - start) * 1000)
            sqlite_keyword.select_terms = select_terms
            few, every = times[32], times[MAX_SCORED_TERMS]
            print(f"{executor:6s} 32 terms: {stats(few)}")
            print(f"{executor:6s} all    : {stats(every)}  ratio {sum(every) / sum(few):.2f}")
        store.close()


if __name__ == "__main__":
    main()
