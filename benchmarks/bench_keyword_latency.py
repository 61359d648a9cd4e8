"""Keyword search as a user meets it: kb against SQLite FTS5, bm25s and tantivy, in one process,
each query asked once, engines in turns query by query; prints each keyword goal's ratio.

    python benchmarks/bench_keyword_latency.py /tmp/kb-bench-all/100000
    python benchmarks/bench_keyword_latency.py DIR --json benchmarks/keyword-once-100k.json
    python benchmarks/bench_keyword_latency.py DIR --profile 200     # first calls vs repeats

DIR is a size folder bench_all.py built (``kb.db``, ``jianmu.yaml``, ``texts.txt``; a copy of
one works: a first search may write the keyword pack beside the database). The peers are built
in this process from ``texts.txt`` (:class:`common.Peers`). Three query sets:

- *chunk words*: 2-5 content words drawn from a random chunk (:func:`common.chunk_queries`),
  the postings real queries meet;
- *content words* (the light set): bench_keyword's 2-4 words of vocabulary ranks 50-5,000
  (fewer postings);
- *3 common words*: three of the 50 most frequent words (the longest postings).

Each set, with and without the folder filter (chunk ``i`` in folder ``g{i % 10}``; FTS5's
``grp``, bm25s's weight mask and tantivy's term query select the same chunks), runs through
:func:`common.once_in_turns`: one warm-up query outside the set, then every query timed once
per engine (p50 / p95), and its best of ``--repeat`` as the extra column. The filtered kb
rows use a filter used before (the warm-up query carries it). kb runs its default
(``store.keyword_search``: BM25 with source context, documents fetched; in turns with the
peers), then chunk-only BM25 (``source_weight=0``) and the keyword index alone (ranked ids and
scores, what the peers return), each of those in a knowledge base opened afresh.
``--profile N`` profiles N first calls of kb's default search and the same N again (repeats).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sqlite3
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from bench_all import GROUP, K, query_sets  # noqa: E402
from common import Peers, load_average, machine_info, once_in_turns  # noqa: E402

# Issue 30's keyword goals at 100k: (name, measured row, peer row, at most).
GOALS = (
    ("chunk words: kb default / FTS5 ≤ 0.5", "chunk kb", "chunk fts5", 0.5),
    ("chunk words: kb default / tantivy ≤ 2", "chunk kb", "chunk tantivy", 2.0),
    ("light content words: kb default / FTS5 ≤ 0.5", "content kb", "content fts5", 0.5),
    ("light content words: kb default / tantivy ≤ 2", "content kb", "content tantivy", 2.0),
    ("3 common words: kb default / bm25s ≤ 1", "common kb", "common bm25s", 1.0),
    ("chunk words: filtered / unfiltered ≤ 1.2", "chunk+filter kb", "chunk kb", 1.2),
    ("3 common words: filtered / unfiltered ≤ 1.2", "common+filter kb", "common kb", 1.2),
)


def folder_filter(db: Path) -> dict:
    """bench_all's filter (folder g3) for the paths this database was ingested from."""
    from kbcli.filter_syntax import under_folders

    conn = sqlite3.connect(db)
    (source,) = conn.execute("SELECT source FROM chunks WHERE source IS NOT NULL").fetchone()
    conn.close()
    return under_folders([str(Path(source).parent.parent / f"g{GROUP}")])


KB_VARIANTS = ("kb", "kb chunk-only", "kb index only")


def kb_search(store, variant: str, flt: dict | None):
    """One of kb's :data:`KB_VARIANTS`: the default search, chunk-only BM25, the index alone."""
    from kbcli.bm25 import BM25Params

    if variant == "kb":
        return lambda q: store.keyword_search(q, K, flt)
    if variant == "kb chunk-only":
        return lambda q: store.keyword_search(q, K, flt, source_weight=0.0)
    keywords, params = store._keywords, BM25Params(1.5, 0.75, 2.0)

    def index_only(q: str) -> None:
        with store._db.read() as conn:
            keywords.search(conn, q, K, flt, params)

    return index_only


def open_kb(d: Path):
    """The knowledge base of ``d``, its pack mapped (a first search)."""
    from kbcli import KnowledgeBase, load_config

    kb = KnowledgeBase.open(d / "kb.db", config=load_config(d / "jianmu.yaml"), create=False)
    kb.store.keyword_search("warmup", K)
    return kb


def measure(d: Path, peers: Peers, sets: dict[str, list[str]], repeat: int) -> dict[str, dict]:
    """Every row: kb's default search in turns with the peers, query by query; then chunk-only
    and the index alone, each in a knowledge base opened afresh (the variants share the page
    cache and the mapped pack: run in turns, only the first of a turn would meet a query
    first)."""
    flt = folder_filter(d / "kb.db")
    rows: dict[str, dict] = {}
    for variant in KB_VARIANTS:
        kb = open_kb(d)
        for name, qs in sets.items():
            for tail, f in (("", None), ("+filter", flt)):
                fns = {variant: kb_search(kb.store, variant, f)}
                if variant == "kb":
                    group = GROUP if f else None
                    fns.update(
                        {e: lambda q, s=s, g=group: s(q, g) for e, s in peers.search.items()}
                    )
                for engine, ms in once_in_turns(fns, qs[1:], qs[0], repeat=repeat).items():
                    rows[f"{name}{tail} {engine}"] = ms
        kb.close()
    return rows


def profile(store, queries: list[str]) -> None:
    """cProfile of first calls of ``queries`` through kb's default search, then of repeats."""
    for label in ("first calls", "repeats"):
        prof = cProfile.Profile()
        started = time.perf_counter()
        prof.runcall(lambda: [store.keyword_search(q, K) for q in queries])
        ms = (time.perf_counter() - started) * 1000 / len(queries)
        print(f"--- {label}: {ms:.3f} ms per query (under the profiler)")
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, help="a size folder of bench_all.py (or a copy)")
    ap.add_argument("--queries", type=int, default=200, help="per set (common words: 1/5)")
    ap.add_argument("--repeat", type=int, default=3, help="calls per query for the best-of column")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--profile", type=int, default=0, help="profile this many kb first calls")
    args = ap.parse_args()
    import numpy  # noqa: F401  (loaded in any process that embeds: the packed executor runs)

    d = args.dir
    texts = (d / "texts.txt").read_text().splitlines()
    sets = query_sets(texts, args.queries)
    if args.profile:
        profile(open_kb(d).store, sets["chunk"][1 : args.profile + 1])
        return
    info = machine_info()
    info.update(load_start=load_average(), command="python " + " ".join(sys.argv))
    peers = Peers(texts, K)
    del texts
    rows = measure(d, peers, sets, args.repeat)
    info["load_end"] = load_average()
    goals = []
    for goal, measured, peer, most in GOALS:
        ratio = rows[measured]["p50"] / rows[peer]["p50"]
        goals.append({"goal": goal, "measured_ms": rows[measured]["p50"],
                      "peer_ms": rows[peer]["p50"], "ratio": round(ratio, 2),
                      "met": ratio <= most})  # fmt: skip
    print(f"{peers.n} chunks; peers built in {peers.build_s} s;"
          f" load {info['load_start']} -> {info['load_end']}")  # fmt: skip
    print(f"{'set engine':34} {'p50':>8} {'p95':>8} {'best-of p50':>12}")
    for name, ms in rows.items():
        print(f"{name:34} {ms['p50']:8.3f} {ms['p95']:8.3f} {ms['best_p50']:12.3f}")
    print(f"\n{'goal (p50, each query once)':46} {'kb':>7} {'peer':>7} {'ratio':>6}  met")
    for g in goals:
        print(f"{g['goal']:46} {g['measured_ms']:7.3f} {g['peer_ms']:7.3f} {g['ratio']:6.2f}"
              f"  {'yes' if g['met'] else 'NO'}")  # fmt: skip
    if args.json:
        result = {"info": info, "chunks": peers.n, "peer_build_s": peers.build_s,
                  "rows": rows, "goals": goals}  # fmt: skip
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
