"""What a ``kb search`` that embeds its query costs, as a whole process, against a keyword one.

    python benchmarks/bench_search_model.py [--db INDEX] [--runs 15] [--base OTHER/src]

Each round runs, one after the other, ``kb search Q --mode keyword``, ``kb search Q`` (hybrid,
the default: the query is embedded) and ``kb search Q --mode semantic``, with a different
query every round (tldr's judged task queries, ``benchmarks/corpora/tldr/queries.jsonl``, or
a list below for the example folder), so that no variant meets a warmer cache than the others;
``--base`` adds the same commands on another checkout's sources (before) to every round.
Printed per variant: wall time (min / median / max), CPU time (user + system, median), the
largest peak RSS of a run, and the median over rounds of its wall time divided by the same
round's keyword search; the load average at the start, during and at the end (the goals are
for a quiet machine: state the load).

``--db`` searches an index built with the local model (e.g. the tldr pages; with ``--base``, a
copy of it per tree, of a schema both read); without it, one is built from ``examples/docs``
with ``--embedder local`` in a temporary folder, by each tree. Runs this
checkout's ``src`` (``common.tree_env``) with bytecode caching on, no API key in the
environment.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import find_kb, run_child, tree_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QUERIES = ROOT / "benchmarks" / "corpora" / "tldr" / "queries.jsonl"
FALLBACK = [
    "I cannot get into my account", "how do I reset my password", "change the billing plan",
    "delete my data", "two factor authentication", "export invoices as pdf",
    "where is my storage quota", "add a team member", "rotate the api token",
    "cancel the subscription", "login keeps failing", "upgrade to the pro plan",
]  # fmt: skip
VARIANTS = {
    "keyword": ["--mode", "keyword"],
    "hybrid (default)": [],
    "semantic": ["--mode", "semantic"],
}


def queries() -> list[str]:
    if QUERIES.exists():
        with QUERIES.open(encoding="utf-8") as fh:
            return [json.loads(line)["text"] for line in fh if line.strip()]
    return FALLBACK


def build_index(kb: Path, env: dict[str, str], cwd: str) -> None:
    done = subprocess.run(
        [str(kb), "-q", "ingest", str(ROOT / "examples" / "docs"), "--embedder", "local"],
        env=env, cwd=cwd, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"building the index failed: {done.stderr.strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", help="an index built with the local model")
    parser.add_argument("--runs", type=int, default=15, help="rounds (one query each)")
    parser.add_argument("--kb", help="path of the kb command")
    parser.add_argument("--base", help="another checkout's src, run in the same rounds (before)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    kb = find_kb(args.kb)
    load_start = [round(x, 2) for x in os.getloadavg()]
    texts = queries() if args.db else FALLBACK
    with tempfile.TemporaryDirectory() as tmp:
        env = tree_env()
        trees = {"after": env}
        if args.base:
            trees = {"before": dict(env, PYTHONPATH=str(Path(args.base).resolve())), **trees}
        for tree, tree_env_ in trees.items():
            # an index per tree: an older kbcli cannot read a newer schema, and a newer one
            # upgrades what it opens (a copy of --db, then)
            tree_env_["KB_DB"] = str(Path(tmp) / f"{tree}.db")
            if args.db and len(trees) > 1:
                with sqlite3.connect(args.db) as src, sqlite3.connect(tree_env_["KB_DB"]) as dst:
                    src.backup(dst)
            elif args.db:
                tree_env_["KB_DB"] = str(Path(args.db).resolve())
            else:
                build_index(kb, tree_env_, tmp)
        rows = {(tree, name): [] for tree in trees for name in VARIANTS}
        for tree_env_ in trees.values():  # warm the file cache once
            run_child([str(kb), "search", "warm up", "--mode", "semantic"], tree_env_, tmp)
        loads = []
        for round_ in range(args.runs):
            query = texts[round_ % len(texts)]
            for tree, tree_env_ in trees.items():
                for name, extra in VARIANTS.items():
                    done = run_child([str(kb), "search", query, *extra], tree_env_, tmp)
                    if done.returncode != 0:
                        raise SystemExit(f"{tree} {name} {query!r}: {done.stderr.strip()}")
                    rows[(tree, name)].append(done)
            loads.append(os.getloadavg()[0])
    results = {}
    for (tree, name), done in rows.items():
        wall = [d.wall_s * 1000 for d in done]
        keyword = [d.wall_s * 1000 for d in rows[(tree, "keyword")]]
        results[f"{name} [{tree}]"] = {
            "min_ms": round(min(wall), 1),
            "median_ms": round(statistics.median(wall), 1),
            "max_ms": round(max(wall), 1),
            "cpu_median_ms": round(statistics.median(d.cpu_s * 1000 for d in done), 1),
            "peak_rss_mb": max(d.peak_rss_mb for d in done),
            "vs_keyword": round(statistics.median(w / k for w, k in zip(wall, keyword)), 2),
        }
    out = {
        "runs": args.runs,
        "index": args.db or "examples/docs (local)",
        "load_start": load_start,
        "load_end": [round(x, 2) for x in os.getloadavg()],
        "load_during": [round(min(loads), 2), round(max(loads), 2)],
        "results": results,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"index: {out['index']}   rounds: {args.runs}   load average {load_start[0]} at the "
          f"start, {out['load_during'][0]}-{out['load_during'][1]} during, "
          f"{out['load_end'][0]} at the end")  # fmt: skip
    for label, f in results.items():
        print(f"{label:28} wall min {f['min_ms']:6.0f} / median {f['median_ms']:6.0f} / max "
              f"{f['max_ms']:6.0f} ms   cpu {f['cpu_median_ms']:6.0f} ms   peak "
              f"{f['peak_rss_mb']:6.1f} MB   x{f['vs_keyword']:.2f} keyword")  # fmt: skip


if __name__ == "__main__":
    main()
