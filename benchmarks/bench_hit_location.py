"""What placing each hit on its best-matching line costs, and what it changes, on the tldr
pages (English, ``linux`` and ``common``) as ``kb search`` shows them.

For each judged query text of ``benchmarks/corpora/tldr/queries.jsonl`` the search runs twice,
interleaved (the order alternates query by query), timed once each: ``kbcli.search.query.search``
with ``locate=False`` (ranking only) and with ``locate=True`` (what ``kb search`` does: the
shown hits' files read again, the idf of the terms their lines hold, the best line). It prints
the milliseconds of both (p50, p95, mean) and their difference, and of the hits shown: how many
were placed from their file's lines, how many moved off their chunk's first line, and the share
whose shown line holds a query term before and after.

Usage::

    python benchmarks/bench_hit_location.py [--tarball PATH] [-k 5] [--mode hybrid]

The pages are unpacked from the shared tarball (see ``benchmarks/corpora/build_tldr.py``) into
a temporary folder and indexed with the built-in embedder; the load average is printed beside
the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "corpora"))

from build_tldr import default_tarball  # noqa: E402
from common import SRC, percentile  # noqa: E402

sys.path.insert(0, str(SRC))


def unpack(tarball: Path, into: Path) -> Path:
    """The ``pages/linux`` and ``pages/common`` folders of ``tarball`` under ``into``."""
    with tarfile.open(tarball) as archive:
        wanted = [
            m
            for m in archive.getmembers()
            if m.isfile() and m.name.startswith(("pages/linux/", "pages/common/"))
        ]
        archive.extractall(into, members=wanted, filter="data")
    return into / "pages"


def holds_term(kb, hit, terms: set[str]) -> bool | None:
    """Whether the line ``hit`` shows holds a query term (None: its file's lines unknown)."""
    from kbcli.system.paths import source_path

    try:
        lines = Path(source_path(hit.source)).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError, TypeError):
        return None
    line = hit.line
    if line is None or line > len(lines):
        return None
    return bool(set(kb.analyzer.terms(lines[line - 1])) & terms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tarball", type=Path, default=default_tarball())
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--mode", default="hybrid")
    args = parser.parse_args()

    from kbcli import KnowledgeBase, SimpleEmbedder, SQLiteStore
    from kbcli.ingest.sync import sync
    from kbcli.search.query import search
    from kbcli.types import SearchOptions

    queries = [
        json.loads(line)["text"]
        for line in (HERE / "corpora" / "tldr" / "queries.jsonl").read_text().splitlines()
        if line.strip()
    ]
    with tempfile.TemporaryDirectory() as tmp:
        pages = unpack(args.tarball, Path(tmp))
        kb = KnowledgeBase(store=SQLiteStore(Path(tmp) / "kb.db"), embedder=SimpleEmbedder())
        started = time.perf_counter()
        sync(kb, [pages])
        print(f"indexed {kb.store.count()} chunks in {time.perf_counter() - started:.1f} s")
        options = SearchOptions(k=args.k, mode=args.mode)
        for query in queries[:3]:  # warm: the keyword pack, the caches, the imports
            search(kb, query, options, locate=True)
        plain: list[float] = []
        placed: list[float] = []
        shown = read = moved = 0
        before: list[bool] = []
        after: list[bool] = []
        for n, query in enumerate(queries):
            runs = (False, True) if n % 2 == 0 else (True, False)
            for locate in runs:
                t = time.perf_counter()
                hits = search(kb, query, options, locate=locate)
                (placed if locate else plain).append((time.perf_counter() - t) * 1000)
                terms = set(kb.analyzer.query_terms(query))
                for hit in hits:
                    held = holds_term(kb, hit, terms)
                    if held is None:
                        continue
                    (after if locate else before).append(held)
                    if locate:
                        shown += 1
                        match = hit.result.match
                        read += match is not None
                        moved += hit.line != hit.result.document.metadata.get("line")
        kb.close()

    def row(name: str, ms: list[float]) -> str:
        mean = sum(ms) / len(ms)
        return (
            f"  {name:<22} p50 {percentile(ms, 50):7.2f}  p95 {percentile(ms, 95):7.2f}  "
            f"mean {mean:7.2f} ms"
        )

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{len(queries)} queries, -k {args.k}, --mode {args.mode}; load average {load}")
    print(row("search (rank only)", plain))
    print(row("search + locate", placed))
    extra = [b - a for a, b in zip(plain, placed)]
    print(row("difference", extra))
    print(
        f"hits shown: {shown}; placed from their file's lines: {read}; moved off their "
        f"chunk's first line: {moved}"
    )
    share = lambda held: f"{sum(held) / len(held):.0%}" if held else "-"  # noqa: E731
    print(f"shown line holds a query term: before {share(before)}, after {share(after)}")


if __name__ == "__main__":
    main()
