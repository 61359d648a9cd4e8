"""Hybrid quality before and after fusion became independent of recall depth: per query, on
the usable BEIR splits (``kbcli.eval.beir.evaluate``, what ``kb eval DATASET`` runs) and on
the judged tldr task questions over the unpacked tldr pages (``evaluate_questions``, what
``kb eval --queries`` runs: kb search's own path), with the built-in embedder and MiniLM.

    python benchmarks/fusion_depth.py run --src /tmp/kb-base/src --out before.json --db-dir DIR
    python benchmarks/fusion_depth.py run --src src --out after.json --db-dir DIR
    python benchmarks/fusion_depth.py compare before.json after.json
    python benchmarks/fusion_depth.py latency --db DIR/cranfield-minilm.db \\
        --queries SHARED/eval/cranfield/queries.jsonl --windows 50,100,200

``run`` evaluates one source tree (``--src``: this tree, or an older kbcli's ``src`` unpacked
with ``git archive``) in hybrid mode and keeps each query's nDCG@10, hit@1, hit@3, MRR@10 and
(BEIR) Recall@100; the indexes go to ``--db-dir`` and are reused by the next run (same ingest
path: the embedding is paid once). ``--window N`` (this tree only) is the study of the fusion
window: every hybrid search reads each route's best N. ``compare`` prints each set's
figures and the paired difference after − before with its 95% bootstrap interval over
queries (``kbcli.eval.questions.bootstrap_interval``, 2,000 resamples), in markdown.
``run --search-k 10`` ranks the BEIR sets through kb search's own path (files by their best
chunk, ``-k 10``) instead of kb eval's 200-chunk pool. ``latency`` times this tree's hybrid
search per fusion window, interleaved.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPLITS = {
    "scifact": "train",
    "cranfield": "test",
    "cmrc2018-dev-retrieval": "test",
    "drcd-retrieval": "dev",
}
TLDR = "tldr"  # the live task questions on the unpacked pages
METRICS = ("ndcg@10", "hit@1", "hit@3", "mrr@10", "recall@100")


def default_data() -> Path:
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "eval").is_dir():
            return base / "shared" / "eval"
    return ROOT.parent / "shared" / "eval"


def make_embedder(name: str) -> Any:
    if name == "simple":
        from kbcli.embedders import SimpleEmbedder

        return SimpleEmbedder()
    if name == "minilm":
        from kbcli.embedders.local import LocalEmbedder

        return LocalEmbedder()
    raise SystemExit(f"unknown embedder {name}: simple or minilm")


def set_window(window: int) -> None:
    """Every hybrid search of this process reads each route's best ``window`` (study only)."""
    import kbcli.search.fusion as scoring
    from kbcli.search import combine, pipeline, retrievers

    if not hasattr(scoring, "FUSION_WINDOW"):
        raise SystemExit("--window needs a tree with a fusion window")
    retrievers.FUSION_WINDOW = window
    pipeline.FUSION_WINDOW = window
    assert combine.fuse.__kwdefaults__ is not None
    combine.fuse.__kwdefaults__["window"] = window
    scoring.FUSION_WINDOW = window


def ndcg(ranking: list[str], rels: dict[str, int], k: int = 10) -> float:
    dcg = sum(max(rels.get(d, 0), 0) / math.log2(i + 1) for i, d in enumerate(ranking[:k], 1))
    ideal = sorted((g for g in rels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, 1))
    return dcg / idcg if idcg else 0.0


def hit(ranking: list[str], rels: dict[str, int], k: int) -> float:
    top = max((g for g in rels.values() if g > 0), default=0)
    return float(top > 0 and any(rels.get(d, 0) == top for d in ranking[:k]))


def mrr(ranking: list[str], rels: dict[str, int], k: int = 10) -> float:
    return next((1.0 / i for i, d in enumerate(ranking[:k], 1) if rels.get(d, 0) > 0), 0.0)


def recall(ranking: list[str], rels: dict[str, int], k: int = 100) -> float:
    relevant = {d for d, g in rels.items() if g > 0}
    return len(relevant.intersection(ranking[:k])) / len(relevant) if relevant else 0.0


def run_beir(name: str, embedder: str, data: Path, db_dir: Path) -> dict[str, Any]:
    """``evaluate`` of one split in hybrid mode, each query's metrics captured from the run it
    scores (the tree's own ranking of documents)."""
    import kbcli.eval.beir as ev
    from kbcli.config.lookup import Config

    captured: dict[str, Any] = {}
    original = ev.score_run

    def score_run(run: Any, qrels: Any, k: int = 10) -> Any:
        captured["per_query"] = {
            q: [
                f(run.get(q, []), rels)
                for f in (ndcg, lambda r, g: hit(r, g, 1), lambda r, g: hit(r, g, 3), mrr, recall)
            ]  # fmt: skip
            for q, rels in qrels.items()
            if any(g > 0 for g in rels.values())
        }
        return original(run, qrels, k)

    ev.score_run = score_run
    try:
        result = ev.evaluate(
            data / name,
            split=SPLITS[name],
            mode="hybrid",
            db=db_dir / f"{name}-{embedder}.db",
            embedder=make_embedder(embedder),
            config=Config(),
        )
    finally:
        ev.score_run = original
    return {"per_query": captured["per_query"], "latency_ms": result["latency_ms"]}


def run_beir_search(name: str, embedder: str, data: Path, db_dir: Path, k: int) -> dict[str, Any]:
    """The judged queries of one split through ``kbcli.search.query.search`` by file at ``-k k``
    (what
    ``kb search -k K`` shows; each document is its chunks' source) on the index ``run_beir``
    built: nDCG@10, hit@1, hit@3 and MRR@10 of the files shown."""
    import time as clock

    from kbcli.eval.beir import load_beir
    from kbcli.knowledge_base import KnowledgeBase
    from kbcli.search.query import search
    from kbcli.types import SearchOptions

    ds = load_beir(data / name, SPLITS[name])
    kb = KnowledgeBase.open(str(db_dir / f"{name}-{embedder}.db"), create=False)
    per, latencies = {}, []
    try:
        for q, rels in ds.qrels.items():
            if q not in ds.queries or not any(g > 0 for g in rels.values()):
                continue
            started = clock.perf_counter()
            found = search(kb, ds.queries[q], SearchOptions(k=k, mode="hybrid"), locate=False)
            latencies.append((clock.perf_counter() - started) * 1000)
            ranking = [h.source or "" for h in found]
            per[q] = [ndcg(ranking, rels), hit(ranking, rels, 1), hit(ranking, rels, 3),
                      mrr(ranking, rels)]  # fmt: skip
    finally:
        kb.close()
    mean = sum(latencies) / max(1, len(latencies))
    return {"per_query": per, "latency_ms": {"mean": round(mean, 2)}}


def tldr_pages(db_dir: Path) -> Path:
    """The tldr pages (common, linux, osx, windows) unpacked from the shared tarball."""
    pages = db_dir / "tldr" / "pages"
    if not pages.is_dir():
        sys.path.insert(0, str(ROOT / "benchmarks" / "corpora"))
        from build_tldr import default_tarball

        with tarfile.open(default_tarball()) as tar:
            members = [m for m in tar if m.name.startswith("pages/")]
            tar.extractall(db_dir / "tldr", members=members, filter="data")
    return pages


def run_tldr(src: Path, embedder: str, db_dir: Path) -> dict[str, Any]:
    """``evaluate_questions`` (kb eval --queries: kb search's path, -k 10) of the 100 judged
    task questions on an index of the tldr pages (built once with ``kb ingest``)."""
    from kbcli.eval.questions import evaluate_questions, load_questions
    from kbcli.knowledge_base import KnowledgeBase

    db = db_dir / f"tldr-pages-{embedder}.db"
    if not db.exists():
        env = {**os.environ, "PYTHONPATH": str(src)}
        flag = "local" if embedder == "minilm" else "simple"
        pages = str(tldr_pages(db_dir))
        subprocess.run([sys.executable, "-m", "kbcli", "--db", str(db), "ingest", pages,
                        "--embedder", flag], check=True, env=env)  # fmt: skip
    queries = ROOT / "benchmarks" / "corpora" / "tldr" / "live.jsonl"
    questions = load_questions(queries)
    kb = KnowledgeBase.open(str(db), create=False)
    try:
        result = evaluate_questions(kb, questions, modes=["hybrid"], k=10, base=queries.parent)
    finally:
        kb.close()
    rows = result["modes"]["hybrid"]["questions"]
    per = {r["id"]: [r["ndcg@10"], r["hit@1"], r["hit@3"], r["mrr@10"]] for r in rows}
    return {"per_query": per, "latency_ms": result["modes"]["hybrid"]["latency_ms"]}


def run(args: argparse.Namespace) -> None:
    src = args.src.resolve()
    sys.path.insert(0, str(src))
    import kbcli

    if Path(kbcli.__file__).resolve().parent != src / "kbcli":
        raise SystemExit(f"kbcli imported from {kbcli.__file__}, not {src}: unset PYTHONPATH")
    if args.window:
        set_window(args.window)
    args.db_dir.mkdir(parents=True, exist_ok=True)
    out = json.loads(args.out.read_text()) if args.out.exists() else {}
    for name in args.sets:
        for embedder in args.embedders:
            key = f"{name}|{embedder}" + (f"|search -k {args.search_k}" if args.search_k else "")
            if key in out and not args.again:
                continue
            started = time.perf_counter()
            load_before = os.getloadavg()[0]
            if name == TLDR:
                row = run_tldr(src, embedder, args.db_dir)
            elif args.search_k:
                row = run_beir_search(name, embedder, args.data, args.db_dir, args.search_k)
            else:
                row = run_beir(name, embedder, args.data, args.db_dir)
            row.update(
                seconds=round(time.perf_counter() - started, 1),
                load=[round(load_before, 2), round(os.getloadavg()[0], 2)],
                window=args.window or None,
            )
            per = row["per_query"]
            row["per_query"] = {q: [round(v, 6) for v in vals] for q, vals in per.items()}
            out[key] = row
            means = summary(row["per_query"])
            print(key, json.dumps(means), f"load {row['load']}", file=sys.stderr, flush=True)
            args.out.write_text(json.dumps(out, sort_keys=True))


def summary(per: dict[str, list[float]]) -> dict[str, float]:
    values = list(per.values())
    width = min((len(v) for v in values), default=0)
    return {m: round(sum(v[i] for v in values) / len(values), 4) for i, m in
            enumerate(METRICS[:width])}  # fmt: skip


def compare(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from kbcli.eval.questions import bootstrap_interval

    before = json.loads(args.before.read_text())
    after = json.loads(args.after.read_text())
    shown = [m for m in METRICS if m in args.metrics]
    print("| set | embedder | queries | " + " | ".join(
        f"{m} before → after | Δ {m} [95%]" for m in shown) + " |")  # fmt: skip
    print("|---|---|---|" + "---|---|" * len(shown))
    for key in after:
        if key not in before:
            continue
        name, rest = key.split("|", 1)
        embedder = rest.replace("|", ", ")  # "minilm, search -k 10"
        b, a = before[key]["per_query"], after[key]["per_query"]
        ids = [q for q in a if q in b]
        cells = []
        for i, metric in enumerate(METRICS):
            if metric not in shown:
                continue
            if any(len(a[q]) <= i for q in ids):
                cells += ["–", "–"]
                continue
            d = [a[q][i] - b[q][i] for q in ids]
            lo, hi = bootstrap_interval(d)
            mean_b = sum(b[q][i] for q in ids) / len(ids)
            mean_a = sum(a[q][i] for q in ids) / len(ids)
            cells += [f"{mean_b:.3f} → {mean_a:.3f}",
                      f"{sum(d) / len(d):+.4f} [{lo:+.4f}, {hi:+.4f}]"]  # fmt: skip
        print(f"| {name} | {embedder} | {len(ids)} | " + " | ".join(cells) + " |")


def latency(args: argparse.Namespace) -> None:
    """This tree's hybrid search timed per fusion window, the windows interleaved query by
    query (each query once per window, in a rotating order): the library's ``search(k=5)`` and
    ``kb search``'s path by file at -k 10 (``kbcli.search.query.search``, lines not located). Prints
    mean / p50 / p95 ms per window and the load average before and after."""
    sys.path.insert(0, str(ROOT / "src"))
    from kbcli.eval.beir import percentile
    from kbcli.knowledge_base import KnowledgeBase
    from kbcli.search.query import search
    from kbcli.types import SearchOptions

    windows = [int(w) for w in args.windows.split(",")]
    with args.queries.open(encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh if line.strip()][: args.limit]
    load = os.getloadavg()
    kb = KnowledgeBase.open(str(args.db), create=False)
    times: dict[tuple[str, int], list[float]] = {}
    try:
        kb.search(texts[0], k=5)  # the model, the vectors and the keyword pack, loaded once
        for n, text in enumerate(texts):
            for w in windows[n % len(windows) :] + windows[: n % len(windows)]:
                set_window(w)
                started = time.perf_counter()
                kb.search(text, k=5)
                middle = time.perf_counter()
                search(kb, text, SearchOptions(k=10), locate=False)
                done = time.perf_counter()
                times.setdefault(("library k=5", w), []).append((middle - started) * 1000)
                times.setdefault(("kb search -k 10", w), []).append((done - middle) * 1000)
    finally:
        kb.close()
    print(f"{args.db.name}: {len(texts)} queries, windows interleaved; load average "
          f"{load[0]:.2f} before, {os.getloadavg()[0]:.2f} after")  # fmt: skip
    for (what, w), ms in sorted(times.items()):
        print(f"  {what:<16} window {w:>4}: mean {sum(ms) / len(ms):6.1f} ms, "
              f"p50 {percentile(ms, 50):6.1f}, p95 {percentile(ms, 95):6.1f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="stage", required=True)
    r = sub.add_parser("run")
    r.add_argument("--src", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--db-dir", type=Path, default=ROOT / ".bench-cache" / "fusion-depth")
    r.add_argument("--data", type=Path, default=default_data())
    r.add_argument("--sets", nargs="*", default=[*SPLITS, TLDR])
    r.add_argument("--embedders", nargs="*", default=["simple", "minilm"])
    r.add_argument("--window", type=int, default=0, help="study: the fusion window")
    r.add_argument("--again", action="store_true", help="run sets already in --out again")
    r.add_argument("--search-k", type=int, default=0, help="BEIR: kb search's path at this -k")
    t = sub.add_parser("latency")
    t.add_argument("--db", type=Path, required=True)
    t.add_argument("--queries", type=Path, required=True, help="queries.jsonl (_id, text)")
    t.add_argument("--embedder", default="minilm")
    t.add_argument("--windows", default="50,100,200")
    t.add_argument("--limit", type=int, default=200, help="queries timed at most")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--metrics", nargs="*", default=["ndcg@10", "hit@1", "recall@100"])
    args = parser.parse_args()
    if args.stage == "run":
        run(args)
    elif args.stage == "latency":
        latency(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
