"""Peak memory and time of ``kb search --mmr`` with a large ``-k``.

MMR re-orders a pool of 2 x k candidates. It used to build the pool x pool similarity matrix
(float32): ``-k 20000`` on 50,000 chunks asked for 6.4 GB, ``-k 1000000`` died with SIGSEGV at
7.3 GB. It now keeps one vector of the pool's length and reads one row of similarities per pick
(``kbcli.search.diversity.mmr_order``), so memory is the pool's vectors.

The script builds an index of ``--chunks`` chunks (built-in embedder, 64 dimensions) once, then
runs ``kb search "password reset" -k K --mode semantic --mmr 0.5 --json`` in a child process
for each ``-k`` and prints wall time, CPU time and the child's peak resident memory (from
``os.wait4``). ``--src`` runs another checkout's sources (the code before the change, for
example: ``git worktree add /tmp/before main``); ``--timeout`` stops a child that runs too long
(its peak so far is still reported); ``--limit-gb`` sets the child's address-space limit.

Run:  python benchmarks/bench_mmr.py [--chunks 50000] [--k 2000,20000] [--mode semantic]
          [--src PATH] [--timeout 600] [--limit-gb 4] [--db PATH]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SRC, load_average, machine_info, tree_env  # noqa: E402


def build(db: Path, chunks: int) -> float:
    """An index of ``chunks`` chunks of 42 words at ``db`` (ten chunks a file); seconds."""
    sys.path.insert(0, str(SRC))
    from kbcli import Document, KnowledgeBase, SimpleEmbedder

    started = time.perf_counter()
    embedder = SimpleEmbedder()
    kb = KnowledgeBase.open(db, embedder=embedder)
    rnd = random.Random(7)
    words = [f"term{i}" for i in range(3000)]
    try:
        for start in range(0, chunks, 5000):
            batch = []
            for i in range(start, min(chunks, start + 5000)):
                text = "password reset " + " ".join(rnd.choices(words, k=40))
                meta = {"source": f"/corpus/f{i // 10}.md", "chunk_index": i % 10}
                batch.append(Document(f"c{i}", text, meta))
            for doc, vector in zip(batch, embedder.embed_documents([d.text for d in batch])):
                doc.embedding = vector
            kb.store.add(batch)
    finally:
        kb.close()
    return time.perf_counter() - started


def run(argv: list[str], env: dict[str, str], timeout: float, limit_gb: float | None) -> dict:
    """Run ``argv``; wall and CPU seconds, peak RSS (MB), exit status, last stderr line."""

    def limit() -> None:
        if limit_gb:
            size = int(limit_gb * 1024**3)
            resource.setrlimit(resource.RLIMIT_AS, (size, size))

    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=limit
        )
        timed_out = False
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - started > timeout:
                child.kill()
                timed_out = True
                _, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(0.05)
        wall = time.perf_counter() - started
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    return {
        "exit": "timeout" if timed_out else os.waitstatus_to_exitcode(status),
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "stderr": lines[-1][:160] if lines else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=50_000)
    parser.add_argument("--k", default="2000,20000", help="comma-separated -k values")
    parser.add_argument("--mode", default="semantic")
    parser.add_argument("--src", help="the src folder of the kbcli to measure [this checkout]")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--limit-gb", type=float, default=None)
    parser.add_argument("--db", type=Path, help="keep the index here (built when missing)")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="kb-bench-mmr-"))
    db = args.db or folder / "kb.db"
    if not db.exists():
        print(f"built {args.chunks} chunks in {build(db, args.chunks):.1f} s", flush=True)
    env = tree_env(KB_DB=str(db), HOME=str(folder), XDG_CONFIG_HOME=str(folder / "config"))
    if args.src:
        env["PYTHONPATH"] = str(Path(args.src).resolve())
    info = machine_info()
    print(f"{info['cpu']}, {info['cores']} cores, load {load_average()}; sources "
          f"{env['PYTHONPATH'].split(os.pathsep)[0]}", flush=True)  # fmt: skip
    for k in [int(x) for x in args.k.split(",")]:
        argv = [sys.executable, "-m", "kbcli", "search", "password reset", "-k", str(k),
                "--mode", args.mode, "--mmr", "0.5", "--by", "chunk", "--json"]  # fmt: skip
        figures = run(argv, env, args.timeout, args.limit_gb)
        print(f"-k {k} --mode {args.mode} --mmr 0.5: {figures}", flush=True)


if __name__ == "__main__":
    main()
