"""What the keyword analysis costs per chunk at ingest: ``keyword_counts`` (title, heading and
body analysed, weighted term frequencies) and ``pack_terms`` (the forward index blob), in
microseconds per chunk, best of ``--rounds``.

    python benchmarks/bench_analysis.py                       # bench_all's synthetic chunks
    python benchmarks/bench_analysis.py --pages DIR           # real pages (e.g. tldr's .md files)
    python benchmarks/bench_analysis.py --compare /tmp/old/src   # before -> after, alternating

Each source tree runs in its own process (``PYTHONPATH``), in turns, so both meet the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, sys, time, zlib
from kbcli.text.analysis import Analyzer, keyword_counts
from kbcli.stores.sqlite.catalog import pack_terms
chunks = json.load(open(sys.argv[1]))
rounds = int(sys.argv[2])
analyzer = Analyzer()
ids = [{t: zlib.crc32(t.encode()) for t in keyword_counts(analyzer, c, m)} for c, m in chunks]
counts_s, pack_s = [], []
for _ in range(rounds):
    started = time.perf_counter()
    counts = [keyword_counts(analyzer, c, m) for c, m in chunks]
    counts_s.append(time.perf_counter() - started)
    by_id = [{i[t]: n for t, n in c.items()} for c, i in zip(counts, ids)]
    started = time.perf_counter()
    for tf in by_id:
        pack_terms(tf)
    pack_s.append(time.perf_counter() - started)
n = len(chunks)
print(json.dumps({"keyword_counts_us": 1e6 * min(counts_s) / n,
                  "pack_terms_us": 1e6 * min(pack_s) / n}))
"""


def chunks_of(pages: Path | None, n: int) -> list[tuple[str, dict]]:
    """``n`` (text, metadata) pairs: paragraphs of the pages under ``pages`` (title = file
    name), else bench_all's synthetic chunks."""
    if pages is None:
        sys.path.insert(0, str(HERE))
        import bench_all

        return [(t, {"title": f"f{i // 10:07d}"}) for i, t in enumerate(bench_all.chunk_texts(n))]
    out: list[tuple[str, dict]] = []
    for path in sorted(pages.rglob("*.md")):
        for part in path.read_text("utf-8", "replace").split("\n\n"):
            if part.strip():
                out.append((part, {"title": path.stem}))
        if len(out) >= n:
            break
    return out[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=Path, default=None, help="a folder of .md pages")
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compare", type=Path, action="append", default=[])
    args = ap.parse_args()
    data = Path(os.environ.get("TMPDIR", "/tmp")) / f"kb-bench-analysis-{os.getpid()}.json"
    data.write_text(json.dumps(chunks_of(args.pages, args.chunks)), encoding="utf-8")
    trees = [HERE.parent / "src", *args.compare]
    try:
        for tree in trees:
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(data), str(args.rounds)],
                env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True,
                check=True,
            )  # fmt: skip
            result = json.loads(done.stdout)
            print(
                f"{tree}: keyword_counts {result['keyword_counts_us']:.1f} µs/chunk, "
                f"pack_terms {result['pack_terms_us']:.2f} µs/chunk "
                f"({args.chunks:,} chunks, load {os.getloadavg()[0]:.1f})"
            )
    finally:
        data.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
