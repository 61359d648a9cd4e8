"""Filtered search at scale: dense and keyword search with no filter, a folder filter and a
selective filter, in-process (first query and p50) and as whole ``kb search`` commands.

    python benchmarks/bench_filters.py --size 100k
    python benchmarks/bench_filters.py --size 100k --compare /tmp/old/src   # before -> after

The corpus and index are bench_all.py's (written and ingested here when missing, in
``--workdir``): chunk ``i`` lies in folder ``g{i % 10}``, ten chunks per file. Filters:

- *folder*: ``source`` under ``corpus/g3/`` (10 % of the chunks; what ``kb search --in`` sends);
- *selective*: the ``title`` of three files (30 chunks): dense search finds too few of them in
  the first windows of its ranking and falls back to the allowed set.

In-process queries are content words; whole commands use a query of three common words, whose
candidates are too many to test one by one, so a new filter reads its allowed set.

Each measurement runs in a fresh process with ``PYTHONPATH`` set to each source tree given
(this checkout's ``src`` first, then ``--compare``), alternating, so both see the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_all  # noqa: E402

QUERIES = 30
CHILD = r"""
import json, statistics, sys, time
from kbcli import SQLiteStore
from kbcli.filters.syntax import under_folders
from kbcli.stores.sqlite import vectors

db, corpus, queries = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
store = SQLiteStore(db)
with store._db.read() as conn:
    sql = "SELECT doc FROM chunks ORDER BY doc LIMIT ?"
    rows = [r[0] for r in conn.execute(sql, (len(queries),))]
    _, matrix = vectors.read_vectors(conn, rows)
filters = {
    "none": None,
    "folder": under_folders([corpus + "/g3"]),
    "selective": {"title": {"$in": ["f0000003", "f0000013", "f0000023"]}},
}
out = {}
for name, flt in filters.items():
    for route in ("dense", "keyword"):
        times = []
        for q, vec in zip(queries, matrix):
            start = time.perf_counter()
            if route == "dense":
                store.search(list(vec), k=10, filter=flt)
            else:
                store.keyword_search(q, k=10, filter=flt)
            times.append((time.perf_counter() - start) * 1000)
        p50 = statistics.median(times[1:])
        out[f"{route}, {name}"] = {"first_ms": round(times[0], 2), "p50_ms": round(p50, 2)}
print(json.dumps(out))
"""


def child(src: Path, db: Path, corpus: Path, queries: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(db), str(corpus), json.dumps(queries)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def command_ms(src: Path, d: Path, argv: list[str], runs: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(src), "KB_CONFIG": str(d / "jianmu.yaml")}
    base = [sys.executable, "-m", "kbcli", "-q", "--db", str(d / "kb.db"), "search"]
    times = []
    for _ in range(runs + 1):  # the first run warms the page cache
        start = time.perf_counter()
        subprocess.run([*base, *argv], env=env, cwd=d, capture_output=True, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times[1:]), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="100k")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/kb-bench-all"))
    ap.add_argument("--compare", type=Path, action="append", default=[])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    n = bench_all.parse_size(args.size)
    d = args.workdir / str(n)
    d.mkdir(parents=True, exist_ok=True)
    corpus = d / "corpus"
    if bench_all.write_corpus(n, corpus) is not None or not (d / "kb.db").exists():
        kb = Path(sys.executable).with_name("kb")
        print(json.dumps(bench_all.ingest(kb, d, corpus, "simple")), file=sys.stderr)
    queries = bench_all.the_queries(QUERIES)[0][:QUERIES]
    trees = [HERE.parent / "src", *args.compare]
    report: dict = {"chunks": n, "load_start": os.getloadavg()[0], "trees": [str(t) for t in trees]}
    for tree in trees:  # warm: the first search writes the pack and the vector cache
        child(tree, d / "kb.db", corpus, queries[:2])
    rows: dict[str, dict] = {str(t): {} for t in trees}
    for tree in trees:
        rows[str(tree)].update(child(tree, d / "kb.db", corpus, queries))
    word = bench_all.the_queries(1)[1][0]  # common words: too many candidates to test each
    whole = {
        "kb search --mode keyword": [word, "--mode", "keyword"],
        "kb search --mode keyword --in corpus/g3": [word, "--mode", "keyword", "--in", "corpus/g3"],
        "kb search --mode keyword --filter title=f0000003": [
            word,
            "--mode",
            "keyword",
            "--filter",
            "title=f0000003",
        ],  # fmt: skip
        "kb search (hybrid) --filter title=f0000003": [word, "--filter", "title=f0000003"],
    }
    for name, argv in whole.items():
        for tree in trees:
            rows[str(tree)][name] = {"median_ms": command_ms(tree, d, argv, args.runs)}
    report["load_end"] = os.getloadavg()[0]
    print(json.dumps(report))
    names = list(rows[str(trees[0])])
    print("| measurement | " + " | ".join(str(t) for t in trees) + " |")
    print("|---|" + "---|" * len(trees))
    for name in names:
        cells = []
        for tree in trees:
            r = rows[str(tree)][name]
            cells.append(
                f"{r['median_ms']} ms"
                if "median_ms" in r
                else f"{r['p50_ms']} ms (first {r['first_ms']})"
            )
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
