"""Time `kb ingest` as a whole command over a generated tree of markdown files.

    python benchmarks/bench_sync.py                 # 10,000 files of about 2 KB
    python benchmarks/bench_sync.py --files 2000

Runs, each as a fresh `python -m kbcli` process with the built-in simple embedder:
1. first ingest of the whole tree;
2. a re-run with nothing changed (goal: under 3 s for the whole command);
3. a re-run after 1% of the files changed;
4. a re-run after 1% of the files were only touched (same bytes, new mtime).
Prints wall time and the JSON summary counts of each.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORDS = (
    "index search query token chunk vector embed sqlite file folder markdown heading section "
    "password reset account setting install linux release update error server client cache "
    "memory disk network retry timeout backup restore policy user admin role share sync"
).split()


def paragraph(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(30, 60))) + "."


def write_file(path: Path, rng: random.Random, tag: str = "") -> None:
    parts = [f"# {tag}{path.stem}"]
    while sum(len(p) for p in parts) < 2000:
        parts.append(f"## {rng.choice(WORDS)} {rng.choice(WORDS)}")
        parts.append(paragraph(rng))
    path.write_text("\n\n".join(parts))


def run(db: Path, docs: Path) -> tuple[float, dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KB_DB": str(db)}
    env.pop("OPENAI_API_KEY", None)
    env.pop("GOOGLE_API_KEY", None)
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "kbcli", "-q", "ingest", str(docs), "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=docs.parent,
    )
    seconds = time.perf_counter() - started
    if out.returncode != 0:
        sys.exit(f"kb ingest failed ({out.returncode}): {out.stderr.strip()}")
    return seconds, json.loads(out.stdout)


def show(label: str, seconds: float, summary: dict) -> None:
    keys = ("added", "updated", "unchanged", "chunks_added", "chunks_removed")
    counts = ", ".join(f"{k} {summary[k]}" for k in keys)
    print(f"{label:<28} {seconds:7.2f} s   ({counts})")


def write_tree(docs: Path, count: int, rng: random.Random) -> list[Path]:
    """``count`` Markdown notes under ``docs``, 500 a folder (:func:`write_file`)."""
    files = []
    for i in range(count):
        folder = docs / f"d{i // 500:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"note{i:05d}.md"
        write_file(path, rng)
        files.append(path)
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10_000)
    args = ap.parse_args()
    rng = random.Random(5)
    work = Path(tempfile.mkdtemp(prefix="kb-bench-sync-"))
    docs = work / "docs"
    files = write_tree(docs, args.files, rng)
    size = sum(p.stat().st_size for p in files) / 1e6
    print(f"tree: {args.files:,} markdown files, {size:.1f} MB, in {docs}")
    db = work / "kb.db"
    show("first ingest", *run(db, docs))
    show("re-run, nothing changed", *run(db, docs))
    changed = rng.sample(files, max(1, args.files // 100))
    for path in changed:
        write_file(path, rng, tag="changed ")
    show("re-run, 1% changed", *run(db, docs))
    for path in rng.sample(files, max(1, args.files // 100)):
        os.utime(path, None)
    show("re-run, 1% touched", *run(db, docs))
    print(f"database size: {db.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
