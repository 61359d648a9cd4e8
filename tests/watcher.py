"""A running ``kb watch --json`` subprocess, and polling the database it writes
(ingest/test_watch.py, agent/test_live_readers.py)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")


DEADLINE = 60.0  # seconds a state may take to appear (a loaded machine; never a speed claim)


def env_for(db: Path, pythonpath: str = SRC) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": pythonpath, "KB_DB": str(db)}
    env.pop("KB_TEST_CRASH_AT", None)
    return env


class Watcher:
    """``kb watch PATH... --json`` running; its JSON lines collected as they come."""

    def __init__(self, db: Path, *args: str, pythonpath: str = SRC):
        self.db = db
        self.err_path = db.with_name(db.name + ".watch-stderr")
        self._err = open(self.err_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kbcli", "watch", *args, "--json"],
            env=env_for(db, pythonpath),
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
        )
        self.lines: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_for(lambda: any(e["event"] == "indexed" for e in self.lines), self, "first index")
        wait_for(lambda: "Watching" in self.stderr, self, "the watch to start")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    @property
    def stderr(self) -> str:
        return self.err_path.read_text()

    @property
    def batches(self) -> list[dict[str, Any]]:
        return [e for e in self.lines if e["event"] == "batch"]

    def stop(self, signum: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        try:
            code = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            # say why before it is killed: the signals it ignores/blocks, what it printed
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
            masks = [line for line in status.splitlines() if line.startswith(("SigBlk", "SigIgn"))]
            why = f"kb watch did not stop on {signum}: {masks}\n{self.stderr}"
            raise AssertionError(why) from None
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(timeout=10)
            self._err.close()
        return code


def wait_for(
    check: Callable[[], Any],
    watcher: Watcher | None = None,
    what: str = "",
    limit: float = DEADLINE,
) -> Any:
    """Poll ``check`` until it returns something true; fail after ``limit`` seconds."""
    end = time.monotonic() + limit
    while True:
        got = check()
        if got:
            return got
        if watcher is not None and watcher.proc.poll() is not None:
            pytest.fail(f"kb watch exited {watcher.proc.returncode}: {watcher.stderr}")
        if time.monotonic() > end:
            detail = watcher.stderr if watcher is not None else ""
            pytest.fail(f"timed out waiting for {what or check}: {detail}")
        time.sleep(0.05)


def indexed(db: Path) -> dict[str, str]:
    """source -> its chunks' text, as committed (a file whole or absent)."""
    if not db.exists():
        return {}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        rows = con.execute("SELECT source, text FROM chunks ORDER BY source, doc").fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        con.close()
    out: dict[str, str] = {}
    for source, text in rows:
        out[source] = out.get(source, "") + text
    return out


def has(db: Path, expected: dict[Path, str | None]) -> bool:
    """True when each path is indexed with text containing its string (None: not indexed)."""
    now = indexed(db)
    for path, text in expected.items():
        got = now.get(str(path))
        if text is None and got is not None:
            return False
        if text is not None and (got is None or text not in got):
            return False
    return True
