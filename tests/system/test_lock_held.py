"""lock_held: another process's ingest lock seen without taking it (/proc/locks), and the
fallback where that list cannot be read."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from kbcli.system import locking
from kbcli.system.locking import lock_file, lock_held

HOLD = """
import sys, time
from pathlib import Path
from kbcli.system.locking import lock_file
with lock_file(Path(sys.argv[1]), 0, "x"):
    Path(sys.argv[2]).touch()
    time.sleep(30)
"""


def test_another_process_holding_the_lock_is_seen_and_never_blocked(tmp_path):
    path, ready = tmp_path / "kb.db.ingest-lock", tmp_path / "ready"
    assert lock_held(path) is False  # no file: nobody holds it
    env = {**os.environ, "PYTHONPATH": str(Path(locking.__file__).parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(ready)], env=env)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        for _ in range(5):
            assert lock_held(path) is True
    finally:
        proc.kill()
        proc.wait()
    assert lock_held(path) is False
    with lock_file(path, 0.0, "x"):  # asking took nothing: free at once
        pass


def test_without_proc_locks_a_shared_probe_answers(tmp_path, monkeypatch):
    path = tmp_path / "lock"
    real_open = open

    def no_proc(name, *args, **kwargs):
        if str(name) == "/proc/locks":
            raise PermissionError(name)
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr("builtins.open", no_proc)
    path.touch()
    assert lock_held(path) is False
    with lock_file(path, 0.0, "x"):
        assert lock_held(path) is True
    assert lock_held(path) is False
