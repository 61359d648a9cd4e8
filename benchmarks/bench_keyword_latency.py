"""Keyword latency, kb against SQLite FTS5, in one process, query by query in turns.

    python benchmarks/bench_keyword_latency.py /tmp/kb-bench-all/100000
    python benchmarks/bench_keyword_latency.py DIR --fts /tmp/fts-100k.db   # keep the FTS5 table
    python benchmarks/bench_keyword_latency.py DIR --profile 2000          # where the time goes

DIR is a size folder bench_all.py built (``kb.db``, ``jianmu.yaml``, ``texts.txt``; a copy of
one works: a first search may write the keyword pack beside the database). Its content- and
common-word queries, with and without its folder filter, run as ``store.keyword_search(q, 10)``
and as bench_all's FTS5 query over the same texts, each query in turns (the two meet the same
moments of a shared machine), p50 / p95 of each query's best of ``--repeat`` runs. bench_all
times the engines in separate processes; this is the quick check of the ratio between them.
``--profile N`` runs cProfile over N content-word searches and prints the top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sqlite3
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from bench_all import GROUP, K, the_queries  # noqa: E402
from bench_keyword import build_fts, fts_search  # noqa: E402
from common import load_average, paired_latency  # noqa: E402


def fts_table(texts: Path, cache: Path | None) -> sqlite3.Connection:
    """bench_all's FTS5 table of ``texts``, in memory (read from / saved to ``cache``)."""
    if cache is not None and cache.exists():
        conn = sqlite3.connect(":memory:")
        disk = sqlite3.connect(cache)
        disk.backup(conn)
        disk.close()
        return conn
    conn, _ = build_fts(texts.read_text().splitlines())
    conn.commit()  # a backup waits for ever on a connection in a transaction
    if cache is not None:
        disk = sqlite3.connect(cache)
        conn.backup(disk)
        disk.close()
    return conn


def folder_filter(db: Path) -> dict:
    """bench_all's filter (folder g3) for the paths this database was ingested from."""
    from kbcli.filter_syntax import under_folders

    conn = sqlite3.connect(db)
    (source,) = conn.execute("SELECT source FROM chunks WHERE source IS NOT NULL").fetchone()
    conn.close()
    return under_folders([str(Path(source).parent.parent / f"g{GROUP}")])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, help="a size folder of bench_all.py (or a copy)")
    ap.add_argument("--queries", type=int, default=200, help="content-word queries (common: 1/5)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per query, the best counts")
    ap.add_argument("--fts", type=Path, default=None, help="keep the FTS5 table in this file")
    ap.add_argument("--profile", type=int, default=0, help="cProfile this many kb searches")
    args = ap.parse_args()
    import numpy  # noqa: F401  (loaded in any process that embeds: the packed executor runs)

    from kbcli import KnowledgeBase, load_config

    d = args.dir
    kb = KnowledgeBase.open(d / "kb.db", config=load_config(d / "jianmu.yaml"), create=False)
    store = kb.store
    content, common = the_queries(args.queries)
    store.keyword_search(content[0], K)  # maps the pack (or writes it)
    if args.profile:
        searches = (content * (args.profile // len(content) + 1))[: args.profile]
        profile = cProfile.Profile()
        profile.runcall(lambda: [store.keyword_search(q, K) for q in searches])
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        return
    fts = fts_table(d / "texts.txt", args.fts)
    flt = folder_filter(d / "kb.db")
    print(f"{store.count()} chunks; load average {load_average()}")
    print(f"{'queries':16} {'kb p50':>8} {'p95':>7} {'FTS5 p50':>9} {'p95':>7}  kb/FTS5 p50")
    for name, qs in (("content", content), ("common", common)):
        for f, group, tail in ((None, None, ""), (flt, GROUP, "+filter")):
            pair = {
                "kb": lambda q, f=f: store.keyword_search(q, K, f),
                "fts5": lambda q, g=group: fts_search(fts, q, g),
            }
            r = paired_latency(pair, qs, args.repeat)
            kb_ms, fts_ms = r["kb"], r["fts5"]
            print(
                f"{name + tail:16} {kb_ms['p50']:8.3f} {kb_ms['p95']:7.3f} {fts_ms['p50']:9.3f}"
                f" {fts_ms['p95']:7.3f}  {kb_ms['p50'] / fts_ms['p50']:.2f}"
            )
    print(f"load average {load_average()}")
    kb.close()


if __name__ == "__main__":
    main()
