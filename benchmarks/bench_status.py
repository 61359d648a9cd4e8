"""Time `kb status` as a whole command on a tree of unchanged files (goal: under 1 s of CPU
for 10,000 files).

    python benchmarks/bench_status.py                 # 10,000 files of about 2 KB
    python benchmarks/bench_status.py --files 2000 --runs 5

The tree is ingested once (`kb ingest`, the built-in simple embedder), then `kb -q status`
runs as a fresh `python -m kbcli` process, one untimed run to warm the file cache and
``--runs`` timed ones: with nothing changed (a stat per file, nothing read), then after 1% of
the files were touched (same bytes, new mtime: those are hashed) and after 1% were edited
(exit 6). Prints wall and CPU time (user + system of the process, start-up included) and the
load average.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sync import write_file, write_tree  # noqa: E402
from common import load_average, run_child, tree_env  # noqa: E402

GOAL_CPU_S = 1.0


def timed_status(db: Path, cwd: Path, runs: int, expect: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``runs`` runs of ``kb -q status`` (after one untimed)."""
    argv = [sys.executable, "-m", "kbcli", "-q", "status"]
    env = tree_env(KB_DB=str(db))
    done = [run_child(argv, env, cwd) for _ in range(runs + 1)][1:]
    for d in done:
        if d.returncode != expect:
            sys.exit(f"kb status exited {d.returncode}, expected {expect}: {d.stderr.strip()}")
    return statistics.median(d.wall_s for d in done), statistics.median(d.cpu_s for d in done)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    rng = random.Random(7)
    work = Path(tempfile.mkdtemp(prefix="kb-bench-status-"))
    docs = work / "docs"
    files = write_tree(docs, args.files, rng)
    db = work / "kb.db"
    ingest = [sys.executable, "-m", "kbcli", "-q", "ingest", str(docs)]
    run_child(ingest, tree_env(KB_DB=str(db)), work).check()
    print(f"tree: {args.files:,} markdown files in {docs}, ingested; load {load_average()}")

    def show(label: str, expect: int) -> float:
        wall, cpu = timed_status(db, work, args.runs, expect)
        print(f"{label:<34} wall {wall:6.3f} s   CPU {cpu:6.3f} s")
        return cpu

    cpu = show("kb status, nothing changed", 0)
    for path in rng.sample(files, max(1, args.files // 100)):
        os.utime(path, None)
    show("kb status, 1% touched (hashed)", 0)
    for path in rng.sample(files, max(1, args.files // 100)):
        write_file(path, rng, tag="edited ")
    show("kb status, 1% edited (exit 6)", 6)
    verdict = "meets" if cpu < GOAL_CPU_S else "misses"
    print(
        f"unchanged: {cpu:.3f} s CPU {verdict} the goal of {GOAL_CPU_S:g} s; load {load_average()}"
    )


if __name__ == "__main__":
    main()
