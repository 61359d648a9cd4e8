"""Time ``KnowledgeBase.ingest_file`` file by file against ``sync`` (``kb ingest``) of the
same folder, on a fresh SQLite index each, with the built-in embedder.

    PYTHONPATH=src python benchmarks/bench_ingest_file.py --files 300

Prints seconds and files per second for both, and what the index holds after each.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from kbcli import KnowledgeBase
from kbcli.ingest.sync import sync


def write_folder(folder: Path, files: int) -> list[Path]:
    folder.mkdir()
    paths = []
    for i in range(files):
        path = folder / f"note{i:05d}.md"
        body = "\n\n".join(
            f"## Part {j}\n\nTopic {i % 37} word{j} about service {i % 11} and step {j}."
            for j in range(8)
        )
        path.write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = write_folder(root / "docs", args.files)
        with KnowledgeBase.open(root / "one.db") as kb:
            started = time.perf_counter()
            for path in paths:
                kb.ingest_file(path)
            one = time.perf_counter() - started
            chunks_one = kb.store.count()
        with KnowledgeBase.open(root / "sync.db") as kb:
            started = time.perf_counter()
            sync(kb, [root / "docs"])
            whole = time.perf_counter() - started
            chunks_sync = kb.store.count()
    print(f"{args.files} files")
    for label, seconds, chunks in (
        ("ingest_file one by one", one, chunks_one),
        ("sync of the folder", whole, chunks_sync),
    ):
        rate = args.files / seconds
        print(f"{label:<23} {seconds:6.2f} s  {rate:7.1f} files/s  {chunks} chunks")


if __name__ == "__main__":
    main()
