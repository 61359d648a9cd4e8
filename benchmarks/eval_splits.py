"""``kb eval`` on the usable splits of the shared collections, as a user runs it: one ``kb eval
--json`` process per collection, mode and embedder, each index kept in ``--db-dir`` and reused.
Prints one row per run (nDCG@10, recall@100, MRR@10 at full precision) and, with ``--out``,
writes them as JSON, so two checkouts can be compared figure for figure (``--compare A B``).

    python benchmarks/eval_splits.py --data ../shared/eval --out before.json
    python benchmarks/eval_splits.py --compare before.json after.json

Only the splits the collections' README marks usable are read (scifact train, cranfield test,
cmrc2018 test, drcd dev); held-out ``*.enc`` files are never opened. ``--local`` adds the
offline MiniLM rows (``kbcli[local]``) on the English sets.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SPLITS = {
    "scifact": "train",
    "cranfield": "test",
    "cmrc2018-dev-retrieval": "test",
    "drcd-retrieval": "dev",
}
ENGLISH = ("scifact", "cranfield")


def runs(local: bool) -> list[tuple[str, str, str]]:
    rows = [(c, mode, "simple") for c in SPLITS for mode in ("keyword", "hybrid")]
    if local:
        rows += [(c, mode, "local") for c in ENGLISH for mode in ("semantic", "hybrid")]
    return rows


def kb_eval(kb: list[str], data: Path, db_dir: Path, collection: str, mode: str,
            embedder: str) -> dict:
    db = db_dir / f"{collection}-{embedder}.db"
    env = {**os.environ, "KB_EMBEDDER": embedder, "HOME": str(db_dir / "home")}
    env.pop("KB_CONFIG", None)
    (db_dir / "home").mkdir(parents=True, exist_ok=True)
    command = [*kb, "eval", str(data / collection), "--split", SPLITS[collection],
               "--mode", mode, "--db", str(db), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=db_dir)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return json.loads(done.stdout)


def figures(result: dict) -> dict:
    metrics = result.get("metrics", result)
    return {key: metrics[key] for key in sorted(metrics) if isinstance(metrics[key], float)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/eval"))
    parser.add_argument("--db-dir", type=Path, default=Path(".bench-cache/eval-splits"))
    parser.add_argument("--kb", default=f"{sys.executable} -m kbcli", help="the kb command")
    parser.add_argument("--local", action="store_true", help="also the MiniLM rows")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    args = parser.parse_args()
    if args.compare:
        a, b = (json.loads(p.read_text()) for p in args.compare)
        differ = 0
        for key in sorted(set(a) | set(b)):
            same = a.get(key) == b.get(key)
            differ += not same
            print(f"{'same ' if same else 'DIFF '} {key}: {a.get(key)} | {b.get(key)}")
        print(f"{differ} of {len(set(a) | set(b))} rows differ")
        raise SystemExit(1 if differ else 0)
    args.db_dir.mkdir(parents=True, exist_ok=True)
    data, results = args.data.resolve(), {}
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    for collection, mode, embedder in runs(args.local):
        began = time.monotonic()
        result = figures(kb_eval(args.kb.split(), data, args.db_dir.resolve(), collection, mode,
                                 embedder))
        key = f"{collection}/{mode}/{embedder}"
        results[key] = result
        shown_figures = [(k, v) for k, v in result.items() if k.startswith(("ndcg", "recall"))]
        shown = ", ".join(f"{k} {v:.4f}" for k, v in shown_figures)
        print(f"{key}: {shown} ({time.monotonic() - began:.0f} s)", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
