"""PostgreSQL lost under a running ``kb``: the server killed (SIGKILL of the postmaster) or kb's
connections terminated (``pg_terminate_backend``) in the middle of a real ``kb ingest``.

Each case gives one line on stderr naming the server (password redacted) and the fix, exit 1,
the ``--json`` summary counting what was written before the loss, and the next ``kb ingest``
converges to what a fresh ingest of the folder gives. The ingest is held mid-run by
``gated_embedder.GatedEmbedder`` while the test does the damage, so the moment is the same on
every run: every file is written (files go in before their vectors), and the vector fill is
held after its first texts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from extras import need

need("psycopg")

import psycopg  # noqa: E402

from kbcli.errors import StoreError  # noqa: E402
from kbcli.stores.postgres import PostgresStore  # noqa: E402
from pg_server import OwnServer  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]
SRC = str(TESTS.parent / "src")
FILES = 150
WRITTEN = FILES  # files are written before their vectors: all are when the gate closes
APP = "kb-fault-test"  # application_name of the kb processes, so only theirs are terminated
CANARY = "pw-canary-7f3a"  # a password in the DSN (trust auth ignores it): never printed


def write_folder(folder: Path) -> None:
    folder.mkdir()
    for i in range(FILES):
        topic = ("backup", "restore", "printer", "vpn", "badge")[i % 5]
        (folder / f"note-{i:03}.md").write_text(
            f"# Note {i}\n\nHow the {topic} works, step {i}: check the {topic} log first.\n"
        )


class Runner:
    """``kb`` in a subprocess on one PostgreSQL table, with the gated embedder."""

    def __init__(self, tmp_path: Path, dsn: str, table: str, docs: Path | None = None):
        self.tmp = tmp_path
        self.dsn = dsn
        self.table = table
        self.docs = docs or tmp_path / "docs"
        if docs is None:
            write_folder(self.docs)
        self.gate = tmp_path / f"gate-{table}"
        self.gate.mkdir()
        self.config = tmp_path / f"{table}.yaml"
        self.config.write_text(
            f"store:\n  backend: postgres\n  table: {table}\n"
            "rag:\n  embedding:\n    provider: 'gated_embedder:GatedEmbedder'\n"
        )

    def env(self, *, gated: bool = False) -> dict[str, str]:
        env = {
            **os.environ,
            "KB_CONFIG": str(self.config),
            "KB_PG_DSN": f"{self.dsn}{'&' if '?' in self.dsn else '?'}password={CANARY}",
            "PGAPPNAME": APP,
            "PYTHONPATH": os.pathsep.join([SRC, str(TESTS)]),
        }
        if gated:
            env["KB_TEST_GATE"] = str(self.gate)
            env["KB_TEST_GATE_AFTER"] = "100"  # the vector fill held after 100 texts
        return env

    def kb(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "kbcli", *args],
            env=self.env(),
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=300,
        )

    def held_ingest(self) -> subprocess.Popen:
        """``kb ingest --json`` started and held at the gate (every file committed, their
        vectors being filled)."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "kbcli", "ingest", str(self.docs), "--json"],
            env=self.env(gated=True),
            cwd=self.tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 300
        while not (self.gate / "waiting").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"kb ingest never reached the gate: {proc.communicate()}")
            time.sleep(0.02)
        return proc

    def release(self, proc: subprocess.Popen) -> tuple[int, str, str]:
        (self.gate / "go").touch()
        out, err = proc.communicate(timeout=300)
        return proc.returncode, out, err


def assert_one_line_loss(code: int, out: str, err: str) -> dict:
    """The failed run: exit 1, one line naming the server and the fix, the JSON summary."""
    assert code == 1, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    line = lines[0]
    assert line.startswith("Error: Lost the connection to PostgreSQL at postgresql://"), line
    assert "check that the server is running" in line and "run the command again" in line
    assert CANARY not in err and CANARY not in out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["added"] == WRITTEN and summary["chunks_added"] == WRITTEN, summary
    assert summary["error"] == line.removeprefix("Error: ")
    return summary


def content(dsn: str, table: str) -> tuple[list, dict, list]:
    """What an index holds: its chunks (source, text), its file records (path -> sha256) and
    the BM25 scores of a query (exact statistics: equal on equal content)."""
    with PostgresStore(dsn, table, create=False) as store:
        chunks = sorted((d.metadata["source"], d.text) for d in store.iter_documents())
        files = {p: r.sha256 for p, r in store.file_records().items()}
        hits = store.keyword_search("backup log", k=20)
        scores = sorted((h.document.metadata["source"], round(h.score, 9)) for h in hits)
    return chunks, files, scores


def converges(runner: Runner) -> None:
    """The next run finishes the job, and the index equals a fresh ingest's."""
    again = runner.kb("ingest", str(runner.docs), "--json")
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["unchanged"] == WRITTEN and summary["added"] == FILES - WRITTEN, summary
    fresh = Runner(runner.tmp, runner.dsn, f"{runner.table}_fresh", docs=runner.docs)
    done = fresh.kb("ingest", str(runner.docs), "--json")
    assert done.returncode == 0, done.stderr
    assert content(runner.dsn, runner.table) == content(runner.dsn, fresh.table)
    assert len(content(runner.dsn, runner.table)[1]) == FILES


@pytest.mark.slow
def test_terminated_connections_mid_ingest_are_one_line_and_converge(pg_dsn, pg_table, tmp_path):
    runner = Runner(tmp_path, pg_dsn, pg_table)
    proc = runner.held_ingest()
    with psycopg.connect(pg_dsn, autocommit=True) as admin:  # a second connection
        ended = admin.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s",
            (APP,),
        ).fetchone()[0]
    assert ended == 2  # the store's connection and the ingest lock's
    assert_one_line_loss(*runner.release(proc))
    assert len(content(pg_dsn, pg_table)[1]) == WRITTEN  # the first group stayed, whole
    converges(runner)  # the terminated sessions' locks went with them


@pytest.fixture
def own_server():
    server = OwnServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.slow
def test_a_killed_server_mid_ingest_is_one_line_and_converges(own_server, tmp_path):
    runner = Runner(tmp_path, own_server.dsn, "kb_killed")
    proc = runner.held_ingest()
    own_server.kill()
    assert_one_line_loss(*runner.release(proc))

    down = runner.kb("search", "backup")  # while the server is down: one line too
    assert down.returncode == 1, down.stderr
    lines = down.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in down.stderr, down.stderr
    assert lines[0].startswith("Error: Cannot connect to PostgreSQL at postgresql://")
    assert "check that the server is running" in lines[0] and CANARY not in down.stderr

    own_server.restart()
    runner.dsn = own_server.dsn
    assert len(content(runner.dsn, runner.table)[1]) == WRITTEN  # recovered: the group kept
    converges(runner)


def test_a_store_reconnects_after_a_lost_connection(pg_dsn, pg_table):
    """A long-lived process (kb mcp, a library user) gets one error for the search that met
    the loss, and the next call opens a new connection."""
    from kbcli import Document

    store = PostgresStore(pg_dsn, pg_table)
    try:
        store.add([Document("a", "the backup runs nightly"), Document("b", "printer toner")])
        pid = store._db.conn.info.backend_pid
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
        with pytest.raises(StoreError) as info:
            store.keyword_search("backup", k=5)
        message = str(info.value)
        assert message.startswith("Lost the connection to PostgreSQL at postgresql://")
        assert "\n" not in message and info.value.__suppress_context__
        assert [h.document.id for h in store.keyword_search("backup", k=5)] == ["a"]
        store.add([Document("c", "backup tapes")])  # writes reconnect too
        assert store.count() == 3
    finally:
        store.close()


def test_losing_the_ingest_lock_connection_is_not_a_second_error(pg_dsn, pg_table):
    """The lock's session ended (and with it the lock): leaving the block says nothing, so the
    error that ended the run is the one reported."""
    store = PostgresStore(pg_dsn, pg_table)
    try:
        with pytest.raises(RuntimeError, match="the run's own error"):
            with store.writer_lock(5.0):
                with psycopg.connect(pg_dsn, autocommit=True) as admin:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype ="
                        " 'advisory' AND pid NOT IN (%s, pg_backend_pid())",
                        (store._db.conn.info.backend_pid,),
                    )
                raise RuntimeError("the run's own error")
        with store.writer_lock(0.0):  # free again: the server dropped it with the session
            pass
    finally:
        store.close()
