"""Scoped keyword search against the same search without a scope (issue 27): what computing
every BM25 statistic over the scope's chunks alone costs.

    python benchmarks/bench_scoped.py --chunks 100000
    python benchmarks/bench_scoped.py --chunks 20000 --queries 150   # a loaded machine
    python benchmarks/bench_scoped.py --chunks 100000 --channel 100000  # + the timing channel

One SQLite index of synthetic chunks (Zipf-distributed words, ten chunks per file) is written
once into ``--workdir``. Chunk ``i`` has ``tenant = t{i % 10}`` and ``half = i % 2``: the
scope ``{"tenant": "t3"}`` holds 10 % of the chunks, ``{"half": 0}`` 50 %. Each query is
searched (k=10) without a scope, with each scope, and with each scope's filter as a plain
filter (the old, index-wide statistics), the routes interleaved and every call the first of its
query on that route (no cache of results; the allowed-slot bitmap of a scope is built by the
first scoped query of a generation and reported apart as ``bitmap_ms``). Prints p50 / p95 in
milliseconds per route and the ratio of each scoped p50 / p95 to the unscoped one.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import p50_p95  # noqa: E402

SCOPES = {"10%": {"tenant": "t3"}, "50%": {"half": 0}}
VOCABULARY = 20_000
TERMS_PER_CHUNK = 60


def words(rng: random.Random, n: int) -> list[str]:
    """``n`` words of a Zipf-like vocabulary (rank r drawn with weight 1 / r)."""
    return [f"w{int(VOCABULARY ** rng.random())}" for _ in range(n)]


def build(db: Path, chunks: int) -> None:
    from kbcli import Document, SQLiteStore

    rng = random.Random(7)
    store = SQLiteStore(db)
    batch = []
    started = time.perf_counter()
    for i in range(chunks):
        meta = {"source": f"/corpus/f{i // 10:07d}.md", "tenant": f"t{i % 10}", "half": i % 2}
        batch.append(Document(f"c{i}", " ".join(words(rng, TERMS_PER_CHUNK)), meta))
        if len(batch) == 5_000:
            store.add(batch)
            batch = []
    if batch:
        store.add(batch)
    store.prepare_search()
    store.close()
    print(f"built {chunks:,} chunks in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def channel(workdir: Path, chunks: int, queries: int) -> dict[str, object]:
    """What hidden documents can still change: the time of a scoped search. Two indexes of
    ``chunks`` chunks, a tenant of 10 % whose chunks are the same in both; in one, no hidden
    chunk holds the query's word, in the other every hidden chunk does. Returns the scoped
    p50 / p95 of each (the scores and order are equal, the test suite checks that)."""
    from kbcli import Document, SQLiteStore

    out: dict[str, object] = {}
    for hidden_share in (0, 1):
        db = workdir / f"channel-{chunks}-{hidden_share}.db"
        if not db.exists():
            rng = random.Random(5)
            store = SQLiteStore(db)
            docs = []
            for i in range(chunks):
                mine = i % 10 == 3
                text = words(rng, TERMS_PER_CHUNK)
                if mine and i % 20 == 3 or not mine and hidden_share:
                    text.append("probeword")
                meta = {"source": f"/c/f{i // 10:07d}.md", "tenant": f"t{i % 10}"}
                docs.append(Document(f"c{i}", " ".join(text), meta))
            for start in range(0, len(docs), 5_000):
                store.add(docs[start : start + 5_000])
            store.prepare_search()
            store.close()
        store = SQLiteStore(db)
        scope = SCOPES["10%"]
        store.keyword_search("probeword", k=10, scope=scope)  # the scope's bitmap
        rng = random.Random(3)
        times = []
        for _ in range(queries):
            query = f"probeword {words(rng, 1)[0]}"
            started = time.perf_counter()
            store.keyword_search(query, k=10, scope=scope)
            times.append((time.perf_counter() - started) * 1000)
        store.close()
        out["hidden hold the word" if hidden_share else "hidden lack the word"] = p50_p95(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/kb-bench-scoped"))
    parser.add_argument(
        "--channel", type=int, default=0, metavar="CHUNKS",
        help="also time a scoped search whose word all / no hidden chunks hold (CHUNKS each)",
    )  # fmt: skip
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    db = args.workdir / f"scoped-{args.chunks}.db"
    if not db.exists():
        build(db, args.chunks)

    from kbcli import SQLiteStore

    store = SQLiteStore(db)
    rng = random.Random(11)
    # words of every frequency: two or three per query, one of them among the 200 commonest
    queries = [
        " ".join([f"w{rng.randint(1, 200)}", *words(rng, rng.randint(1, 2))])
        for _ in range(args.queries + 1)
    ]
    routes = {"none": {}}
    for name, scope in SCOPES.items():
        routes[f"scope {name}"] = {"scope": scope}
        routes[f"filter {name}"] = {"filter": scope}
    bitmap = {}
    for name, scope in SCOPES.items():  # the per-generation bitmap, built once per scope
        started = time.perf_counter()
        store.keyword_search(queries[0], k=10, scope=scope)
        bitmap[name] = round((time.perf_counter() - started) * 1000, 2)
        store.keyword_search(queries[0], k=10, filter=scope)
    store.keyword_search(queries[0], k=10)
    times: dict[str, list[float]] = {name: [] for name in routes}
    names = list(routes)
    for n, query in enumerate(queries[1:]):
        order = names[n % len(names) :] + names[: n % len(names)]  # interleaved, rotating
        for name in order:
            started = time.perf_counter()
            store.keyword_search(query, k=10, **routes[name])
            times[name].append((time.perf_counter() - started) * 1000)
    store.close()
    base = p50_p95(times["none"])
    out: dict[str, object] = {"chunks": args.chunks, "queries": args.queries, "bitmap_ms": bitmap}
    for name in names:
        figures = p50_p95(times[name])
        out[name] = {
            **figures,
            "x_p50": round(figures["p50"] / base["p50"], 2),
            "x_p95": round(figures["p95"] / base["p95"], 2),
        }
    if args.channel:
        out["timing channel"] = channel(args.workdir, args.channel, args.queries)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
