"""Keyword search: kb (packed postings) against SQLite FTS5, bm25s and tantivy.

    python benchmarks/bench_keyword.py                      # 10k and 100k chunks
    python benchmarks/bench_keyword.py --sizes 1000000      # 1M (slow to build)
    python benchmarks/bench_keyword.py --workdir /tmp/kbk   # keep the built indexes there

One deterministic corpus per size, the same for every engine: words drawn from a Zipf(1.1)
distribution over a 50,000-word synthetic vocabulary, 40-90 words per chunk, 10 chunks per
source file, metadata ``group = i % 10``. Queries: 2-4 content words (vocabulary ranks
50-5,000) and 3 common words (the 50 most frequent ranks, the worst case: long postings), each
with and without the filter ``group = 3``, and 2-5 content words drawn from a random chunk.
Top-10, in-process; each query timed once after one warm-up query outside the set (p50 and
p95 ms; the best of 3 runs as the extra ``best_p50``). The peers (:class:`common.Peers`)
run in turns with kb's default search query by query (kb's ``... in turns`` rows).
kb runs its default (BM25 with source context) and chunk-only BM25 (the SQL executor it also
ran until schema 4 is gone with the postings table; ``keyword-results*.json`` keep its rows as
``kb_sql_before``); "index only" is the keyword index's own search (ids and scores, as FTS5 and
bm25s return them), the others ``keyword_search`` with the documents. Build times: kb from
scratch (SQLite writes), the packed index from the forward indexes; the peers from the texts.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import sqlite3
import string
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import Peers, chunk_queries  # noqa: E402
from common import latency as timed  # noqa: E402  (each query once, after a warm-up)
from common import once_in_turns as timed_in_turns  # noqa: E402

from kbcli import Analyzer, Document, SQLiteStore  # noqa: E402
from kbcli.text.bm25 import BM25Params  # noqa: E402

K = 10


def make_vocab(n: int, rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 10))))
    ordered = sorted(words)  # a set's order changes with the process's hash seed
    rng.shuffle(ordered)
    return ordered


def corpus(n: int) -> tuple[list[str], list[str]]:
    """(texts, vocabulary) for ``n`` chunks; the same for every n-prefix."""
    rng = random.Random(7)
    vocab = make_vocab(50_000, rng)
    cum = list(itertools.accumulate(1 / (r + 1) ** 1.1 for r in range(len(vocab))))
    texts = [" ".join(rng.choices(vocab, cum_weights=cum, k=rng.randint(40, 90))) for _ in range(n)]
    return texts, vocab


def queries(vocab: list[str], n: int) -> tuple[list[str], list[str]]:
    rng = random.Random(11)
    content = [" ".join(rng.sample(vocab[50:5000], rng.randint(2, 4))) for _ in range(n)]
    common = [" ".join(rng.sample(vocab[:50], 3)) for _ in range(max(20, n // 5))]
    return content, common


def build_kb(db: Path, texts: list[str], files_per: int) -> tuple[SQLiteStore, float | None]:
    analyzer = Analyzer(language="none", stem=False, stopwords=False)
    store = SQLiteStore(db, analyzer=analyzer)
    if store.count() == len(texts):
        return store, None
    started = time.perf_counter()
    for start in range(store.count(), len(texts), 2000):
        docs = [
            Document(f"c{i}", texts[i], {"group": i % 10, "source": f"/docs/f{i // files_per}.md"})
            for i in range(start, min(start + 2000, len(texts)))
        ]
        store.add(docs)
    return store, time.perf_counter() - started


def run_size(n: int, workdir: Path, n_queries: int, kb_only: bool = False) -> dict:

    vocab = make_vocab(50_000, random.Random(7))  # corpus()'s vocabulary, without the texts
    content, common = queries(vocab, n_queries)
    result: dict = {"chunks": n}
    db = workdir / f"kb-{n}.db"
    texts: list[str] = []
    if kb_only and db.exists():
        with SQLiteStore(db, analyzer=Analyzer(language="none", stem=False, stopwords=False)) as s:
            complete = s.count() == n
    if not (kb_only and db.exists() and complete):
        texts = corpus(n)[0]
    store, build = build_kb(db, texts, 10) if texts else build_kb(db, [""] * n, 10)
    result["kb_build_s"] = build
    keywords = store._keywords
    keywords.packed_path.unlink(missing_ok=True)
    started = time.perf_counter()
    store.keyword_search(content[0], K)
    result["kb_pack_build_s"] = time.perf_counter() - started
    group = {"group": 3}
    kb: dict = {}

    def index_only(q: str, filter=None) -> None:  # ids and scores, as FTS5 and bm25s return
        with store._db.read() as conn:
            keywords.search(conn, q, K, filter, BM25Params(1.5, 0.75, 2.0))

    for label, qs in (("content", content), ("common", common)):
        kb[label + " index only"] = timed(index_only, qs)
        kb[label + "+filter index only"] = timed(lambda q: index_only(q, group), qs)
        kb[label] = timed(lambda q: store.keyword_search(q, K), qs)
        kb[label + "+filter"] = timed(lambda q: store.keyword_search(q, K, group), qs)
        kb[label + " chunk-only"] = timed(
            lambda q: store.keyword_search(q, K, source_weight=0.0), qs
        )
    # The filter cache is keyed by (filter, generation): the first query with a new filter pays
    # for the allowed set; measure that too, with a different filter value per query.
    fresh = [{"group": i % 10} for i in range(50)]
    pairs = list(zip(content[:50], fresh))
    kb["content+new filter"] = timed(lambda p: keywords_search_new(store, *p), pairs)
    if kb_only:
        store.close()
        result["kb"] = kb
        return result
    store.close()
    result["kb"] = kb

    # The peers built from the same texts, each query set timed with kb's default search in
    # turns, query by query, each query once (common.once_in_turns).
    peers = Peers(texts, K)
    store = SQLiteStore(db, analyzer=Analyzer(language="none", stem=False, stopwords=False))
    chunk = chunk_queries(texts, n_queries + 1, {w for q in common for w in q.split()})
    for name in peers.search:
        result[f"{name}_build_s"] = peers.build_s[name]
        result[name] = {}
    for label, qs in (("content", content), ("common", common), ("chunk", chunk)):
        for tail, f, grp in (("", None, None), ("+filter", group, 3)):
            fns = {"kb": lambda q, f=f: store.keyword_search(q, K, f)}
            fns.update({name: lambda q, s=s, g=grp: s(q, g) for name, s in peers.search.items()})
            for name, ms in timed_in_turns(fns, qs[1:], qs[0]).items():
                if name == "kb":
                    kb[f"{label}{tail} in turns"] = ms
                else:
                    result[name][label + tail] = ms
    store.close()
    return result


def goal_ratios(result: dict) -> dict[str, float]:
    """The ratios of issue 16's keyword goals from one size's result (p50s of one run): kb's
    index-only search against FTS5 and bm25s (content words: at most 0.5; common words: at
    most 3 against bm25s) and with a filter against without (at most 1.5)."""
    kb, out = result["kb"], {}
    for label in ("content", "common"):
        out[f"{label}: filter / none"] = (
            kb[f"{label}+filter index only"]["p50"] / kb[f"{label} index only"]["p50"]
        )
        for engine in ("fts5", "bm25s", "tantivy"):
            if engine in result:
                out[f"{label}: kb / {engine}"] = (
                    kb[f"{label} in turns"]["p50"] / result[engine][label]["p50"]
                )
    return {name: round(value, 3) for name, value in out.items()}


def keywords_search_new(store: SQLiteStore, q: str, filter: dict) -> None:
    store._keywords._filters.clear()
    store.keyword_search(q, K, filter)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/kb-bench-keyword"))
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--kb-only", action="store_true", help="skip FTS5, bm25s and the SQL executor")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    import bm25s
    import numpy as np

    info = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "numpy": np.__version__,
        "bm25s": bm25s.__version__,
        "load_before": os.getloadavg(),
    }
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        r = run_size(size, args.workdir, args.queries, args.kb_only)
        r["goal_ratios"] = goal_ratios(r)
        results.append(r)
        print(json.dumps(r, indent=1), flush=True)
    info["load_after"] = os.getloadavg()
    print(json.dumps(info, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"info": info, "results": results}, indent=1))


if __name__ == "__main__":
    main()
