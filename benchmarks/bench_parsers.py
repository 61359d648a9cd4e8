"""What parsing PDF and DOCX files in a bounded child process costs per file.

Builds a folder of small one-page PDFs and one-paragraph DOCX files, then runs ``kb ingest`` on
it (a fresh database each run) and prints the wall time per run and per file, median of
``--runs``. (Wall time only: the CPU time of processes that are not waited for, such as a
``multiprocessing`` fork server's children, never reaches this script's ``RUSAGE_CHILDREN``.)
Run it once per checkout to compare two ways of running parsers::

    python benchmarks/bench_parsers.py --files 300
    python benchmarks/bench_parsers.py --files 300 --src /path/to/other/checkout/src

The load average is printed beside the figures (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def build(folder: Path, files: int) -> None:
    import docx

    from cli_helpers import minimal_pdf

    folder.mkdir(parents=True)
    for n in range(files):
        if n % 2:
            (folder / f"manual-{n}.pdf").write_bytes(minimal_pdf(f"Manual page {n} zeppelin"))
        else:
            document = docx.Document()
            document.add_paragraph(f"Travel note {n}: book the night train to Vienna.")
            document.save(str(folder / f"note-{n}.docx"))


def ingest(src: Path, folder: Path, db: Path) -> float:
    """Wall seconds of one ``kb ingest`` of ``folder`` into a new ``db``."""
    env = {**os.environ, "PYTHONPATH": str(src), "KB_DB": str(db), "HOME": str(db.parent)}
    for key in ("OPENAI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY", "KB_CONFIG"):
        env.pop(key, None)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "kbcli", "-q", "ingest", str(folder), "--json"],
        env=env,
        check=True,
        capture_output=True,
        cwd=db.parent,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the kbcli tree to run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kb-bench-parsers-") as tmp:
        folder = Path(tmp) / "docs"
        build(folder, args.files)
        walls = []
        print(f"load average at start: {os.getloadavg()[0]:.2f}; src {args.src}")
        for run in range(args.runs):
            db_dir = Path(tmp) / f"run-{run}"
            db_dir.mkdir()
            walls.append(ingest(args.src, folder, db_dir / "kb.db"))
            print(f"run {run + 1}: wall {walls[-1]:.2f} s")
        wall = statistics.median(walls)
        print(
            f"median over {args.runs} runs, {args.files} files: wall {wall:.2f} s "
            f"({wall * 1000 / args.files:.1f} ms/file); "
            f"load average at end: {os.getloadavg()[0]:.2f}"
        )


if __name__ == "__main__":
    main()
