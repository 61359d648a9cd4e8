"""kb doctor: each derived structure checked against the catalog, drift reported with a
reason (exit 1), --repair rebuilds it and a second run is clean (issue 17)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from cli_helpers import run
from extras import need
from kbcli import SQLiteStore
from kbcli.stores.sqlite import packlog

CHECKS = ["sqlite", "keyword-index", "vectors", "keyword-pack", "vector-index"]


def _corpus(folder: Path) -> Path:
    folder.mkdir()
    for i in range(12):
        (folder / f"note{i}.md").write_text(
            f"# Note {i}\n\nPassword reset number {i}: open settings, then security. "
            f"Gardening tip {i % 3}: water the tomatoes.\n",
            encoding="utf-8",
        )
    return folder


@pytest.fixture
def db(tmp_path) -> Path:
    """An ingested database with its vector cache and a keyword pack on disk."""
    path = tmp_path / "kb.db"
    result = run("--db", str(path), "ingest", str(_corpus(tmp_path / "docs")), "-q")
    assert result.exit_code == 0, result.stderr
    with SQLiteStore(path) as store:
        assert store.keyword_search("password reset", k=3)
        store.refresh_vector_index()
    assert Path(f"{path}.vectors-cache").exists()
    assert packlog.pack_path(path).exists()
    return path


def doctor(db: Path, *args: str) -> tuple[int, dict]:
    result = run("--db", str(db), "doctor", "--json", *args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, json.loads(result.stdout)


def status(report: dict) -> dict[str, str]:
    return {c["check"]: c["status"] for c in report["checks"]}


def assert_clean(db: Path) -> None:
    code, report = doctor(db)
    assert (code, report["ok"]) == (0, True), report
    assert status(report) == dict.fromkeys(CHECKS, "ok")


def assert_drift_repaired(db: Path, check: str, reason: str) -> None:
    code, report = doctor(db)
    assert code == 1 and report["ok"] is False
    drifted = {c["check"]: c for c in report["checks"] if c["status"] == "drift"}
    assert list(drifted) == [check], report
    assert reason in drifted[check]["detail"]
    assert "\n" not in drifted[check]["detail"]
    code, report = doctor(db, "--repair")
    assert code == 0, report
    fixed = [c for c in report["checks"] if c["status"] == "repaired"]
    assert [c["check"] for c in fixed] == [check] and fixed[0]["action"], report
    assert_clean(db)


def _sql(db: Path, *statements: str) -> None:
    conn = sqlite3.connect(db)
    with conn:
        for sql in statements:
            conn.execute(sql)
    conn.close()


def test_a_healthy_index_is_clean_and_the_json_has_one_entry_per_check(db):
    code, report = doctor(db)
    assert code == 0
    assert set(report) == {"ok", "repair", "checks"} and report["repair"] is False
    assert [c["check"] for c in report["checks"]] == CHECKS
    assert all(set(c) == {"check", "status", "detail", "action"} for c in report["checks"])
    text = run("--db", str(db), "doctor")
    assert text.exit_code == 0
    assert [line.split()[0] for line in text.stdout.splitlines()] == ["ok"] * len(CHECKS)


def test_a_tampered_document_frequency_is_drift_and_repair_rebuilds_the_keyword_index(db):
    _sql(db, "UPDATE terms SET df = df + 1 WHERE id = (SELECT min(id) FROM terms)")
    assert_drift_repaired(db, "keyword-index", "wrong document frequency")


@pytest.mark.parametrize(
    "tamper, reason",
    [
        (
            "UPDATE terms SET sdf = sdf + 1 WHERE id = (SELECT max(id) FROM terms)",
            "source frequency",
        ),
        ("DELETE FROM terms WHERE id = (SELECT max(id) FROM terms)", "the vocabulary lacks"),
    ],
)
def test_frequencies_are_checked_against_the_forward_indexes(db, tamper, reason):
    _sql(db, tamper)
    assert_drift_repaired(db, "keyword-index", reason)


def test_a_chunk_length_is_checked_against_its_forward_index(db):
    # stats follow the tampered length, so only the sum of the forward index's tfs shows it
    _sql(
        db,
        "UPDATE chunks SET length = length + 1 WHERE doc = (SELECT min(doc) FROM chunks)",
        "UPDATE stats SET total_length = total_length + 1",
        "UPDATE sources SET length = length + 1"
        " WHERE id = (SELECT src FROM chunks WHERE doc = (SELECT min(doc) FROM chunks))",
    )
    code, report = doctor(db)
    drifted = {c["check"]: c["detail"] for c in report["checks"] if c["status"] == "drift"}
    assert code == 1 and "lengths disagree with their forward indexes" in drifted["keyword-index"]
    assert doctor(db, "--repair")[0] == 0
    assert_clean(db)


def test_tampered_corpus_statistics_are_drift(db):
    _sql(db, "UPDATE stats SET n = n + 3 WHERE id = 1")
    assert_drift_repaired(db, "keyword-index", "stats say")


def test_a_vector_without_a_chunk_is_drift_and_repair_deletes_it(db):
    _sql(
        db,
        "INSERT INTO vectors SELECT doc + 100000, vec FROM vectors LIMIT 1",
        "UPDATE stats SET vector_generation = vector_generation + 1",  # as a real write does
    )
    assert_drift_repaired(db, "vectors", "belong to no chunk")
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM vectors").fetchone()[0] == 12
    conn.close()


def _flip(path: Path, offset: int, n: int = 64) -> None:
    data = bytearray(path.read_bytes())
    for i in range(offset, min(offset + n, len(data))):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def test_a_vector_cache_with_wrong_rows_is_drift_and_repair_rebuilds_it(db):
    cache = Path(f"{db}.vectors-cache")
    size = cache.stat().st_size
    _flip(cache, size - 200)
    assert_drift_repaired(db, "vector-index", "differ from the catalog")
    assert cache.exists() and cache.stat().st_size == size


def test_a_cut_vector_cache_or_a_garbage_header_is_drift(db):
    cache = Path(f"{db}.vectors-cache")
    cache.write_bytes(cache.read_bytes()[:-100])
    assert_drift_repaired(db, "vector-index", "cut short")
    cache.write_bytes(b"not a cache at all")
    assert_drift_repaired(db, "vector-index", "no readable header")


def test_a_stale_vector_cache_is_not_drift(db):
    cache = Path(f"{db}.vectors-cache")
    old = cache.read_bytes()
    assert run("--db", str(db), "add", "one more note about passwords").exit_code == 0
    cache.write_bytes(old)  # an older generation: the next search replaces it
    assert_clean(db)


def test_a_keyword_pack_that_disagrees_or_is_cut_short_is_drift(db):
    pack = packlog.pack_path(db)
    good = pack.read_bytes()
    _flip(pack, len(good) - 64, 32)
    assert_drift_repaired(db, "keyword-pack", "disagrees with the forward indexes")
    assert not pack.exists()  # deleted; the next packed search writes a new one
    pack.write_bytes(good[: len(good) // 2])
    assert_drift_repaired(db, "keyword-pack", "cut short")


def test_drift_in_text_mode_is_one_line_per_check_and_exit_1(db):
    _sql(db, "UPDATE terms SET df = df + 1 WHERE id = (SELECT min(id) FROM terms)")
    result = run("--db", str(db), "doctor")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert len(lines) == len(CHECKS)
    assert lines[1].startswith("drift") and "document frequency" in lines[1]
    assert "kb doctor --repair" in result.stderr
    fixed = run("--db", str(db), "doctor", "--repair")
    assert fixed.exit_code == 0 and fixed.stdout.splitlines()[1].startswith("repaired")


def test_doctor_on_a_missing_database_creates_nothing(tmp_path):
    missing = tmp_path / "nope.db"
    result = run("--db", str(missing), "doctor")
    assert result.exit_code != 0 and not missing.exists()
    assert len(result.stderr.strip().splitlines()) == 1


def test_faiss_file_drift_is_reported_and_repaired(tmp_path):
    need("faiss")
    db = tmp_path / "f.db"
    kb = ("--store", "faiss", "--db", str(db))
    assert run(*kb, "ingest", str(_corpus(tmp_path / "docs")), "-q").exit_code == 0
    faiss_file = Path(f"{db}.faiss")
    assert faiss_file.exists()
    code, report = doctor_store(kb)
    assert code == 0, report
    faiss_file.write_bytes(faiss_file.read_bytes()[:-50])
    code, report = doctor_store(kb)
    assert code == 1 and status(report)["vector-index"] == "drift"
    code, report = doctor_store(kb, "--repair")
    assert code == 0 and status(report)["vector-index"] == "repaired"
    assert doctor_store(kb)[0] == 0 and faiss_file.exists()


def test_chroma_state_drift_is_reported_and_repaired(tmp_path):
    need("chromadb")
    db = tmp_path / "c.db"
    kb = ("--store", "chroma", "--db", str(db))
    assert run(*kb, "ingest", str(_corpus(tmp_path / "docs")), "-q").exit_code == 0
    state = next(Path(f"{db}.chroma").glob("*.kbcli-sync"))
    state.write_bytes(b"garbage")
    code, report = doctor_store(kb)
    assert code == 1 and status(report)["vector-index"] == "drift"
    code, report = doctor_store(kb, "--repair")
    assert code == 0 and status(report)["vector-index"] == "repaired"
    assert doctor_store(kb)[0] == 0


def doctor_store(kb: tuple[str, ...], *args: str) -> tuple[int, dict]:
    result = run(*kb, "doctor", "--json", *args)
    return result.exit_code, json.loads(result.stdout)


def test_postgres_keyword_drift_is_reported_and_repaired(request):
    need("psycopg")
    from kbcli import Document
    from kbcli.protocols import Doctor
    from kbcli.stores.postgres import PostgresStore

    store = PostgresStore(request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_table"))
    try:
        assert isinstance(store, Doctor)
        store.add(
            [Document(f"d{i}", f"alpha beta {i}", {"source": f"/s{i % 3}"}) for i in range(9)]
        )
        assert [f.ok for f in store.doctor()] == [True]
        with store.transaction() as conn:
            conn.execute(f"UPDATE {store._t.terms} SET df = df + 1")
        (found,) = store.doctor()
        assert not found.ok and "frequency" in found.detail
        (fixed,) = store.doctor(repair=True)
        assert fixed.ok and fixed.repaired and fixed.action
        assert [f.ok for f in store.doctor()] == [True]
    finally:
        store.close()


def test_the_memory_store_has_nothing_to_check():
    result = run("--store", "memory", "doctor", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"ok": True, "repair": False, "checks": []}
    text = run("--store", "memory", "doctor")
    assert text.exit_code == 0 and "Nothing to check" in text.stderr
