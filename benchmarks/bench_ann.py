"""Recall and latency of approximate (FAISS HNSW) against exact dense search on REAL embeddings.

The local all-MiniLM-L6-v2 embedder indexes the first ``--docs`` documents of a BEIR corpus
(default ``../shared/eval/scifact``) through the normal ingest path (``kb eval``'s: each document
chunked by the configured chunker, embedded, stored in SQLite). The index is the benchmark's own
SQLite file (``--db``, default ``/tmp/bench_ann/<corpus>-<docs>.db``), and the query vectors are
cached beside it (``.queries.npy``), so a rerun embeds nothing.

Then, on the index's vectors:

- *exact*: numpy brute force (the ground truth) and kbcli's ``NumpyVectorIndex`` (the SQLite
  store's default), p50 latency per query;
- *HNSW*: ``FaissVectorIndex("HNSW32")`` (what ``store: {backend: faiss, index_factory: HNSW32}``
  builds) at several ``ef_search`` values: recall@10 against exact, p50 latency, build time;
- *filtered*: the same with a filter allowing a share of the chunks (``--filter-share``), the
  pre-filtered (``IDSelectorBatch``) path: recall@10 against exact top 10 of the allowed set, and
  how many of the k hits are allowed;
- *store* (``--store HNSW32``): the same through ``FaissStore`` on the benchmark's own SQLite
  file, each step in a fresh process: build ``<db>.faiss`` from the catalog, open it again,
  and search (unfiltered, and filtered by ``--store-prefix`` of ``source``); p50 per
  ``store.search`` (documents included), recall@10 by chunk id, peak resident memory;
- *synthetic*: a larger set (``--synthetic N``) made by perturbing the real vectors
  (``v + sigma * noise``, renormalised; ``sigma`` = ``--sigma`` times the per-dimension spread),
  with the real queries, to see recall at a size the CPU cannot embed in the time.

Usage::

    PYTHONPATH=src python benchmarks/bench_ann.py [--docs 1500] [--synthetic 100000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

K = 10
EF_VALUES = (16, 32, 64, 128, 256)


def subset(dataset: Path, docs: int, out: Path) -> Path:
    """A BEIR folder holding the first ``docs`` documents and every query (qrels not needed)."""
    folder = out / f"{dataset.name}-{docs}"
    if (folder / "corpus.jsonl").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with open(dataset / "corpus.jsonl") as src, open(folder / "corpus.jsonl", "w") as dst:
        for n, line in enumerate(src):
            if n >= docs:
                break
            dst.write(line)
    shutil.copy(dataset / "queries.jsonl", folder / "queries.jsonl")
    qrels = folder / "qrels"
    if not qrels.exists():
        shutil.copytree(dataset / "qrels", qrels)
    return folder


def real_vectors(
    dataset: Path, docs: int, db: Path, queries: int, threads: int | None = None
) -> tuple[Any, Any, float]:
    """(chunk matrix, query matrix, seconds spent embedding) from the cached index or a new one."""
    from kbcli.config.lookup import get_config
    from kbcli.embedders.local import LocalEmbedder
    from kbcli.eval.beir import _open_index, load_beir
    from kbcli.stores.sqlite import vectors as sqlite_vectors

    folder = subset(dataset, docs, db.parent)
    data = load_beir(folder)
    config = get_config()
    embedder = LocalEmbedder(threads=threads)
    start = time.perf_counter()
    kb = _open_index(db, data, config, embedder, "semantic", _progress)
    spent = time.perf_counter() - start
    with kb.store._db.read() as conn:
        _ids, matrix = sqlite_vectors.read_vectors(conn, [])
    kb.close()
    qpath = Path(f"{db}.queries.npy")
    texts = list(data.queries.values())[:queries]
    if qpath.exists() and len(np.load(qpath)) == len(texts):
        qmat = np.load(qpath)
    else:
        qmat = np.asarray([embedder.embed_query(t) for t in texts], dtype=np.float32)
        np.save(qpath, qmat)
    return np.asarray(matrix, dtype=np.float32), qmat, spent


def _progress(stage: str, done: int, total: int) -> None:
    print(f"\r{stage} {done}/{total}", end="", file=sys.stderr, flush=True)
    if done >= total:
        print(file=sys.stderr)


def unit(m: Any) -> Any:
    m = np.asarray(m, dtype=np.float32)
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


def exact_top(
    matrix: Any, queries: Any, k: int, allowed: Any = None
) -> list[tuple[set[int], float]]:
    """Per query: the exact top ``k`` ids and the ``k``-th best score."""
    out = []
    for q in queries:
        scores = matrix @ q
        if allowed is not None:
            scores = np.where(allowed, scores, -np.inf)
        top = np.argpartition(-scores, k)[:k]
        out.append((set(top.tolist()), float(scores[top].min())))
    return out


def recall(found: list, truth: list, matrix: Any, queries: Any, ties: bool) -> float:
    """Mean share of the exact top 10 found. With ``ties``, a hit scoring at least the exact
    10th best also counts: duplicate chunks (the same text, the same vector) are equally good
    answers, and which copy the exact top 10 holds is arbitrary."""
    shares = []
    for f, (top, kth), q in zip(found, truth, queries):
        ids = [i for i, _ in f]
        hits = sum(1 for i in ids if i in top or (ties and float(matrix[i] @ q) >= kth - 1e-6))
        shares.append(min(hits, K) / K)
    return float(np.mean(shares))


def p50_ms(times: list[float]) -> float:
    return round(statistics.median(times) * 1000, 3)


def timed(fn: Any, queries: Any) -> tuple[list[Any], float]:
    results, times = [], []
    for q in queries:
        t = time.perf_counter()
        results.append(fn(q))
        times.append(time.perf_counter() - t)
    return results, p50_ms(times)


def measure(
    matrix: Any, queries: Any, label: str, filter_share: float, efs: tuple[int, ...]
) -> dict:
    from kbcli.stores.faiss.store import FaissVectorIndex
    from kbcli.stores.numpy_index import NumpyVectorIndex

    n = len(matrix)
    ids = np.arange(n, dtype=np.int64)
    matrix = unit(matrix)
    truth = exact_top(matrix, queries, K)
    row: dict[str, Any] = {"set": label, "vectors": n, "queries": len(queries)}
    _, row["numpy_brute_p50_ms"] = timed(lambda q: np.argpartition(-(matrix @ q), K)[:K], queries)
    exact = NumpyVectorIndex(ids, matrix)
    _, row["exact_p50_ms"] = timed(lambda q: exact.search(q, K), queries)
    t = time.perf_counter()
    hnsw = FaissVectorIndex(matrix.shape[1], "HNSW32")
    hnsw.build(ids, matrix)
    row["hnsw_build_s"] = round(time.perf_counter() - t, 2)
    rng = np.random.default_rng(7)
    allowed_mask = rng.random(n) < filter_share
    allowed_ids = ids[allowed_mask].tolist()
    ftruth = exact_top(matrix, queries, K, allowed_mask)
    _, row["exact_filtered_p50_ms"] = timed(lambda q: exact.search(q, K, allowed_ids), queries)
    row["filter_share"] = filter_share
    row["ef"] = []
    for ef in efs:
        hnsw.ef_search = ef
        found, lat = timed(lambda q: hnsw.search(q, K), queries)
        ffound, flat = timed(lambda q: hnsw.search(q, K, allowed_ids), queries)
        ok = np.mean([sum(1 for i, _ in f if allowed_mask[i]) == K for f in ffound])
        row["ef"].append(
            {
                "ef_search": ef,
                "recall@10": round(recall(found, truth, matrix, queries, False), 4),
                "recall@10 ties": round(recall(found, truth, matrix, queries, True), 4),
                "p50_ms": lat,
                "filtered_recall@10": round(recall(ffound, ftruth, matrix, queries, False), 4),
                "filtered_recall@10 ties": round(recall(ffound, ftruth, matrix, queries, True), 4),
                "filtered_p50_ms": flat,
                "filtered_k_allowed": round(float(ok), 4),
            }
        )
        print(f"{label} ef={ef}: {row['ef'][-1]}", file=sys.stderr)
    return row


def peak_rss_mb() -> int:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the
    parent across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024)
    return -1


def store_child(db: Path, factory: str, prefix: str | None) -> None:
    """(A child process.) Open ``FaissStore`` on ``db``, bring its index up to date (build or
    load ``<db>.faiss``), run every cached query; print one JSON line."""
    from kbcli.stores.faiss.store import FaissStore

    queries = unit(np.load(f"{db}.queries.npy"))
    start = time.perf_counter()
    store = FaissStore(index_factory=factory, path=db, create=False)
    store.refresh_vector_index()
    ready = time.perf_counter() - start
    where = {"source": {"$prefix": prefix}} if prefix else None
    found, p50 = timed(lambda q: store.search(q.tolist(), K, where), queries)
    print(json.dumps({
        "ready_s": round(ready, 2),
        "rebuilds": store._matrix.rebuilds,
        "p50_ms": p50,
        "hits": [[(r.document.id, r.score) for r in hits] for hits in found],
        "peak_rss_mb": peak_rss_mb(),
    }))  # fmt: skip
    store.close()


def measure_store(
    db: Path, matrix: Any, queries: Any, factory: str, prefix: str, reuse: bool = False
) -> dict:
    """Build, reopen and search ``FaissStore(index_factory=factory)`` on ``db`` in child
    processes; recall@10 (ties counted) by chunk id against exact search. ``reuse``: keep an
    existing ``<db>.faiss`` (no build step)."""
    import sqlite3
    import subprocess

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = conn.execute("SELECT c.doc, c.id, c.source FROM chunks c JOIN vectors v "
                        "ON v.doc = c.doc ORDER BY c.doc").fetchall()  # fmt: skip
    conn.close()
    chunk_ids = [r[1] for r in rows]  # the vectors' order (read_vectors sorts by rowid)
    inside = np.asarray([str(r[2]).startswith(prefix) for r in rows])
    matrix = unit(matrix)
    steps = (("build", None), ("open", None), ("filtered", prefix))
    if reuse and Path(f"{db}.faiss").exists():
        steps = steps[1:]
    else:
        Path(f"{db}.faiss").unlink(missing_ok=True)
    row: dict[str, Any] = {"set": f"FaissStore {factory}", "vectors": len(matrix),
                           "filter": f"source $prefix {prefix} ({inside.mean():.1%})"}  # fmt: skip
    for step, where in steps:
        cmd = [sys.executable, __file__, "--store-child", str(db), "--store", factory,
               "--store-prefix", where or ""]  # fmt: skip
        out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        truth = exact_top(matrix, queries, K, inside if where else None)
        shares = []
        for hits, (top, kth) in zip(out["hits"], truth):
            best = {chunk_ids[i] for i in top}
            shares.append(sum(1 for i, s in hits if i in best or s >= kth - 1e-6) / K)
        row[step] = {"ready_s": out["ready_s"], "rebuilds": out["rebuilds"],
                     "p50_ms": out["p50_ms"], "recall@10 ties": round(float(np.mean(shares)), 4),
                     "peak_rss_mb": out["peak_rss_mb"]}  # fmt: skip
        print(f"store {step}: {row[step]}", file=sys.stderr)
    return row


def synthetic(matrix: Any, size: int, sigma: float, seed: int = 3) -> Any:
    rng = np.random.default_rng(seed)
    base = unit(matrix)
    spread = base.std(axis=0, keepdims=True)
    pick = rng.integers(0, len(base), size)
    noisy = base[pick] + sigma * spread * rng.standard_normal((size, base.shape[1])).astype(
        np.float32
    )
    return unit(noisy)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--dataset", default=str(Path(__file__).resolve().parents[2] / "shared/eval/scifact")
    )
    ap.add_argument("--docs", type=int, default=1500)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--db", default=None)
    ap.add_argument("--synthetic", type=int, default=100_000)
    ap.add_argument("--sigma", type=float, default=0.5)
    ap.add_argument("--filter-share", type=float, default=0.1)
    ap.add_argument("--ef", default=",".join(map(str, EF_VALUES)))
    ap.add_argument(
        "--threads", type=int, default=None, help="ONNX threads (default: fit to the load now)"
    )
    ap.add_argument("--store", default=None, help="also measure FaissStore with this factory")
    ap.add_argument("--store-prefix", default="/usr/", help="source prefix of the store filter")
    ap.add_argument("--store-reuse", action="store_true", help="keep an existing <db>.faiss")
    ap.add_argument("--store-only", action="store_true", help="skip the index-level rows")
    ap.add_argument("--store-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.store_child:
        store_child(Path(args.store_child), args.store, args.store_prefix)
        return
    dataset = Path(args.dataset)
    db = Path(
        args.db or Path(tempfile.gettempdir()) / "bench_ann" / f"{dataset.name}-{args.docs}.db"
    )
    db.parent.mkdir(parents=True, exist_ok=True)
    efs = tuple(int(x) for x in args.ef.split(","))
    matrix, queries, spent = real_vectors(dataset, args.docs, db, args.queries, args.threads)
    queries = unit(queries)
    load = os.getloadavg()
    report: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, {platform.platform()}",
        "python": platform.python_version(),
        "faiss": __import__("faiss").__version__,
        "numpy": np.__version__,
        "load_start": [round(x, 2) for x in load],
        "embed_or_open_s": round(spent, 1),
        "corpus": f"{dataset.name}, first {args.docs} documents",
        "rows": [],
    }
    if not args.store_only:
        report["rows"].append(measure(matrix, queries, "real", args.filter_share, efs))
    if args.store:
        report["rows"].append(
            measure_store(db, matrix, queries, args.store, args.store_prefix, args.store_reuse)
        )
    if args.synthetic:
        big = synthetic(matrix, args.synthetic, args.sigma)
        report["rows"].append(
            measure(big, queries, f"synthetic sigma={args.sigma}", args.filter_share, efs)
        )
    report["load_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}))
    for row in report["rows"]:
        if "filter" in row:
            print(f"\n{row['set']}: {row['vectors']} vectors; filter {row['filter']}")
            print("| step | ready s | rebuilds | p50 ms | recall@10 (ties) | peak RSS MB |")
            print("|---|---|---|---|---|---|")
            for step in ("build", "open", "filtered"):
                if step not in row:
                    continue
                e = row[step]
                print(f"| {step} | {e['ready_s']} | {e['rebuilds']} | {e['p50_ms']} |"
                      f" {e['recall@10 ties']} | {e['peak_rss_mb']} |")  # fmt: skip
            continue
        print(
            f"\n{row['set']}: {row['vectors']} vectors, {row['queries']} queries; exact p50 "
            f"{row['exact_p50_ms']} ms (numpy {row['numpy_brute_p50_ms']} ms), filtered exact "
            f"{row['exact_filtered_p50_ms']} ms; HNSW32 build {row['hnsw_build_s']} s"
        )
        print(
            "| ef_search | recall@10 (ties counted) | p50 ms | filtered recall@10 (ties) |"
            " filtered p50 ms | k allowed |"
        )
        print("|---|---|---|---|---|---|")
        for e in row["ef"]:
            print(
                f"| {e['ef_search']} | {e['recall@10']} ({e['recall@10 ties']}) | {e['p50_ms']} |"
                f" {e['filtered_recall@10']} ({e['filtered_recall@10 ties']}) |"
                f" {e['filtered_p50_ms']} | {e['filtered_k_allowed']} |"
            )


if __name__ == "__main__":
    main()
