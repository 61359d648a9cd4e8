"""Several processes write one PostgreSQL index at once while searches run: `kb ingest` from
three processes (each its own folder plus one folder they all share) and library writers in
spawned processes. No error reaches a user, the final index is the union with no duplicates,
and its BM25 statistics are exact (scores equal a SQLite index of the same documents)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from extras import need
from kbcli import Document, SQLiteStore

need("psycopg")

from kbcli.stores.postgres import PostgresStore  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")
TOPICS = ["vpn", "printer", "backup", "laptop", "mail", "badge", "wifi", "payroll"]


def _write_folder(folder: Path, tag: str, n: int) -> None:
    folder.mkdir(parents=True)
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        body = "\n\n".join(
            f"## Step {s}\n\nFor {topic} issue {tag}-{i}, step {s}: restart the {topic} "
            f"service and check the {TOPICS[(i + s) % len(TOPICS)]} settings."
            for s in range(4)
        )
        (folder / f"{tag}-{i}.md").write_text(f"# {topic} guide {tag} {i}\n\n{body}\n")


class Searcher(threading.Thread):
    """Runs keyword, dense and count reads in a loop until stopped; keeps any error."""

    def __init__(self, dsn: str, table: str):
        super().__init__(daemon=True)
        self.dsn, self.table = dsn, table
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.rounds = 0

    def run(self) -> None:
        store = None
        try:
            while not self.stop.is_set():
                if store is None:
                    try:
                        store = PostgresStore(self.dsn, self.table)
                    except Exception:  # the first ingest has not created the index yet
                        self.stop.wait(0.05)
                        continue
                store.keyword_search("restart vpn service", k=5)
                store.keyword_search("printer settings", k=5, filter={"chunk_index": 1})
                store.count()
                self.rounds += 1
        except BaseException as exc:  # reported to the test
            self.errors.append(exc)
        finally:
            if store is not None:
                store.close()


@pytest.mark.slow
def test_several_kb_ingest_processes_at_once(pg_dsn, pg_table, tmp_path):
    folders = [tmp_path / f"team{p}" for p in range(3)]
    for p, folder in enumerate(folders):
        _write_folder(folder, f"t{p}", 6)
    shared = tmp_path / "shared"
    _write_folder(shared, "shared", 4)
    config = tmp_path / "cfg" / "jianmu.yaml"
    config.parent.mkdir()
    config.write_text(f"store:\n  backend: postgres\n  table: {pg_table}\n")
    env = {
        **os.environ,
        "KB_CONFIG": str(config),
        "KB_PG_DSN": pg_dsn,
        "PYTHONPATH": SRC,
        "HOME": str(tmp_path),
    }
    searcher = Searcher(pg_dsn, pg_table)
    searcher.start()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kbcli",
                "-q",
                "ingest",
                str(folder),
                str(shared),
                "--wait",
                "120",
            ],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for folder in folders
    ]
    outs = [proc.communicate(timeout=300) for proc in procs]
    searcher.stop.set()
    searcher.join(30)
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, (out, err)
        assert "Traceback" not in err and "Error" not in err, err
    assert searcher.errors == [] and searcher.rounds > 0

    # The union, once: the same index as one SQLite ingest of every folder.
    reference = tmp_path / "ref.db"
    subprocess.run(
        [sys.executable, "-m", "kbcli", "-q", "--db", str(reference), "ingest",
         *map(str, folders), str(shared)],
        env={k: v for k, v in env.items() if k not in ("KB_CONFIG", "KB_PG_DSN")},
        cwd=tmp_path, check=True,
        capture_output=True,
    )  # fmt: skip
    pg = PostgresStore(pg_dsn, pg_table)
    sqlite = SQLiteStore(reference)
    try:
        pg_docs, ref_docs = list(pg.iter_documents()), list(sqlite.iter_documents())
        assert len({d.id for d in pg_docs}) == len(pg_docs)  # no duplicates
        assert sorted(map(_key, pg_docs)) == sorted(map(_key, ref_docs))  # ids are random
        assert pg.sources() == sqlite.sources()
        assert set(pg.file_records()) == set(sqlite.file_records()) and len(pg.sources()) == 22
        for query in ("restart vpn service", "payroll settings step 2", "shared guide"):
            got = {_key(h.document): h.score for h in pg.keyword_search(query, k=1000)}
            want = {_key(h.document): h.score for h in sqlite.keyword_search(query, k=1000)}
            assert got == pytest.approx(want, abs=1e-6)
    finally:
        pg.close()
        sqlite.close()


def _key(doc: Document) -> tuple:
    return (doc.metadata["source"], doc.metadata["chunk_index"], doc.text)


def _writer(dsn: str, table: str, worker: int) -> None:
    store = PostgresStore(dsn, table)
    try:
        for batch in range(6):
            docs = [
                Document(
                    f"w{worker}-{batch}-{i}",
                    f"{TOPICS[(worker + i) % 8]} note {batch} {TOPICS[i % 8]} {TOPICS[batch]}",
                    {"source": f"/w{worker}/{batch % 2}.md", "worker": worker},
                )
                for i in range(5)
            ]
            store.add(docs, [[1.0, float(worker), float(i)] for i in range(5)])
            if batch == 3:
                store.remove([f"w{worker}-0-0"])
    finally:
        store.close()


@pytest.mark.slow
def test_library_writers_in_several_processes_keep_bm25_exact(pg_dsn, pg_table, tmp_path):
    PostgresStore(pg_dsn, pg_table).close()  # create the index once
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(pg_dsn, pg_table, w)) for w in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    assert [proc.exitcode for proc in procs] == [0, 0, 0]
    pg = PostgresStore(pg_dsn, pg_table)
    sqlite = SQLiteStore(tmp_path / "same.db")
    try:
        docs = list(pg.iter_documents())
        assert len(docs) == 3 * (6 * 5 - 1) and len({d.id for d in docs}) == len(docs)
        sqlite.add([Document(d.id, d.text, dict(d.metadata)) for d in docs])
        for query in ("vpn note", "printer backup laptop", "mail 3"):
            for weight in (0.0, 2.0):
                got = {h.document.id: h.score for h in pg.keyword_search(query, 100, None,
                       source_weight=weight)}  # fmt: skip
                want = {h.document.id: h.score for h in sqlite.keyword_search(query, 100, None,
                        source_weight=weight)}  # fmt: skip
                assert got == pytest.approx(want, abs=1e-6)
    finally:
        pg.close()
        sqlite.close()
