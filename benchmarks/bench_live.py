"""A live index under load: MCP clients searching while ``kb watch`` applies edits and a cron
``kb ingest`` of the same folder runs, all at once (issue 28).

Setup (in a temporary folder): ``--files`` notes indexed by ``kb ingest``; then, for
``--seconds`` (default 300):

- ``kb watch`` on the folder (its ``--json`` lines count the batches);
- an editor rewriting ``live.md`` every ``--edit-every`` seconds (version V: the words
  ``begin<V>`` and ``end<V>`` in one chunk) and one other note each time;
- a cron ``kb ingest`` of the folder every ``--cron-every`` seconds;
- ``--stdio`` SDK clients of one ``kb mcp`` each (stdio) and ``--http`` clients of one
  ``kb mcp --http`` (bearer token), each searching ``liveversion`` in a loop.

Reported: searches answered, p50/p99 latency, errors (tool errors and exceptions), lock errors
(a cron run or a watch batch that gave up on the writer lock), stale answers (a search that
returned a version older than the one committed before it started, read from the database by
another connection), torn reads (``begin<V>`` and ``end<V>`` of different versions, or one
missing).

Usage::

    python benchmarks/bench_live.py [--seconds 300] [--stdio 2] [--http 2] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SRC = str(Path(__file__).resolve().parents[1] / "src")
TOKEN = "bench-live-token-0123456789"
VERSION = re.compile(r"begin(\d+)\b.*?(?:end(\d+)\b|$)", re.S)


def environment(tmp: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": SRC, "KB_DB": str(tmp / "kb.db"), "HOME": str(tmp)}
    for key in ("OPENAI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY", "KB_CONFIG"):
        env.pop(key, None)
    return env


def live_text(version: int) -> str:
    return f"# Live\n\nliveversion begin{version} the current state of things end{version}\n"


def committed_version(db: Path, source: str) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        row = con.execute("SELECT text FROM chunks WHERE source = ?", (source,)).fetchone()
    finally:
        con.close()
    found = re.search(r"begin(\d+)", row[0]) if row else None
    return int(found[1]) if found else -1


class Results:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.stale = 0
        self.torn = 0
        self.lock = threading.Lock()


async def client_loop(connect: Any, db: Path, source: str, end: float, out: Results) -> None:
    async with connect() as client:
        while time.monotonic() < end:
            floor = await asyncio.to_thread(committed_version, db, source)
            began = time.perf_counter()
            try:
                result = await client.call_tool(
                    "knowledge_search", {"query": "liveversion", "mode": "keyword", "k": 1}
                )
            except Exception as exc:  # noqa: BLE001 (every failure is counted)
                out.errors.append(f"{type(exc).__name__}: {exc}")
                continue
            out.latencies.append(time.perf_counter() - began)
            text = "\n".join(getattr(c, "text", "") for c in result.content)
            if result.is_error:
                out.errors.append(text[:200])
                continue
            found = VERSION.search(text)
            if not found or found[2] is None or found[1] != found[2]:
                out.torn += 1
            elif int(found[1]) < floor:
                out.stale += 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--stdio", type=int, default=2)
    parser.add_argument("--http", type=int, default=2)
    parser.add_argument("--edit-every", type=float, default=0.5)
    parser.add_argument("--cron-every", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        env = environment(tmp)
        notes = tmp / "notes"
        notes.mkdir()
        for i in range(args.files):
            (notes / f"n{i}.md").write_text(f"# Note {i}\n\nfiller words w{i} about t{i % 37}.\n")
        live = notes / "live.md"
        live.write_text(live_text(0))
        db = tmp / "kb.db"
        kb = [sys.executable, "-m", "kbcli"]
        subprocess.run([*kb, "-q", "ingest", str(notes)], env=env, check=True, cwd=tmp)
        tokens = tmp / "tokens.yaml"
        tokens.write_text(f"tokens:\n  - {{token: {TOKEN}, name: bench, filter: {{}}}}\n")
        watch_err = open(tmp / "watch.err", "w+")
        watch = subprocess.Popen(
            [*kb, "watch", str(notes), "--json"],
            env=env,
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=watch_err,
            text=True,
        )
        port = free_port()
        http = subprocess.Popen(
            [*kb, "mcp", "--http", f"127.0.0.1:{port}", "--tokens", str(tokens)],
            env=env,
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        batches: list[dict[str, Any]] = []

        def read_watch() -> None:
            assert watch.stdout is not None
            for line in watch.stdout:
                batches.append(json.loads(line))

        threading.Thread(target=read_watch, daemon=True).start()
        while not batches or "Watching" not in Path(watch_err.name).read_text():
            time.sleep(0.05)
        with contextlib.suppress(OSError):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                    break
                time.sleep(0.05)
        source = str(live.resolve())
        end = time.monotonic() + args.seconds
        stop = threading.Event()
        edits = [0]
        cron: list[tuple[int, str]] = []

        def editor() -> None:
            version = 0
            while not stop.wait(args.edit_every):
                version += 1
                tmp_file = notes / ".live.md.tmp"
                tmp_file.write_text(live_text(version))
                os.replace(tmp_file, live)  # an editor's save
                other = notes / f"n{version % args.files}.md"
                other.write_text(f"# Note\n\nedited in version {version}.\n")
                edits[0] = version

        def cron_job() -> None:
            while not stop.wait(args.cron_every):
                done = subprocess.run(
                    [*kb, "-q", "ingest", str(notes)], env=env, cwd=tmp, capture_output=True
                )
                cron.append((done.returncode, done.stderr.decode(errors="replace")[-300:]))

        threads = [threading.Thread(target=editor), threading.Thread(target=cron_job)]
        for thread in threads:
            thread.start()

        def stdio_client() -> Any:
            params = StdioServerParameters(command=sys.executable, args=[*kb[1:], "mcp"], env=env)
            return Client(params, read_timeout_seconds=60)

        def http_client() -> Any:
            @contextlib.asynccontextmanager
            async def connect() -> Any:
                headers = {"Authorization": f"Bearer {TOKEN}"}
                async with create_mcp_http_client(headers=headers) as client_http:
                    transport = streamable_http_client(
                        f"http://127.0.0.1:{port}/mcp", http_client=client_http
                    )
                    async with Client(transport, read_timeout_seconds=60) as client:
                        yield client

            return connect()

        results = Results()

        async def run_all() -> None:
            loops = [client_loop(stdio_client, db, source, end, results) for _ in range(args.stdio)]
            loops += [client_loop(http_client, db, source, end, results) for _ in range(args.http)]
            await asyncio.gather(*loops)

        began = time.monotonic()
        try:
            asyncio.run(run_all())
        finally:
            elapsed = time.monotonic() - began
            stop.set()
            for thread in threads:
                thread.join()
            watch.terminate()
            watch_code = watch.wait(timeout=120)
            http.terminate()
            http.wait(timeout=30)
        watch_notes = Path(watch_err.name).read_text()
        lock_errors = sum(1 for code, err in cron if code == 3 or "locked" in err.lower())
        lock_errors += watch_notes.lower().count("locked")
        lat = sorted(results.latencies)
        report = {
            "seconds": round(elapsed, 1),
            "clients": {"stdio": args.stdio, "http": args.http},
            "searches": len(lat),
            "searches_per_second": round(len(lat) / elapsed, 1),
            "p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
            "p99_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 1) if lat else None,
            "errors": len(results.errors),
            "lock_errors": lock_errors,
            "stale_answers": results.stale,
            "torn_reads": results.torn,
            "edits": edits[0],
            "watch_batches": sum(1 for b in batches if b.get("event") == "batch"),
            "cron_runs": len(cron),
            "cron_failures": sum(1 for code, _ in cron if code != 0),
            "watch_exit": watch_code,
            "first_errors": results.errors[:3],
        }
    if args.json:
        print(json.dumps(report))
        return
    print(
        f"{report['seconds']} s, {args.stdio} stdio + {args.http} HTTP clients: "
        f"{report['searches']} searches ({report['searches_per_second']}/s), p50 "
        f"{report['p50_ms']} ms, p99 {report['p99_ms']} ms; errors {report['errors']}, lock "
        f"errors {report['lock_errors']}, stale answers {report['stale_answers']}, torn reads "
        f"{report['torn_reads']}; {report['edits']} edits in {report['watch_batches']} watch "
        f"batches, {report['cron_runs']} cron runs ({report['cron_failures']} failed), watch "
        f"exit {report['watch_exit']}"
    )
    for error in report["first_errors"]:
        print("  error:", error)


if __name__ == "__main__":
    main()
