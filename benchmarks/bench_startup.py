"""Start-up cost of the ``kb`` command.

Measures the wall time of whole ``kb`` processes over N runs (min / median / max):

- ``python -c pass``                       the interpreter alone, for reference
- ``kb --help``
- ``kb search "reset password" --mode keyword``  over a small index made for the run

and, for the two ``kb`` commands, runs ``python -X importtime`` once to list which heavy modules
(numpy, openai, google.genai, pypdf, docx) got imported and the slowest top-level imports.

Usage::

    python benchmarks/bench_startup.py [--runs 20] [--kb PATH] [--json]
    python benchmarks/bench_startup.py --chunks 100000 --base OTHER/src --runs 15
    python benchmarks/bench_startup.py --db /tmp/bench_ann/scifact-2400.db --query "..." --runs 7

``--chunks N`` searches an index of N chunks instead (``bench_keyword.py``'s synthetic corpus,
keyword only, written once into the temporary folder; issue 38 measures at 100000).
``--db`` searches an existing index instead (e.g. one ``bench_ann.py`` built with the local
model) and adds ``kb search`` in the default hybrid mode, which loads the index's embedder.
``--query`` may be given several times (a keyword search row each; the hybrid row takes the
first). ``--cwd DIR`` runs the commands in DIR instead (e.g. the index's folder, so that its
``jianmu.yaml`` is read as a user's would be). ``--base OTHER/src`` also runs every command
on another checkout's sources (e.g. an older commit's ``src``), alternating run by run
with this one, so that *before* and *after* come from the same moments of a shared machine.
The load average is reported at the start and the end.

``--kb`` defaults to the ``kb`` beside this Python, then the one on PATH; it runs this
checkout's ``src`` (``PYTHONPATH``) with bytecode caching on, as an installed package has it
(``common.tree_env``). Everything runs in a temporary folder holding the index (``$KB_DB``), so
no ``./jianmu.yaml`` is read; API keys are removed from the environment so no provider is
contacted. "cpu" is the median user + system
time of the process: on a busy machine it is steadier than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import find_kb, run_child, tree_env, whole_process  # noqa: E402

HEAVY = ("numpy", "openai", "google.genai", "pypdf", "docx")
TEXTS = (
    "To reset your password, open Settings, choose Security and click Reset password.",
    "Water the tomatoes every morning and keep the basil out of the afternoon sun.",
    "Invoices are due within thirty days of the delivery date.",
)


def build_index(db: Path, chunks: int, env: dict[str, str], cwd: str, python: str) -> None:
    """``chunks`` chunks of :func:`bench_keyword.corpus` (the first one about resetting a
    password) into ``db``, through this checkout's library, without embeddings."""
    code = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from bench_keyword import corpus
from kbcli.config.lookup import load_config
from kbcli.pipeline import KnowledgeBase
from kbcli.types import Document
texts = corpus({chunks})[0]
texts[0] = {TEXTS[0]!r} + " " + texts[0]
kb = KnowledgeBase.from_config(load_config(), db={str(db)!r}, create=True)
for start in range(0, len(texts), 5000):
    kb.store.add([Document(f"c{{i}}", texts[i], {{"source": f"/docs/f{{i // 10}}.md"}})
                  for i in range(start, min(start + 5000, len(texts)))])
kb.close()
"""
    subprocess.run([python, "-c", code], env=env, cwd=cwd, check=True)


def interpreter_of(kb: Path) -> str:
    first = kb.read_text(errors="replace").splitlines()[0]
    return first[2:].strip() if first.startswith("#!") else sys.executable


def imports(python: str, argv: list[str], env: dict[str, str], cwd: str) -> dict[str, object]:
    done = subprocess.run(
        [python, "-X", "importtime", *argv], env=env, cwd=cwd, capture_output=True
    )
    rows = []
    for line in done.stderr.decode(errors="replace").splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        try:
            rows.append((int(cumulative.strip()), name.rstrip()))
        except ValueError:
            continue  # the header line
    names = {name.strip() for _, name in rows}
    heavy = [m for m in HEAVY if m in names or any(n.startswith(m + ".") for n in names)]
    top_level = sorted((r for r in rows if not r[1].startswith("  ")), reverse=True)[:6]
    return {
        "heavy_imported": heavy,
        "modules": len(names),
        "slowest_top_level": [f"{name.strip()} {us / 1000:.1f} ms" for us, name in top_level],
    }


def alternating(
    argv: list[str], envs: dict[str, dict[str, str]], cwd: str, runs: int
) -> dict[str, dict[str, float]]:
    """:func:`common.whole_process`'s figures for ``argv`` under each environment of ``envs``,
    their runs interleaved (one warm-up run each first)."""
    for env in envs.values():
        run_child(argv, env, cwd).check()
    done: dict[str, list] = {name: [] for name in envs}
    for _ in range(runs):
        for name, env in envs.items():
            done[name].append(run_child(argv, env, cwd).check())
    figures = {}
    for name, runs_of in done.items():
        wall = [d.wall_s * 1000 for d in runs_of]
        figures[name] = {
            "min_ms": round(min(wall), 1),
            "median_ms": round(statistics.median(wall), 1),
            "max_ms": round(max(wall), 1),
            "cpu_median_ms": round(statistics.median(d.cpu_s * 1000 for d in runs_of), 1),
            "peak_rss_mb": max(d.peak_rss_mb for d in runs_of),
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--kb", help="path of the kb command")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--db", help="an existing index to search (adds a hybrid kb search)")
    parser.add_argument("--chunks", type=int, help="search a synthetic index of this many chunks")
    parser.add_argument("--query", action="append", help="repeatable [default: reset password]")
    parser.add_argument("--base", help="another checkout's src to run alternately (before)")
    parser.add_argument(
        "--cwd", help="run the commands here (e.g. the index's folder: its jianmu.yaml is read)"
    )
    args = parser.parse_args()
    queries = args.query or ["reset password"]
    load_start = os.getloadavg()

    kb = find_kb(args.kb)
    python = interpreter_of(kb)
    with tempfile.TemporaryDirectory() as tmp:
        env = tree_env()
        env["KB_DB"] = str(Path(args.db).resolve()) if args.db else str(Path(tmp) / "kb.db")
        if args.chunks and not args.db:
            build_index(Path(env["KB_DB"]), args.chunks, env, tmp, python)
        for text in TEXTS if not (args.db or args.chunks) else ():
            subprocess.run(
                [str(kb), "-q", "add", text], env=env, cwd=tmp, check=True, capture_output=True
            )
        commands: dict[str, list[str]] = {
            "python -c pass": [python, "-c", "pass"],
            "kb --help": [str(kb), "--help"],
        }
        for query in queries:
            label = "kb search --mode keyword" + (f" {query!r}" if len(queries) > 1 else "")
            commands[label] = [str(kb), "search", query, "--mode", "keyword"]
        if args.db:
            commands["kb search (hybrid)"] = [str(kb), "-q", "search", queries[0]]
        envs = {"after": env}
        if args.base:
            base = dict(env, PYTHONPATH=str(Path(args.base).resolve()))
            envs = {"before": base, "after": env}
        results: dict[str, dict[str, object]] = {}
        if args.cwd:
            tmp = str(Path(args.cwd).resolve())
        for label, argv in commands.items():
            if args.base:
                for name, figures in alternating(argv, envs, tmp, args.runs).items():
                    results[f"{label} [{name}]"] = figures
            else:
                results[label] = whole_process(argv, env, tmp, args.runs)  # after a warm-up run
            if label.startswith("kb"):
                for name, tree_env_ in envs.items():
                    key = f"{label} [{name}]" if args.base else label
                    results[key].update(imports(python, argv, tree_env_, tmp))

    load = {
        "load_start": [round(x, 2) for x in load_start],
        "load_end": [round(x, 2) for x in os.getloadavg()],
    }
    if args.json:
        out = {"runs": args.runs, "chunks": args.chunks, "kb": str(kb), "results": results, **load}
        print(json.dumps(out, indent=2))
        return
    chunks = f"   chunks: {args.chunks}" if args.chunks else ""
    loads = f"{load['load_start']} -> {load['load_end']}"
    print(f"kb: {kb}   runs: {args.runs}{chunks}   load average {loads}")
    for label, figures in results.items():
        print(
            f"{label:44} min {figures['min_ms']:7.1f} ms   median {figures['median_ms']:7.1f} ms"
            f"   max {figures['max_ms']:7.1f} ms   cpu {figures['cpu_median_ms']:7.1f} ms"
        )
        if "heavy_imported" in figures:
            heavy = ", ".join(figures["heavy_imported"]) or "none"
            print(f"{'':44} heavy modules imported: {heavy}; {figures['modules']} modules")
            print(f"{'':44} slowest: {'; '.join(figures['slowest_top_level'])}")


if __name__ == "__main__":
    main()
