"""What a note's write limits cost (issue 37): ``knowledge_add`` counts the bytes its writer's
notes hold in the index (a metadata-filtered read, at most once a minute) and whether a file's
chunk has the source a note names.

    python benchmarks/bench_note_limits.py --chunks 100000 --notes 60
    python benchmarks/bench_note_limits.py --chunks 20000 --notes 40   # a loaded machine

One SQLite index of synthetic chunks (ten per file, each file with a ledger record) is written
once into ``--workdir``. Then notes of ``--note-bytes`` are added in turn through the
``knowledge_add`` tool (limits checked), through it with a ``source`` (whether a file's chunk
has that source looked up too) and through ``KnowledgeBase.add`` (no checks), each timed
once; the writer already holds ``--held`` notes. Prints p50 / p95 in milliseconds of each
and of the count of the writer's bytes alone, and the database's growth per byte of note
text (vectors, keyword postings, metadata) after adding notes of the largest default size.
Figures depend on the machine's load, printed with them.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import p50_p95  # noqa: E402

WORDS = [f"w{n}" for n in range(20_000)]


def text_of(rng: random.Random, size: int) -> str:
    out: list[str] = []
    used = 0
    while used < size:
        word = rng.choice(WORDS)
        out.append(word)
        used += len(word) + 1
    return " ".join(out)[:size]


def build(db: Path, chunks: int) -> None:
    from datetime import datetime, timezone

    from kbcli import Document, SimpleEmbedder, SQLiteStore
    from kbcli.types import FileRecord

    rng = random.Random(7)
    store = SQLiteStore(db)
    embedder = SimpleEmbedder()
    started = time.perf_counter()
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    for first in range(0, chunks, 1000):
        files = []
        for f in range(first // 10, min(chunks, first + 1000) // 10):
            path = f"/corpus/f{f:07d}.md"
            docs = [
                Document(f"c{f * 10 + n}", text_of(rng, 400), {"source": path, "chunk_index": n})
                for n in range(10)
            ]
            vectors = embedder.embed_documents([d.text for d in docs])
            record = FileRecord(path, 4000, 0, f"{f:064x}", "", [d.id for d in docs], now)
            files.append((record, docs, vectors, embedder.info))
        store.replace_files(files)
    store.prepare_search()
    store.close()
    print(f"built {chunks:,} chunks in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def size_on_disk(db: Path) -> int:
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--notes", type=int, default=40, help="notes added on each route")
    parser.add_argument("--held", type=int, default=100, help="notes the writer holds first")
    parser.add_argument("--note-bytes", type=int, default=2_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/kb-bench-note-limits"))
    args = parser.parse_args()

    from kbcli import KnowledgeBase, SimpleEmbedder, SQLiteStore
    from kbcli.agent.tools.write import KnowledgeAddTool, NoteWriter, WriteLimits
    from kbcli.views import as_view

    args.workdir.mkdir(parents=True, exist_ok=True)
    db = args.workdir / f"notes-{args.chunks}.db"
    if not db.exists():
        build(db, args.chunks)
    rng = random.Random(11)
    kb = KnowledgeBase(store=SQLiteStore(db), embedder=SimpleEmbedder())
    limits = WriteLimits(notes_per_minute=10_000, total_bytes=10**12)
    writer = NoteWriter(f"bench-{os.getpid()}", limits)
    tool = KnowledgeAddTool(kb, writer=writer)
    view = as_view(kb)
    try:
        for _ in range(args.held):
            writer.add(view, text_of(rng, args.note_bytes), {})
        checked, sourced, plain, counted = [], [], [], []
        for n in range(args.notes):
            text = text_of(rng, args.note_bytes)
            started = time.perf_counter()
            result = tool.call({"text": text})
            checked.append((time.perf_counter() - started) * 1000)
            assert not result.is_error, result.text
            started = time.perf_counter()
            result = tool.call({"text": text[::-1], "metadata": {"source": f"/notes/./n{n}.md"}})
            sourced.append((time.perf_counter() - started) * 1000)
            assert not result.is_error, result.text
            started = time.perf_counter()
            kb.add(text_of(rng, args.note_bytes), {"topic": "plain"})
            plain.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            writer.held(view)
            counted.append((time.perf_counter() - started) * 1000)
        load = " ".join(f"{n:.1f}" for n in os.getloadavg())
        print(f"{args.chunks:,} chunks, writer holding {args.held + args.notes} notes of "
              f"{args.note_bytes:,} bytes; load {load}")  # fmt: skip
        for name, values in (("knowledge_add (limits checked)", checked),
                             ("knowledge_add with a source (+ lookup)", sourced),
                             ("KnowledgeBase.add (no checks)", plain),
                             ("count of the writer's bytes alone", counted)):  # fmt: skip
            figures = p50_p95(values)
            print(f"  {name:<40} p50 {figures['p50']:7.1f} ms   p95 {figures['p95']:7.1f} ms")
    finally:
        kb.close()

    growth = args.workdir / "growth.db"
    for leftover in args.workdir.glob("growth.db*"):
        leftover.unlink()
    kb = KnowledgeBase(store=SQLiteStore(growth), embedder=SimpleEmbedder())
    size = WriteLimits().note_bytes - 100
    try:
        kb.add("seed", {})
        before = size_on_disk(growth)
        added = 0
        writer = NoteWriter("growth", WriteLimits(notes_per_minute=10_000))
        for _ in range(50):
            writer.add(as_view(kb), text_of(rng, size), {})
            added += size
    finally:
        kb.close()
    grown = size_on_disk(growth) - before
    print(f"database growth: {grown:,} bytes for {added:,} bytes of note text "
          f"({grown / added:.2f} per byte; 50 notes of {size:,} bytes)")  # fmt: skip


if __name__ == "__main__":
    main()
