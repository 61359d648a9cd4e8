"""Search throughput of PostgresStore with one server and with a hot standby (store.read_dsn),
and the standby's replay lag; prints them.

    python benchmarks/bench_pg_replica.py                      # 20,000 chunks, 4 readers, 5 s
    python benchmarks/bench_pg_replica.py --chunks 50000 --readers 8 --seconds 10

Two embedded PostgreSQL 18 + pgvector servers are started in a temporary folder (the tests'
``ReplicaPair``: a primary and a ``pg_basebackup -R`` hot standby of it) and deleted afterwards.
The corpus: Zipf(1.1) words over a 20,000-word vocabulary, 30-80 words per chunk, 10 chunks per
source, 64-d random unit vectors. Each reader is a process of its own (no shared GIL) with its
own store, running keyword searches of 2-3 words drawn from the corpus's chunks, each query
timed once, for ``--seconds``. Runs, one after the other:

1. one server: every reader on the primary;
2. two servers: half the readers on the primary, half with ``read_dsn`` on the standby;
3. readers on the primary while a writer adds batches of chunks to it (one server);
4. readers on the standby while the same writer adds to the primary (two servers).

Replay lag: a commit on the primary, then the standby polled every 0.5 ms until
``pg_last_wal_replay_lsn()`` reaches the commit (idle, and while the writer runs); and
``PostgresStore.stats()["read_server"]`` sampled during run 4. Both servers share this
machine's cores, so two servers here show the routing and the lag, not the scale-out two
machines give: the figures say what the load was.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import os
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "src"))
sys.path.insert(0, str(HERE.parents[0] / "tests"))  # pg_server.ReplicaPair
sys.path.insert(0, str(HERE))

from common import load_average, p50_p95  # noqa: E402

TABLE = "bench_replica"
DIM = 64


def corpus_words(n: int, rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    word = lambda i: "".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) + str(i)  # noqa: E731
    return [word(i) for i in range(n)]


def make_docs(start: int, count: int, seed: int) -> list:
    from kbcli import Document

    rng = random.Random(seed)
    vocab = corpus_words(20_000, random.Random(1))
    cum = list(itertools.accumulate(1 / (r + 1) ** 1.1 for r in range(len(vocab))))
    docs = []
    for i in range(start, start + count):
        words = rng.choices(vocab, cum_weights=cum, k=rng.randint(30, 80))
        vec = [rng.gauss(0, 1) for _ in range(DIM)]
        norm = sum(v * v for v in vec) ** 0.5
        doc = Document(f"c{i}", " ".join(words), {"source": f"/corpus/f{i // 10}.md"})
        doc.embedding = [v / norm for v in vec]
        docs.append(doc)
    return docs


def reader(dsn: str, read_dsn: str, queries: list[str], seconds: float, start, out) -> None:
    from kbcli.stores.postgres import PostgresStore

    store = PostgresStore(dsn, TABLE, read_dsn=read_dsn, create=False)
    store.keyword_search("warm up query", k=10)
    start.wait()
    times, deadline, i = [], time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        t = time.perf_counter()
        store.keyword_search(queries[i % len(queries)], k=10)
        times.append((time.perf_counter() - t) * 1000)
        i += 1
    store.close()
    out.put(times)


def writer(dsn: str, first: int, batch: int, stop, out) -> None:
    from kbcli.stores.postgres import PostgresStore

    store = PostgresStore(dsn, TABLE, create=False)
    added, n, began = 0, first, time.monotonic()
    while not stop.is_set():
        store.add(make_docs(n, batch, n))
        n += batch
        added += batch
    out.put((added, time.monotonic() - began))
    store.close()


def run(pair, queries: list[str], sides: list[str], seconds: float, write_from: int | None,
        batch: int) -> dict:  # fmt: skip
    """Readers (one per entry of ``sides``: "primary" or "standby") for ``seconds``, with a
    writer on the primary when ``write_from`` is set; queries/s, latency and the lag seen."""
    ctx = mp.get_context("spawn")
    start, stop, out, wrote = ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
    procs = [
        ctx.Process(target=reader, args=(pair.dsn, pair.read_dsn if side == "standby" else "",
                                         queries[i::len(sides)], seconds, start, out))
        for i, side in enumerate(sides)
    ]  # fmt: skip
    for p in procs:
        p.start()
    time.sleep(2.0)  # every reader connected and warm
    w = None
    if write_from is not None:
        w = ctx.Process(target=writer, args=(pair.dsn, write_from, batch, stop, wrote))
        w.start()
        time.sleep(0.5)
    start.set()
    lag = sample_lag(pair, seconds) if write_from is not None else None
    times = [t for _ in procs for t in out.get()]
    for p in procs:
        p.join()
    figures = {"queries_per_s": len(times) / seconds, **p50_p95(times), "load": load_average()}
    if w is not None:
        stop.set()
        added, took = wrote.get()
        w.join()
        figures["ingest_chunks_per_s"] = added / took
        figures["lag"] = lag
    return figures


def sample_lag(pair, seconds: float) -> dict:
    """``stats()["read_server"]`` every 0.1 s and commit-to-visible times, for ``seconds``."""
    from kbcli import Document
    from kbcli.stores.postgres import PostgresStore

    store = PostgresStore(pair.dsn, TABLE + "_probe", read_dsn=pair.read_dsn)
    behind, delays, visible = [], [], []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        standby = store.stats()["read_server"]
        behind.append(standby.get("behind_bytes", 0))
        delays.append(standby.get("replay_delay_seconds", 0.0) * 1000)
        visible.append(commit_to_visible(pair, store, Document))
        time.sleep(0.1)
    store.close()
    return {
        "behind_bytes_max": max(behind),
        "behind_bytes_p50": sorted(behind)[len(behind) // 2],
        "replay_delay_ms_max": round(max(delays), 1),
        "commit_to_visible_ms": p50_p95(visible),
        "samples": len(visible),
    }


def commit_to_visible(pair, store, document) -> float:
    """Milliseconds from a commit on the primary to the standby having replayed it."""
    import psycopg

    store.add([document("probe", "probe", {"source": "/probe"})])
    lsn = store._db.unreplayed
    began = time.perf_counter()
    sql = "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn"
    with psycopg.connect(pair.read_dsn, autocommit=True) as conn:
        while not conn.execute(sql, (lsn,)).fetchone()[0]:
            time.sleep(0.0005)
    return (time.perf_counter() - began) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batch", type=int, default=200, help="chunks per write of the writer")
    args = parser.parse_args()

    from kbcli.stores.postgres import PostgresStore
    from pg_server import ReplicaPair

    pair = ReplicaPair()
    try:
        began = time.monotonic()
        store = PostgresStore(pair.dsn, TABLE)
        for start in range(0, args.chunks, 2000):
            store.add(make_docs(start, min(2000, args.chunks - start), start))
        rng = random.Random(3)
        sample = [d.text.split() for d in make_docs(0, 500, 0)]
        queries = [" ".join(rng.sample(words, rng.randint(2, 3))) for words in sample]
        store.close()
        pair.caught_up(120)
        print(f"corpus: {args.chunks} chunks in {time.monotonic() - began:.1f} s; "
              f"{args.readers} reader processes, {args.seconds:g} s per run; "
              f"cpus {os.cpu_count()}, load {load_average()}")  # fmt: skip
        idle = []
        with PostgresStore(pair.dsn, TABLE + "_probe", read_dsn=pair.read_dsn) as probe:
            from kbcli import Document

            for _ in range(30):
                idle.append(commit_to_visible(pair, probe, Document))
        print(f"idle commit-to-visible on the standby: {p50_p95(idle)} ms")
        half = ["primary", "standby"] * (args.readers // 2) + ["primary"] * (args.readers % 2)
        runs = {
            "one server": run(pair, queries, ["primary"] * args.readers, args.seconds, None, 0),
            "two servers (reads split)": run(pair, queries, half, args.seconds, None, 0),
            "one server + ingest": run(
                pair, queries, ["primary"] * args.readers, args.seconds, args.chunks, args.batch
            ),
            "standby readers + ingest on primary": run(
                pair,
                queries,
                ["standby"] * args.readers,
                args.seconds,
                args.chunks * 2,
                args.batch,
            ),  # fmt: skip
        }
        for name, figures in runs.items():
            line = (f"{name:38} {figures['queries_per_s']:8.0f} queries/s  "
                    f"p50 {figures['p50']:.2f} ms  p95 {figures['p95']:.2f} ms  "
                    f"load {figures['load']}")  # fmt: skip
            if "ingest_chunks_per_s" in figures:
                line += f"  ingest {figures['ingest_chunks_per_s']:.0f} chunks/s"
            print(line)
            if figures.get("lag"):
                print(f"{'':38} replay lag: {figures['lag']}")
    finally:
        pair.close()


if __name__ == "__main__":
    main()
