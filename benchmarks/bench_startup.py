"""Start-up cost of the ``kb`` command.

Measures the wall time of whole ``kb`` processes over N runs (min / median / max):

- ``python -c pass``                       the interpreter alone, for reference
- ``kb --help``
- ``kb search "reset password" --mode keyword``  over a small index made for the run

and, for the two ``kb`` commands, runs ``python -X importtime`` once to list which heavy modules
(numpy, openai, google.genai, pypdf, docx) got imported and the slowest top-level imports.

Usage::

    python benchmarks/bench_startup.py [--runs 20] [--kb PATH] [--json]
    python benchmarks/bench_startup.py --db /tmp/bench_ann/scifact-2400.db --query "..." --runs 7

``--db`` searches an existing index instead (e.g. one ``bench_ann.py`` built with the local
model) and adds ``kb search`` in the default hybrid mode, which loads the index's embedder.
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
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import find_kb, tree_env, whole_process  # noqa: E402

HEAVY = ("numpy", "openai", "google.genai", "pypdf", "docx")
TEXTS = (
    "To reset your password, open Settings, choose Security and click Reset password.",
    "Water the tomatoes every morning and keep the basil out of the afternoon sun.",
    "Invoices are due within thirty days of the delivery date.",
)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--kb", help="path of the kb command")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--db", help="an existing index to search (adds a hybrid kb search)")
    parser.add_argument("--query", default="reset password")
    args = parser.parse_args()
    load_start = os.getloadavg()

    kb = find_kb(args.kb)
    python = interpreter_of(kb)
    with tempfile.TemporaryDirectory() as tmp:
        env = tree_env()
        env["KB_DB"] = str(Path(args.db).resolve()) if args.db else str(Path(tmp) / "kb.db")
        for text in TEXTS if not args.db else ():
            subprocess.run(
                [str(kb), "-q", "add", text], env=env, cwd=tmp, check=True, capture_output=True
            )
        commands: dict[str, list[str]] = {
            "python -c pass": [python, "-c", "pass"],
            "kb --help": [str(kb), "--help"],
            "kb search --mode keyword": [
                str(kb),
                "search",
                args.query,
                "--mode",
                "keyword",
            ],
        }
        if args.db:
            commands["kb search (hybrid)"] = [str(kb), "-q", "search", args.query]
        results: dict[str, dict[str, object]] = {}
        for label, argv in commands.items():
            results[label] = whole_process(argv, env, tmp, args.runs)  # after a warm-up run
            if label.startswith("kb"):
                results[label].update(imports(python, argv, env, tmp))

    load = {
        "load_start": [round(x, 2) for x in load_start],
        "load_end": [round(x, 2) for x in os.getloadavg()],
    }
    if args.json:
        out = {"runs": args.runs, "kb": str(kb), "results": results, **load}
        print(json.dumps(out, indent=2))
        return
    print(f"kb: {kb}   runs: {args.runs}   load average {load['load_start']} -> {load['load_end']}")
    for label, figures in results.items():
        print(
            f"{label:28} min {figures['min_ms']:7.1f} ms   median {figures['median_ms']:7.1f} ms"
            f"   max {figures['max_ms']:7.1f} ms   cpu {figures['cpu_median_ms']:7.1f} ms"
        )
        if "heavy_imported" in figures:
            heavy = ", ".join(figures["heavy_imported"]) or "none"
            print(f"{'':28} heavy modules imported: {heavy}; {figures['modules']} modules")
            print(f"{'':28} slowest: {'; '.join(figures['slowest_top_level'])}")


if __name__ == "__main__":
    main()
