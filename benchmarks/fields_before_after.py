"""Before/after figures for field-aware keyword ranking: ``kbcli.eval.beir.evaluate`` of one
source tree (``--src``: this tree, or an older kbcli's ``src`` unpacked with ``git archive``)
in keyword and default (hybrid, built-in embedder) modes over the usable splits and the
man-page collection, with per-query nDCG@10 and hit@1/hit@3 kept for a paired bootstrap.

    python benchmarks/fields_before_after.py --src /tmp/kb-base/src --out before.json
    python benchmarks/fields_before_after.py --src src --out after.json
    python benchmarks/quality.py --write-only   # reads benchmarks/fields-{before,after}.json

The older tree's ``evaluate`` is used as it is; only its ``score_run`` is wrapped to keep the
per-query values (and hit@k, which it lacks). The man-page corpus is unpacked to a temporary
folder for trees that cannot read ``corpus.jsonl.gz``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS = [
    ("scifact", "train"),
    ("cranfield", "test"),
    ("cmrc2018-dev-retrieval", "test"),
    ("drcd-retrieval", "dev"),
    ("manpages", "test"),
]
MODES = ("keyword", "hybrid")


def ndcg(ranking, rels, k=10):
    dcg = sum(max(rels.get(d, 0), 0) / math.log2(i + 1) for i, d in enumerate(ranking[:k], 1))
    ideal = sorted((g for g in rels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, 1))
    return dcg / idcg if idcg else 0.0


def hit(ranking, rels, k):
    top = max((g for g in rels.values() if g > 0), default=0)
    return float(top > 0 and any(rels.get(d, 0) == top for d in ranking[:k]))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--src", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "eval")
    p.add_argument("--only", nargs="*")
    args = p.parse_args()
    sys.path.insert(0, str(args.src.resolve()))
    import kbcli.eval.beir as ev
    from kbcli.config.lookup import Config
    from kbcli.embedders import SimpleEmbedder

    captured: dict = {}
    original = ev.score_run

    def score_run(run, qrels, k=10):
        judged = [q for q, r in qrels.items() if any(g > 0 for g in r.values())]
        captured["per_query"] = {
            q: [
                ndcg(run.get(q, []), qrels[q]),
                hit(run.get(q, []), qrels[q], 1),
                hit(run.get(q, []), qrels[q], 3),
            ]
            for q in judged
        }
        return original(run, qrels, k)

    ev.score_run = score_run
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    with tempfile.TemporaryDirectory(prefix="kb-fields-") as tmp:
        man = Path(tmp) / "manpages"
        shutil.copytree(ROOT / "benchmarks" / "corpora" / "manpages", man)
        with (
            gzip.open(man / "corpus.jsonl.gz", "rb") as src,
            open(man / "corpus.jsonl", "wb") as dst,
        ):
            shutil.copyfileobj(src, dst)
        (man / "corpus.jsonl.gz").unlink()
        for collection, split in COLLECTIONS:
            if args.only and collection not in args.only:
                continue
            folder = man if collection == "manpages" else args.data / collection
            db = Path(tmp) / f"{collection}.db"
            for mode in MODES:
                key = f"{collection}|{mode}"
                started = time.perf_counter()
                r = ev.evaluate(
                    folder,
                    split=split,
                    mode=mode,
                    db=db,
                    embedder=SimpleEmbedder(),
                    config=Config(),
                )
                per = captured["per_query"]
                n = len(per)
                results[key] = {
                    "ndcg@10": sum(v[0] for v in per.values()) / n,
                    "hit@1": sum(v[1] for v in per.values()) / n,
                    "hit@3": sum(v[2] for v in per.values()) / n,
                    "queries": n,
                    "latency_ms": r["latency_ms"],
                    "seconds": round(time.perf_counter() - started, 1),
                    "per_query": per,
                }
                print(
                    key,
                    {k: results[key][k] for k in ("ndcg@10", "hit@1", "hit@3")},
                    file=sys.stderr,
                    flush=True,
                )
                args.out.write_text(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main()
