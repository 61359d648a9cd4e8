"""What naming a file by the end of its path costs ``kb get`` and ``knowledge_get``
(:func:`kbcli.agent.get.find_source`): the path as recorded against its unique end, over the
whole index and inside a scope that hides half the files, and an end that 1,000 files share
(refused, naming 10).

The index holds ``--files`` sources of one chunk each (SQLite, built-in embedder), half of
them in tenant ``acme``, half in ``globex``, plus 1,000 ``README.md`` files. Each variant reads
a different file of the same position in turn (``common.once_in_turns``: variants interleaved,
each file timed once, its best of 3 beside it), after one untimed warm-up.

Usage::

    python benchmarks/bench_path_suffix.py [--files 20000] [--queries 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from common import load_average, once_in_turns  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()

    from kbcli import KnowledgeBase, SimpleEmbedder, SQLiteStore
    from kbcli.agent.get import AmbiguousPathError, find_source
    from kbcli.views import KnowledgeView

    folder = Path(tempfile.mkdtemp(prefix="kb-bench-suffix-"))
    kb = KnowledgeBase(store=SQLiteStore(folder / "kb.db"), embedder=SimpleEmbedder())
    began = time.perf_counter()
    with kb.store.transaction():
        for n in range(args.files):
            tenant = "acme" if n % 2 == 0 else "globex"
            source = f"/notes/{tenant}/d{n // 100:03d}/note{n:06d}.md"
            kb.add(f"note {n} about open files", {"source": source, "tenant": tenant})
        for n in range(1000):
            tenant = "acme" if n % 2 == 0 else "globex"
            kb.add("a readme", {"source": f"/notes/{tenant}/r{n:04d}/README.md", "tenant": tenant})
    built = time.perf_counter() - began
    whole = KnowledgeView(kb, None)
    acme = KnowledgeView(kb, {"tenant": "acme"})
    step = max(2, (args.files // args.queries) & ~1)  # even: acme's files
    picked = list(range(0, args.files, step))[: args.queries]

    def path(n: int) -> str:
        tenant = "acme" if n % 2 == 0 else "globex"
        return f"/notes/{tenant}/d{n // 100:03d}/note{n:06d}.md"

    def ambiguous(view: KnowledgeView) -> None:
        try:
            find_source(view, "README.md")
        except AmbiguousPathError:
            return
        raise AssertionError("README.md should be ambiguous")

    variants = {
        "whole index, path as recorded": lambda n: find_source(whole, path(n)),
        "whole index, end note123456.md": lambda n: find_source(whole, f"note{n:06d}.md"),
        "acme scope, path as recorded": lambda n: find_source(acme, path(n)),
        "acme scope, end note123456.md": lambda n: find_source(acme, f"note{n:06d}.md"),
        "whole index, README.md x1000 (refused)": lambda n: ambiguous(whole),
        "acme scope, README.md x500 (refused)": lambda n: ambiguous(acme),
    }
    load = load_average()
    figures = once_in_turns(variants, picked, warmup=args.files - 2)
    print(
        f"{args.files:,} files + 1,000 README.md (built in {built:.1f} s), {len(picked)} "
        f"lookups per variant; load {load} before, {load_average()} after; {os.cpu_count()} CPUs"
    )
    for name, ms in figures.items():
        print(f"  {name:<42} p50 {ms['p50']:8.2f} ms  p95 {ms['p95']:8.2f} ms  best p50 "
              f"{ms['best_p50']:8.2f} ms")  # fmt: skip
    kb.close()


if __name__ == "__main__":
    main()
