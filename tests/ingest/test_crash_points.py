"""Named crash points (issue 17, matrix item 2): ``kb`` is run in a subprocess with
``KB_TEST_CRASH_AT`` set (see :mod:`kbcli.system.crashpoints`, test-only), so it dies with exit 137
exactly there. After each crash: ``PRAGMA integrity_check`` is ok, every file is wholly at
its old version, its new one, or absent; a normal run then converges to exactly the chunk set
of an uninterrupted run, and ``kb doctor`` reports zero drift."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import minimal_pdf
from extras import need
from kbcli import SQLiteStore

SRC = str(Path(__file__).resolve().parents[2] / "src")
FIXTURE_V1 = Path(__file__).parents[1] / "data" / "schema-v1.db"
N_FILES = 8
STRESS = os.environ.get("KB_STRESS") == "1"
TIMES: dict[str, float] = {}


def write_version(docs: Path, version: int, n_files: int = N_FILES) -> None:
    """A small mixed corpus (markdown, text, one PDF); in version 1 one file vanishes."""
    docs.mkdir(exist_ok=True)
    for i in range(n_files):
        path = docs / (f"f{i}.md" if i % 2 else f"f{i}.txt")
        if version == 1 and i == 3:
            path.unlink(missing_ok=True)
            continue
        paragraphs = [
            f"v{version} file{i} part{j} " + f"v{version}word topic{i % 3} " * (15 + 5 * j)
            for j in range(3)
        ]
        path.write_text("\n\n".join(paragraphs), encoding="utf-8")
    (docs / "p.pdf").write_bytes(minimal_pdf(f"v{version} invoice due in thirty days"))


PACKED_SEARCH = """
import sys
from kbcli import SQLiteStore
store = SQLiteStore(sys.argv[1], create=False)
print(len(store.keyword_search(sys.argv[2], k=3)))
"""


def kb(
    db: Path, *args: str, crash: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC, **(env or {})}
    env.pop("KB_TEST_CRASH_AT", None)
    if crash:
        env["KB_TEST_CRASH_AT"] = crash
    start = time.monotonic()
    if args[0] == "packed-search":
        command = [sys.executable, "-c", PACKED_SEARCH, str(db), *args[1:]]
    else:
        command = [sys.executable, "-m", "kbcli", "--db", str(db), *args]
    done = subprocess.run(
        command,
        capture_output=True,
        env=env,
        timeout=120,
    )
    TIMES[crash or "normal"] = TIMES.get(crash or "normal", 0.0) + time.monotonic() - start
    return done


def ingest(db: Path, docs: Path, crash: str | None = None) -> subprocess.CompletedProcess:
    return kb(db, "ingest", str(docs), "--prune", "-q", crash=crash)


def chunk_set(db: Path, store: Any = None) -> set[tuple[str, str]]:
    with store or SQLiteStore(db, create=False) as opened:
        docs = list(opened.iter_documents())
    return {(Path(str(d.metadata.get("source", ""))).name, d.text) for d in docs}


def check_consistent(db: Path, allowed: set[int], store: Any = None) -> None:
    """Every file wholly at one version in ``allowed`` (or absent) and its record naming
    exactly its chunks; ``store`` opens a non-SQLite catalog (default: SQLite at ``db``)."""
    if store is None:
        conn = sqlite3.connect(db)
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        conn.close()
        store = SQLiteStore(db, create=False)
        assert store.integrity_check() == []
    with store:
        records = store.file_records()
        by_source: dict[str, list] = {}
        for doc in store.iter_documents():
            by_source.setdefault(doc.metadata["source"], []).append(doc)
        assert set(by_source) <= set(records)
        for path, record in records.items():
            docs = by_source.get(path, [])
            assert sorted(record.chunk_ids) == sorted(d.id for d in docs), path
            versions = {int(v) for d in docs for v in re.findall(r"\bv(\d+)", d.text)}
            assert len(versions) == 1 and versions <= allowed, (path, versions)


def assert_no_drift(db: Path, *store: str, env: dict[str, str] | None = None) -> None:
    done = kb(db, *store, "doctor", "--json", env=env)
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["ok"], report


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> set[tuple[str, str]]:
    """The chunk set (by file name) of an uninterrupted version 0 -> 1 run."""
    root = tmp_path_factory.mktemp("reference")
    docs, full = root / "docs", root / "full.db"
    write_version(docs, 0)
    assert ingest(full, docs).returncode == 0
    write_version(docs, 1)
    assert ingest(full, docs).returncode == 0
    return chunk_set(full)


def at_version_0(tmp_path: Path) -> tuple[Path, Path]:
    db, docs = tmp_path / "kb.db", tmp_path / "docs"
    write_version(docs, 0)
    assert ingest(db, docs).returncode == 0
    return db, docs


INGEST_POINTS = ["after-parse", "after-parse@5", "after-embed", "before-commit", "after-commit"]


@pytest.mark.slow
@pytest.mark.parametrize("point", INGEST_POINTS)
def test_a_crash_at_a_named_point_of_ingest_converges(tmp_path, reference, point):
    want = reference
    db, docs = at_version_0(tmp_path)
    write_version(docs, 1)
    crashed = ingest(db, docs, crash=point)
    assert crashed.returncode == 137, (crashed.returncode, crashed.stderr[-500:])
    check_consistent(db, {0, 1})
    done = ingest(db, docs)
    assert done.returncode == 0, done.stderr
    check_consistent(db, {1})
    assert chunk_set(db) == want
    assert_no_drift(db)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["vector-cache-write", "keyword-pack-write"])
def test_a_crash_while_writing_a_derived_file_leaves_the_index_intact(tmp_path, point):
    db, _ = at_version_0(tmp_path)
    want = chunk_set(db)
    Path(f"{db}.vectors-cache").unlink(missing_ok=True)
    Path(f"{db}.keyword-pack").unlink(missing_ok=True)
    search = (
        ("packed-search", "topic1 file1")
        if point == "keyword-pack-write"
        else ("search", "topic1 file1", "--mode", "semantic", "--json")
    )
    crashed = kb(db, *search, crash=point)
    assert crashed.returncode == 137, (crashed.returncode, crashed.stderr[-500:])
    assert list(tmp_path.glob("kb.db.*.tmp"))  # it died half-way through the write
    check_consistent(db, {0})
    assert_no_drift(db)  # a half-written temp file is never the derived file itself
    found = kb(db, *search)
    assert found.returncode == 0 and found.stdout.strip() not in (b"", b"0", b"[]"), found
    assert chunk_set(db) == want
    assert_no_drift(db)


@pytest.mark.slow
def test_a_crash_while_writing_the_faiss_file_leaves_the_index_intact(tmp_path):
    need("faiss")
    db, docs = tmp_path / "kb.db", tmp_path / "docs"
    write_version(docs, 0)
    assert kb(db, "--store", "faiss", "ingest", str(docs), "-q").returncode == 0
    faiss_file = Path(f"{db}.faiss")
    assert faiss_file.exists()
    want = chunk_set(db)
    write_version(docs, 1)  # the ingest's refresh on close writes the FAISS file: die there
    crashed = kb(db, "--store", "faiss", "ingest", str(docs), "--prune", "-q",
                 crash="derived-file-write")  # fmt: skip
    assert crashed.returncode == 137, (crashed.returncode, crashed.stderr[-500:])
    assert list(tmp_path.glob("kb.db.faiss.*.tmp"))
    check_consistent(db, {1})  # every file was committed before the refresh
    assert chunk_set(db) != want
    done = kb(db, "--store", "faiss", "doctor", "--json")
    assert done.returncode == 0, done.stdout  # the old file is stale, not drift
    found = kb(db, "--store", "faiss", "search", "topic1", "--mode", "semantic", "--json")
    assert found.returncode == 0 and json.loads(found.stdout), found.stderr
    assert kb(db, "--store", "faiss", "doctor").returncode == 0


@pytest.mark.slow
def test_a_crash_mid_migration_leaves_the_old_schema_and_converges(tmp_path):
    docs = tmp_path / "docs"
    write_version(docs, 0)
    reference_db, db = tmp_path / "ref.db", tmp_path / "kb.db"
    shutil.copy(FIXTURE_V1, reference_db)
    shutil.copy(FIXTURE_V1, db)
    assert ingest(reference_db, docs).returncode == 0
    crashed = ingest(db, docs, crash="mid-migration")
    assert crashed.returncode == 137, (crashed.returncode, crashed.stderr[-500:])
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1  # rolled back whole
    conn.close()
    done = ingest(db, docs)
    assert done.returncode == 0, done.stderr
    assert chunk_set(db) == chunk_set(reference_db)
    assert_no_drift(db)


# --- the stores beyond SQLite ----------------------------------------------------------------


def ingest_on(
    store: tuple[str, ...], db: Path, docs: Path, crash: str | None = None, env: Any = None
) -> subprocess.CompletedProcess:
    return kb(db, *store, "ingest", str(docs), "--prune", "-q", "--wait", "30", crash=crash,
              env=env)  # fmt: skip


def semantic_ids(db: Path, *store: str, env: Any = None) -> list[str]:
    found = kb(db, *store, "search", "topic1 file1", "--mode", "semantic", "-k", "4", "--json",
               env=env)  # fmt: skip
    assert found.returncode == 0, found.stderr
    return [hit["id"] for hit in json.loads(found.stdout)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend,point",
    [("faiss", "before-commit"), ("faiss", "after-commit"), ("chroma", "before-commit"),
     ("chroma", "after-commit@3")],
)  # fmt: skip
def test_a_crash_at_commit_under_faiss_or_chroma_converges(tmp_path, reference, backend, point):
    need("faiss" if backend == "faiss" else "chromadb")
    store = ("--store", backend)
    db, docs = tmp_path / "kb.db", tmp_path / "docs"
    write_version(docs, 0)
    assert ingest_on(store, db, docs).returncode == 0
    write_version(docs, 1)
    crashed = ingest_on(store, db, docs, crash=point)
    assert crashed.returncode == 137, (crashed.returncode, crashed.stderr[-500:])
    check_consistent(db, {0, 1})
    assert_no_drift(db, *store)  # the vector index is stale (older generation), not drifted
    done = ingest_on(store, db, docs)
    assert done.returncode == 0, done.stderr
    check_consistent(db, {1})
    assert chunk_set(db) == reference
    assert_no_drift(db, *store)
    assert semantic_ids(db, *store) == semantic_ids(db)  # the index agrees with the catalog


@pytest.mark.slow
@pytest.mark.parametrize("point", ["vector-index-sync", "derived-file-write"])
def test_a_crash_while_chroma_syncs_is_redone_on_next_use(tmp_path, point):
    """``vector-index-sync``: the collection changed, its state file still marked dirty (so
    the next use rebuilds it); ``derived-file-write``: killed writing that dirty mark, so the
    old state and the untouched collection stay (the next use syncs by difference)."""
    need("chromadb")
    store = ("--store", "chroma")
    db, docs = tmp_path / "kb.db", tmp_path / "docs"
    write_version(docs, 0)
    assert ingest_on(store, db, docs).returncode == 0
    write_version(docs, 1)  # the ingest's refresh on close syncs the collection: die there
    crashed = ingest_on(store, db, docs, crash=point)
    assert crashed.returncode == 137, (crashed.returncode, crashed.stderr[-500:])
    check_consistent(db, {1})  # every file was committed before the sync
    state = Path(f"{db}.chroma", "jianmu.kbcli-sync").read_bytes()
    assert (b'"dirty": true' in state) == (point == "vector-index-sync")
    assert_no_drift(db, *store)
    assert semantic_ids(db, *store) == semantic_ids(db)
    assert_no_drift(db, *store)
    assert b'"dirty": false' in Path(f"{db}.chroma", "jianmu.kbcli-sync").read_bytes()


@pytest.fixture
def postgres(pg_dsn, pg_table, tmp_path):
    """The environment that points ``kb`` at a fresh table on the session's server, and an
    opener of that table (for the checks)."""
    from kbcli.stores.postgres import PostgresStore

    config = tmp_path / "pg.yaml"
    config.write_text(f"store:\n  backend: postgres\n  table: {pg_table}\n")
    env = {"KB_CONFIG": str(config), "KB_PG_DSN": pg_dsn}
    return env, lambda: PostgresStore(pg_dsn, pg_table, create=False)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["before-commit", "before-commit@2", "after-commit"])
def test_a_crash_at_commit_under_postgres_converges_and_frees_the_lock(
    tmp_path, reference, postgres, point
):
    """A kill inside the transaction rolls it back, one after COMMIT keeps it; either way
    the server drops the dead process's advisory locks, so the next run proceeds."""
    env, store = postgres
    db, docs = tmp_path / "unused.db", tmp_path / "docs"
    write_version(docs, 0)
    assert ingest_on((), db, docs, env=env).returncode == 0
    write_version(docs, 1)
    crashed = ingest_on((), db, docs, crash=point, env=env)
    assert crashed.returncode == 137, (crashed.returncode, crashed.stderr[-500:])
    check_consistent(db, {0, 1}, store())
    done = ingest_on((), db, docs, env=env)
    assert done.returncode == 0, done.stderr  # not "Another kb ingest is writing"
    check_consistent(db, {1}, store())
    assert chunk_set(db, store()) == reference
    assert_no_drift(db, env=env)
    assert not db.exists()


@pytest.mark.slow
def test_a_crash_while_postgres_creates_the_index_leaves_nothing_half_made(
    tmp_path, reference, postgres
):
    """The first ingest creates the tables in one transaction: killed before its COMMIT,
    there is no index at all (not a half-made one), and the next run creates it."""
    env, store = postgres
    db, docs = tmp_path / "unused.db", tmp_path / "docs"
    write_version(docs, 1)
    crashed = ingest_on((), db, docs, crash="before-commit", env=env)
    assert crashed.returncode == 137, (crashed.returncode, crashed.stderr[-500:])
    listed = kb(db, "list", "--json", env=env)
    assert listed.returncode == 1 and b"No knowledge base" in listed.stderr, listed.stderr
    assert ingest_on((), db, docs, env=env).returncode == 0
    check_consistent(db, {1}, store())
    assert chunk_set(db, store()) == reference
    assert_no_drift(db, env=env)


@pytest.mark.skipif(not STRESS, reason="long variant: KB_STRESS=1")
def test_stress_every_point_moved_forward_step_by_step(tmp_path):
    """150 files (three write batches): each point at its 1st, 2nd, ... hit until a run
    completes; the same invariants after every crash."""
    n = 150
    ref_docs, ref_db = tmp_path / "ref-docs", tmp_path / "ref.db"
    write_version(ref_docs, 0, n)
    assert ingest(ref_db, ref_docs).returncode == 0
    write_version(ref_docs, 1, n)
    assert ingest(ref_db, ref_docs).returncode == 0
    want = chunk_set(ref_db)
    trials = 0
    steps = {"after-parse": range(1, 200, 15), "after-embed": range(1, 40, 3)}
    for point in ("after-parse", "after-embed", "before-commit", "after-commit"):
        for nth in steps.get(point, range(1, 10)):
            root = tmp_path / f"{point}-{nth}"
            root.mkdir()
            db, docs = root / "kb.db", root / "docs"
            write_version(docs, 0, n)
            assert ingest(db, docs).returncode == 0
            write_version(docs, 1, n)
            crashed = ingest(db, docs, crash=f"{point}@{nth}")
            assert crashed.returncode in (0, 137), crashed.stderr[-500:]
            check_consistent(db, {0, 1})
            assert ingest(db, docs).returncode == 0
            check_consistent(db, {1})
            assert chunk_set(db) == want, (point, nth)
            assert_no_drift(db)
            shutil.rmtree(root)
            trials += crashed.returncode == 137
            if crashed.returncode == 0:
                break  # the point is reached fewer times than nth
    print(f"\nstress crash points: {trials} crashes, all consistent and converged")


def test_the_hook_is_inert_when_unset_and_names_real_points():
    from kbcli.system import crashpoints

    assert crashpoints._SPEC is None
    crashpoints.crash_point("before-commit")  # returns: nothing set
    source = "\n".join(p.read_text() for p in Path(SRC, "kbcli").rglob("*.py"))
    named = set(re.findall(r'crash_point\("([a-z-]+)"\)', source))
    expected = {p.split("@")[0] for p in INGEST_POINTS}
    expected |= {"vector-cache-write", "keyword-pack-write", "derived-file-write", "mid-migration"}
    expected |= {"vector-index-sync"}
    assert expected <= named


def test_print_crash_point_figures():
    if TIMES:
        print("\ncrash points: " + ", ".join(f"{k} {v:.1f}s" for k, v in sorted(TIMES.items())))
