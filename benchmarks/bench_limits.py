"""What a hostile chat server or a huge scan makes ``kb`` spend (issue 37, items 1 and 3).

Each scenario runs the real ``kb`` as a child process (this checkout's sources, or another
tree's with ``--src``) and prints its exit code, wall time, peak resident memory (the child's
own ``ru_maxrss`` from ``os.wait4``), what the fake server sent and the last line of stderr,
with the load average:

- ``ask-400mb``: ``kb ask`` (not streamed) against a local OpenAI-compatible server answering
  400 MB of text in one body; ``ask-400mb-gzip``: the same body gzip-compressed;
- ``ask-forever``: ``kb ask --stream`` against a server that streams words without end, with
  ``rag.answer.deadline`` set to ``--deadline`` seconds (0: not set, for a tree without it);
- ``ingest-tiff``: ``kb ingest --json`` of a folder holding one ``--frames``-frame TIFF (small
  scanned lines) and a text note, with the default limits (``ocr.max_pages`` 100,
  ``limits.file_timeout`` 120 s): the OCR pages read and the file's outcome.

A child still running after ``--kill-after`` seconds is killed (a tree without the limits never
ends ``ask-forever``); that is printed as ``killed``.

    python benchmarks/bench_limits.py [--only ask-400mb,ingest-tiff] [--frames 3000]
        [--deadline 10] [--kill-after 300] [--src PATH/TO/OTHER/src]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import load_average, tree_env  # noqa: E402

from fake_chat import FakeChatServer  # noqa: E402

QUESTION = "How often does the VPN password rotate?"
SCENARIOS = ("ask-400mb", "ask-400mb-gzip", "ask-forever", "ingest-tiff")


def run(argv: list[str], env: dict[str, str], kill_after: float) -> dict[str, Any]:
    """``argv`` to completion (or killed after ``kill_after`` s): exit, wall, peak resident
    memory (``VmHWM`` of the child's own address space, polled from /proc: ``ru_maxrss``
    would count this process too, which the child shares until it executes), the last
    stderr line, and stdout (only when under 1 MB: a 400 MB answer is not held here)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        # in the temporary home: no jianmu.yaml of the working directory applies
        child = subprocess.Popen(argv, env=env, cwd=env.get("HOME"), stdout=out, stderr=err)
        proc, peak_kb, killed = Path(f"/proc/{child.pid}"), 0, False
        while child.poll() is None:
            try:
                if b"kbcli" in (proc / "cmdline").read_bytes():  # past the exec
                    status = (proc / "status").read_text()
                    peak_kb = max(peak_kb, int(status.split("VmHWM:")[1].split()[0]))
            except (OSError, IndexError, ValueError):
                pass
            try:
                child.wait(timeout=0.02)
            except subprocess.TimeoutExpired:
                if time.perf_counter() - started > kill_after:
                    child.kill()
                    killed = True
        wall = time.perf_counter() - started
        size = out.seek(0, os.SEEK_END)
        out.seek(0)
        err.seek(0)
        lines = [line for line in err.read().decode(errors="replace").splitlines() if line]
        return {
            "exit": "killed" if killed else child.returncode,
            "wall_s": round(wall, 1),
            "peak_rss_mb": round(peak_kb / 1024, 1),
            "stderr": lines[-1][:240] if lines else "",
            "stdout_kb": round(size / 1024, 1),
            "stdout": out.read().decode(errors="replace") if size < (1 << 20) else "",
        }


def ask(kind: str, home: Path, env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    config = home / f"{kind}.yaml"
    forever = f"rag:\n  answer:\n    deadline: {args.deadline}\n" if args.deadline else ""
    config.write_text(forever if "forever" in kind else "")
    with FakeChatServer() as server:
        server.huge = None if "forever" in kind else 400 << 20
        server.forever = "forever" in kind
        server.gzip = kind.endswith("gzip")
        child_env = {**env, "OPENAI_BASE_URL": server.url + "/v1", "KB_CONFIG": str(config)}
        argv = [sys.executable, "-m", "kbcli", "ask", QUESTION]
        if server.forever:
            argv.append("--stream")
        result = run(argv, child_env, args.kill_after)
        result["server_sent_mb"] = round(server.bytes_sent / (1 << 20), 1)
    del result["stdout"]
    return result


def ingest_tiff(home: Path, env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    from scans import render_page

    docs = home / "scans"
    docs.mkdir()
    frames = [
        render_page([f"Pump log line {n}, valve RV-{n}."], dpi=100, width_in=5, height_in=2.2)
        for n in range(min(args.frames, 200))
    ]
    frames = [frames[n % len(frames)] for n in range(args.frames)]
    tiff = docs / "log.tif"
    frames[0].save(tiff, save_all=True, append_images=frames[1:], compression="tiff_deflate")
    (docs / "note.md").write_text("# Note\n\nThe quartermaster keeps the keys.\n")
    child_env = {**env, "KB_DB": str(home / "scans.db")}
    argv = [sys.executable, "-m", "kbcli", "ingest", str(docs), "--ext", ".tif,.md", "--json"]
    result = run(argv, child_env, args.kill_after)
    result["tiff_mb"] = round(tiff.stat().st_size / 1e6, 2)
    try:
        report = json.loads(result.pop("stdout"))
    except ValueError:
        return result
    slow = {s["path"]: s for s in report.get("slowest", [])}.get(str(tiff), {})
    result["added"] = report.get("added")
    result["ocr_pages"] = slow.get("ocr_pages")
    result["failed"] = [f["error"][:160] for f in report.get("failed", [])]
    result["warnings"] = [w[:160] for w in report.get("warnings", [])]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    parser.add_argument("--frames", type=int, default=3000, help="frames of the TIFF")
    parser.add_argument(
        "--deadline", type=float, default=10.0, help="ask-forever's deadline (0: none set)"
    )
    parser.add_argument("--kill-after", type=float, default=300.0, help="seconds per child")
    parser.add_argument("--src", help="run another tree's sources (its src folder)")
    args = parser.parse_args()
    extra = {"PYTHONPATH": args.src} if args.src else {}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        env = tree_env(KB_DB=str(home / "kb.db"), HOME=str(home), **extra)
        env.pop("KB_CONFIG", None)
        (home / "docs").mkdir()
        (home / "docs" / "vpn.md").write_text(
            "# VPN\n\nThe VPN password rotates every month; reset it from the portal.\n"
        )
        indexed = run([sys.executable, "-m", "kbcli", "ingest", str(home / "docs")], env, 300)
        if indexed["exit"] != 0:
            raise SystemExit(f"kb ingest failed: {indexed['stderr']}")
        print(json.dumps({"load_average": load_average(), "sources": args.src or "this tree"}))
        for name in args.only.split(","):
            before = load_average()
            if name == "ingest-tiff":
                result = ingest_tiff(home, env, args)
            elif name in SCENARIOS:
                result = ask(name, home, env, args)
            else:
                raise SystemExit(f"unknown scenario {name!r}: choose from {', '.join(SCENARIOS)}")
            print(json.dumps({"scenario": name, "load_before": before, **result}))


if __name__ == "__main__":
    main()
