"""MiniLM at 128 tokens a text against 256: search quality per query and embedding speed.

    python benchmarks/bench_max_tokens.py --sets cranfield tldr manpages scifact --db-dir DIR

all-MiniLM-L6-v2 was trained on inputs of at most 128 tokens, and kbcli truncated at 256 (the
``max_seq_length`` of the sentence-transformers folder). Only chunks longer than 128 tokens get
another vector, so each set is embedded once at 256 through ``kb eval``'s ingest path
(``DIR/<set>-minilm.db``, the index ``semantic_study.py`` builds and reuses), then copied to
``DIR/<set>-minilm-128.db`` where only those chunks are embedded again at 128 and the relevance
floors calibrated again. Both indexes then answer every judged query through ``kb eval``'s
runner (200-chunk pools, the index's own floors) in the semantic and hybrid modes, and the
difference 128 - 256 of nDCG@10 and hit@1 per query gets its paired 95% bootstrap interval
(2,000 resamples, ``kbcli.eval.questions.bootstrap_interval``): "holds" means the interval's
lower end is above -0.01 (no loss beyond noise of a hundredth); the decision reads nDCG@10's
(hit@1 moves in steps of 1 / queries: 0.01 on a set of 100). Speed: the long chunks of the
set (at most ``--speed-chunks``) embedded at 256 and at 128, alternating, in one process, chunks
per CPU-second (user + system time of every thread) with the load beside it. Figures go to
``benchmarks/max-tokens.json``; the table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from semantic_study import Primed, per_query, summary  # noqa: E402
from study_sets import SETS, default_data, set_dir  # noqa: E402

OUT = ROOT / "benchmarks" / "max-tokens.json"
SHORT, LONG = 128, 256
HOLDS = -0.01  # the paired interval's lower end must stay above this


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def progress_for(name: str) -> Any:
    last = [0.0]

    def progress(stage: str, done: int, total: int) -> None:
        if time.monotonic() - last[0] > 30 or done == total:
            last[0] = time.monotonic()
            log(f"{name}: {stage} {done}/{total} (load {os.getloadavg()[0]:.1f})")

    return progress


def embedder(max_tokens: int) -> Any:
    from kbcli.embedders.local import LocalEmbedder

    return LocalEmbedder(max_tokens=max_tokens)


def long_chunks(store: Any, limit: int) -> dict[str, str]:
    """Chunk id -> text of every chunk of more than :data:`SHORT` tokens."""
    from tokenizers import Tokenizer

    from kbcli.embedders.local import default_model_files

    tokenizer = Tokenizer.from_file(str(default_model_files()["tokenizer"]))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    docs = list(store.iter_documents())
    lengths = [len(e.ids) for e in tokenizer.encode_batch([d.text for d in docs])]
    return {d.id: d.text for d, n in zip(docs, lengths) if n > limit}


def build_short(db: Path, short_db: Path, data: Any) -> dict[str, Any]:
    """Copy ``db`` to ``short_db`` and embed its long chunks again at :data:`SHORT` tokens."""
    from kbcli.config.lookup import Config
    from kbcli.eval.beir import _open_index
    from kbcli.search.calibration import calibrate_index, meta_key

    if not short_db.exists():
        tmp = short_db.with_suffix(".tmp")
        with sqlite3.connect(db) as src, sqlite3.connect(tmp) as dst:
            src.backup(dst)
        model = Primed(embedder(SHORT))
        kb = _open_index(tmp, data, Config(), model, "semantic", None)
        try:
            store = kb.store
            todo = long_chunks(store, SHORT)
            info = model.info
            ids = list(todo)
            started = time.perf_counter()
            for start in range(0, len(ids), 256):
                part = ids[start : start + 256]
                vectors = model.embed_documents([todo[i] for i in part])
                store.set_vectors(dict(zip(part, vectors)), embedder=info)
                progress_for(short_db.name)("re-embed", start + len(part), len(ids))
            store.set_meta("max_tokens_reembedded", json.dumps(
                {"chunks": len(ids), "seconds": round(time.perf_counter() - started, 1)}
            ))  # fmt: skip
            store.set_meta(meta_key(info), "")
            calibrate_index(kb)
        finally:
            kb.close()
        for suffix in ("", "-wal", "-shm"):
            if Path(f"{tmp}{suffix}").exists():
                os.replace(f"{tmp}{suffix}", f"{short_db}{suffix}")
        for derived in (".vectors-cache", ".keyword-pack"):
            Path(f"{tmp}{derived}").unlink(missing_ok=True)
    with sqlite3.connect(short_db) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = 'max_tokens_reembedded'").fetchone()
    return json.loads(row[0])


def evaluate(db: Path, data: Any, max_tokens: int, mode: str) -> dict[str, tuple]:
    from kbcli.config.lookup import Config
    from kbcli.eval.beir import CHUNK_POOL, _open_index, _run_queries
    from kbcli.types import SearchOptions

    kb = _open_index(db, data, Config(), Primed(embedder(max_tokens)), mode, None)
    try:
        run, _ = _run_queries(kb, data, SearchOptions(k=CHUNK_POOL, mode=mode, dedupe=False), None)
    finally:
        kb.close()
    return per_query(run, data.qrels)


def paired(base: dict[str, tuple], other: dict[str, tuple]) -> dict[str, Any]:
    from kbcli.eval.questions import bootstrap_interval

    ids = [q for q in base if q in other]
    out: dict[str, Any] = {}
    for i, metric in ((0, "ndcg@10"), (1, "hit@1")):
        d = [other[q][i] - base[q][i] for q in ids]
        lo, hi = bootstrap_interval(d)
        out[metric] = {"delta": round(sum(d) / max(1, len(d)), 4), "lo": round(lo, 4),
                       "hi": round(hi, 4), "holds": lo > HOLDS}  # fmt: skip
    return out


def speed(store_db: Path, data: Any, chunks: int, rounds: int) -> dict[str, Any]:
    """Chunks per CPU-second for the set's long chunks at 256 and at 128, alternating."""
    from kbcli.config.lookup import Config
    from kbcli.eval.beir import _open_index

    kb = _open_index(store_db, data, Config(), Primed(embedder(LONG)), "keyword", None)
    try:
        texts = list(long_chunks(kb.store, SHORT).values())[:chunks]
    finally:
        kb.close()
    models = {LONG: embedder(LONG), SHORT: embedder(SHORT)}
    got: dict[int, list[float]] = {LONG: [], SHORT: []}
    loads = []
    for _ in range(rounds):
        for length, model in models.items():
            cpu, wall = time.process_time(), time.perf_counter()
            model.embed_documents(texts)
            got[length].append(len(texts) / max(1e-9, time.process_time() - cpu))
            loads.append(os.getloadavg()[0])
            log(f"speed {length}: {got[length][-1]:.1f} chunks per CPU-s "
                f"({time.perf_counter() - wall:.1f} s wall, load {loads[-1]:.1f})")  # fmt: skip
    return {
        "chunks": len(texts),
        "per_cpu_second": {str(k): [round(v, 1) for v in vs] for k, vs in got.items()},
        "load": [round(v, 2) for v in loads],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_data())
    parser.add_argument("--sets", nargs="*", default=["cranfield", "tldr", "manpages", "scifact"])
    parser.add_argument("--modes", nargs="*", default=["semantic", "hybrid"])
    parser.add_argument("--db-dir", type=Path, default=ROOT / ".bench-cache")
    parser.add_argument("--speed-chunks", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    from kbcli.config.lookup import Config
    from kbcli.eval.beir import _open_index, load_beir

    args.db_dir.mkdir(parents=True, exist_ok=True)
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    for name in args.sets:
        data = load_beir(set_dir(args.data, name), SETS[name])
        db = args.db_dir / f"{name}-minilm.db"
        started = time.perf_counter()
        kb = _open_index(db, data, Config(), Primed(embedder(LONG)), "semantic",
                         progress_for(name))  # fmt: skip
        row: dict[str, Any] = {"chunks": kb.store.count()}
        kb.close()
        row["index_seconds"] = round(time.perf_counter() - started, 1)
        short_db = args.db_dir / f"{name}-minilm-{SHORT}.db"
        row["reembedded"] = build_short(db, short_db, data)
        for mode in args.modes:
            base = evaluate(db, data, LONG, mode)
            short = evaluate(short_db, data, SHORT, mode)
            row[mode] = {
                str(LONG): summary(base.values()),
                str(SHORT): summary(short.values()),
                "queries": len(base),
                f"{SHORT} - {LONG}": paired(base, short),
            }
            log(f"{name} {mode}: {json.dumps(row[mode])}")
        if row["reembedded"]["chunks"]:
            row["speed"] = speed(db, data, args.speed_chunks, args.rounds)
        row["load"] = round(os.getloadavg()[0], 2)
        row["at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        results[name] = row
        args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print("| set | mode | queries | chunks > 128 tokens | nDCG@10 256 -> 128 | Δ [95%] | "
          "hit@1 256 -> 128 | Δ [95%] |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name, row in results.items():
        for mode in args.modes:
            m = row.get(mode)
            if not m:
                continue
            d = m[f"{SHORT} - {LONG}"]
            print(f"| {name} | {mode} | {m['queries']} | {row['reembedded']['chunks']:,} of "
                  f"{row['chunks']:,} | {m[str(LONG)]['ndcg@10']:.3f} -> "
                  f"{m[str(SHORT)]['ndcg@10']:.3f} | {d['ndcg@10']['delta']:+.3f} "
                  f"[{d['ndcg@10']['lo']:+.3f}, {d['ndcg@10']['hi']:+.3f}] | "
                  f"{m[str(LONG)]['hit@1']:.3f} -> {m[str(SHORT)]['hit@1']:.3f} | "
                  f"{d['hit@1']['delta']:+.3f} [{d['hit@1']['lo']:+.3f}, "
                  f"{d['hit@1']['hi']:+.3f}] |")  # fmt: skip


if __name__ == "__main__":
    main()
