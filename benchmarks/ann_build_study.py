"""HNSW build settings on a real set: recall@10 and p50 at each efConstruction and ef_search.

Reads the vectors bench_ann.py stored (its ``--db`` file and the ``.queries.npy`` beside it),
builds ``IndexHNSWFlat(M=32)`` (what ``index_factory: HNSW32`` builds) once per
``--ef-construction`` and searches it at each ``--ef``. Ground truth: exact top 10 (cosine).
``--distinct`` keeps one vector per distinct vector first (what the index would hold if
identical chunks were indexed once), ground truth included.

    python benchmarks/ann_build_study.py --db /tmp/bench_ann_real/real-33700.db \\
        --ef-construction 40,128 --ef 256,512,1024,2048,4096
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kbcli.stores.sqlite import vectors as sqlite_vectors  # noqa: E402

K = 10


def unit(m: np.ndarray) -> np.ndarray:
    m = np.array(m, dtype=np.float32)
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


def main() -> None:
    import faiss

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--ef-construction", default="40,128")
    ap.add_argument("--ef", default="256,512,1024,2048")
    ap.add_argument("--distinct", action="store_true")
    args = ap.parse_args()
    conn = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True)
    _, matrix = sqlite_vectors.read_vectors(conn, [])
    matrix = unit(matrix)
    if args.distinct:
        rows = np.ascontiguousarray(matrix).view(np.dtype((np.void, matrix.shape[1] * 4)))
        _, first = np.unique(rows.ravel(), return_index=True)
        matrix = matrix[np.sort(first)]
    queries = unit(np.load(f"{args.db}.queries.npy"))
    truth = [set(np.argpartition(-(matrix @ q), K)[:K].tolist()) for q in queries]
    print(json.dumps({"vectors": len(matrix), "queries": len(queries)}), flush=True)
    for efc in (int(x) for x in args.ef_construction.split(",")):
        index = faiss.IndexHNSWFlat(matrix.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = efc
        start = time.perf_counter()
        index.add(matrix)
        build = round(time.perf_counter() - start, 1)
        for ef in (int(x) for x in args.ef.split(",")):
            index.hnsw.efSearch = ef
            times, found = [], 0
            for q, want in zip(queries, truth):
                start = time.perf_counter()
                _, ids = index.search(q[None], K)
                times.append((time.perf_counter() - start) * 1000)
                found += len(set(ids[0].tolist()) & want)
            row = {"efConstruction": efc, "build_s": build, "ef_search": ef,
                   "recall@10": round(found / (K * len(queries)), 4),
                   "p50_ms": round(float(np.median(times)), 3)}  # fmt: skip
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
