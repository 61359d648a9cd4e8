"""Creating a database is atomic across processes: the first creates it, the others wait and
use it (it failed 8 times in 2,000 before: the header was read outside a transaction and the
switch to WAL does not wait for a lock)."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

ROUNDS = 40
PROCESSES = 8


def open_and_add(args: tuple[str, float, int]) -> str:
    path, start, n = args
    from kbcli import Document, SQLiteStore
    from kbcli.errors import KBError

    time.sleep(max(0.0, start - time.time()))  # all processes open at the same moment
    try:
        store = SQLiteStore(path, busy_timeout=30)
        store.add([Document(f"p{n}", f"text {n}", {"source": f"/f{n}.md"})], [[1.0, float(n)]])
        store.close()
        return "ok"
    except KBError as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.slow
def test_many_processes_create_the_same_database(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    failures = []
    with ctx.Pool(PROCESSES) as pool:
        pool.map(open_and_add, [(str(tmp_path / "warm.db"), 0.0, i) for i in range(PROCESSES)])
        for round_ in range(ROUNDS):
            path = tmp_path / f"r{round_}.db"
            start = time.time() + 0.05
            results = pool.map(open_and_add, [(str(path), start, i) for i in range(PROCESSES)])
            failures += [r for r in results if r != "ok"]
            from kbcli import SQLiteStore

            store = SQLiteStore(path)
            assert store.count() == PROCESSES and store.integrity_check() == []
            store.close()
    print(f"{ROUNDS * PROCESSES} concurrent opens of new databases, {len(failures)} failures")
    assert failures == []
    assert not list(Path(tmp_path).glob("*.tmp"))
