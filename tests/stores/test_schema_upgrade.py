"""Opening a database written by an older kbcli upgrades it in place, losing nothing.

``data/schema-v1.db`` was written by the schema-1 code (commit 6add7b8): ``kb ingest
examples/docs`` plus two chunks added without a source. ``data/schema-v2.db`` was written the
same way by the schema-2 code (commit eb402d5), ``data/schema-v3.db`` by the schema-3 code
(commit 38e810b: ``kb ingest examples/docs``, then ``note-1`` and ``note-2`` added without a
source), ``data/schema-v4.db`` by the schema-4 code (commit 59b511a: ``kb ingest
examples/docs``, then two texts added with ``kb add``), ``data/schema-v5.db`` by the schema-5
code (commit 3b13149: ``kb ingest docs --embedder local`` of a copy of ``examples/docs``, then
``faq.txt`` deleted and ingested again, then one text added with ``kb add``: its embedding
cache holds the 14 vectors of the index and the one of the deleted file's chunk).
"""

import shutil
import sqlite3
from pathlib import Path

import pytest

from bm25_plain import plain_bm25_with_sources
from kbcli import SQLiteStore, StoreError
from kbcli.search.fusion import SOURCE_WEIGHT
from kbcli.stores.sqlite import SCHEMA_VERSION
from kbcli.types import Document

FIXTURE = Path(__file__).parents[1] / "data" / "schema-v1.db"
FIXTURE_V2 = Path(__file__).parents[1] / "data" / "schema-v2.db"
FIXTURE_V3 = Path(__file__).parents[1] / "data" / "schema-v3.db"
FIXTURE_V4 = Path(__file__).parents[1] / "data" / "schema-v4.db"
FIXTURE_V5 = Path(__file__).parents[1] / "data" / "schema-v5.db"
QUERIES = ("reset password", "rotate token", "invoice billing")


@pytest.fixture
def old_db(tmp_path):
    path = tmp_path / "old.db"
    shutil.copy(FIXTURE, path)
    return path


def _rows(path: Path) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT id, text, metadata, source, length FROM chunks ORDER BY doc"
        ).fetchall()
    finally:
        conn.close()


def test_fixture_is_schema_1():
    conn = sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    conn.close()


def test_upgrade_keeps_every_chunk_and_builds_sources(old_db):
    before = _rows(old_db)
    store = SQLiteStore(old_db)
    assert store.integrity_check() == []
    assert _rows(old_db) == before
    conn = sqlite3.connect(old_db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()
    files = {s for _, _, _, s, _ in before if s is not None}
    loose = sum(1 for row in before if row[3] is None)
    assert loose == 2
    assert {s for s, _ in store.sources()} == files
    assert store.stats()["sources"] == len(files)
    # every loose chunk is a source of its own
    stated = sqlite3.connect(old_db).execute("SELECT sources FROM stats").fetchone()[0]
    assert stated == len(files) + loose
    store.close()


def test_upgraded_index_scores_like_the_plain_formula(old_db):
    store = SQLiteStore(old_db)
    store.keyword_search("reset password")  # re-tokenises the old index (title field)
    docs = {d.id: d for d in store.list_all()}
    _scores_are_plain_bm25(store, docs, (*QUERIES, "密码"))
    store.close()


def test_upgraded_index_takes_writes(old_db):
    store = SQLiteStore(old_db)
    source = store.sources()[0][0]
    store.delete_source(source)
    store.remove(["note-1"])
    assert store.integrity_check() == []
    store.close()


def test_read_only_old_database_says_what_to_do(old_db, monkeypatch):
    # Tests run as root here, where file permissions do not stop writes; so the write that
    # SQLite would refuse is simulated: the upgrade step raises SQLite's read-only error.
    from kbcli.stores.sqlite import schema as sqlite_schema

    def refuse(conn):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setitem(sqlite_schema.MIGRATIONS, 1, refuse)
    before = old_db.read_bytes()
    with pytest.raises(StoreError, match="needs write access"):
        SQLiteStore(old_db)
    assert old_db.read_bytes() == before


@pytest.fixture
def v2_db(tmp_path):
    path = tmp_path / "v2.db"
    shutil.copy(FIXTURE_V2, path)
    return path


def test_fixture_is_schema_2():
    conn = sqlite3.connect(f"file:{FIXTURE_V2}?mode=ro", uri=True)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    conn.close()


def test_upgrade_from_2_adds_the_keyword_log_and_scores_alike(v2_db):
    before = _rows(v2_db)
    store = SQLiteStore(v2_db)
    assert store.integrity_check() == []
    assert _rows(v2_db) == before
    conn = sqlite3.connect(v2_db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    assert conn.execute("SELECT count(*) FROM keyword_log").fetchone()[0] == 0
    conn.close()
    store.keyword_search("reset password")  # re-tokenises the old index (title field)
    docs = {d.id: d for d in store.list_all()}
    _scores_are_plain_bm25(store, docs)
    # A write after the upgrade goes to the log (and, with the pack, into its delta).
    store.remove(["loose-1"])
    del docs["loose-1"]
    _scores_are_plain_bm25(store, docs)
    conn = sqlite3.connect(v2_db)
    assert conn.execute("SELECT count(*) FROM keyword_log").fetchone()[0] >= 1
    conn.close()
    assert store.integrity_check() == []
    store.close()


def _scores_are_plain_bm25(
    store: SQLiteStore, docs: dict, queries: tuple[str, ...] = QUERIES
) -> None:
    """Every chunk's keyword score for ``queries`` equals an independent plain BM25 (with
    source context) over ``docs``, to 1e-6."""
    from kbcli.text.analysis import keyword_counts

    analyzer = store.analyzer
    terms = {
        i: list(keyword_counts(analyzer, d.text, d.metadata).elements()) for i, d in docs.items()
    }
    sources = {i: d.metadata.get("source") for i, d in docs.items()}
    for query in queries:
        expected = plain_bm25_with_sources(analyzer.terms(query), terms, sources, SOURCE_WEIGHT)
        got = store.keyword_search(query, k=len(docs))
        assert {r.document.id: r.score for r in got} == pytest.approx(expected, abs=1e-6)


def _tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()


def test_fixture_is_schema_3_with_postings():
    conn = sqlite3.connect(f"file:{FIXTURE_V3}?mode=ro", uri=True)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    assert conn.execute("SELECT count(*) FROM postings").fetchone()[0] > 0
    conn.close()


def test_upgrade_from_3_drops_the_postings_and_keeps_scores_and_writes(tmp_path):
    path = tmp_path / "v3.db"
    shutil.copy(FIXTURE_V3, path)
    before = _rows(path)
    store = SQLiteStore(path)
    assert store.integrity_check() == []
    assert _rows(path) == before
    assert "postings" not in _tables(path) and "chunks_src" in _tables(path)
    docs = {d.id: d for d in store.list_all()}

    _scores_are_plain_bm25(store, docs)
    # One chunk out of a source of several: its source frequencies are counted from the
    # forward indexes of the chunks that stay.
    source = next(s for s, n in store.sources() if n > 1)
    victim = next(i for i, d in docs.items() if d.metadata.get("source") == source)
    store.remove([victim])
    del docs[victim]
    assert store.integrity_check() == []
    _scores_are_plain_bm25(store, docs)
    store.close()


def _layouts(path: Path) -> set[str]:
    """The forward-index layouts of the chunks: int64 pairs (schema 4) or narrow (tagged)."""
    conn = sqlite3.connect(path)
    try:
        lengths = [r[0] for r in conn.execute("SELECT length(terms) FROM chunks")]
    finally:
        conn.close()
    return {"pairs" if n % 16 == 0 else "narrow" for n in lengths}


def test_fixture_is_schema_4_with_int64_pairs():
    conn = sqlite3.connect(f"file:{FIXTURE_V4}?mode=ro", uri=True)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 4
    conn.close()
    assert _layouts(FIXTURE_V4) == {"pairs"}


def test_upgrade_from_4_keeps_the_old_rows_scores_alike_and_writes_narrow(tmp_path):
    path = tmp_path / "v4.db"
    shutil.copy(FIXTURE_V4, path)
    before = _rows(path)
    store = SQLiteStore(path)
    assert store.integrity_check() == []
    assert _rows(path) == before and _layouts(path) == {"pairs"}  # nothing rewritten
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    conn.close()
    docs = {d.id: d for d in store.list_all()}
    from kbcli.types import Document

    _scores_are_plain_bm25(store, docs)
    added = Document("Rotate the signing token after every incident.", "new-note", {})
    store.add([added])
    docs[added.id] = added
    assert _layouts(path) == {"pairs", "narrow"}  # new rows narrow, the old ones as they were
    assert store.integrity_check() == []
    _scores_are_plain_bm25(store, docs)
    store.close()


def test_a_schema_5_file_is_refused_by_a_reader_of_schema_4(tmp_path, monkeypatch):
    """What an older kbcli says (its SCHEMA_VERSION was 4), not a misread of narrow rows."""
    from kbcli.stores.sqlite import schema as sqlite_schema

    path = tmp_path / "v5.db"
    shutil.copy(FIXTURE_V4, path)
    SQLiteStore(path).close()  # upgraded to 5
    monkeypatch.setattr(sqlite_schema, "SCHEMA_VERSION", 4)
    with pytest.raises(StoreError, match="written by a newer kbcli"):
        SQLiteStore(path)


def _cache(path: Path) -> dict[str, bytes]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT text_hash, vec FROM embedding_cache"))
    finally:
        conn.close()


def test_fixture_is_schema_5_caching_every_vector_again():
    conn = sqlite3.connect(f"file:{FIXTURE_V5}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        assert conn.execute("SELECT count(*) FROM vectors").fetchone()[0] == 14
        live = {h for (h,) in conn.execute("SELECT text_hash FROM chunks")}
    finally:
        conn.close()
    cache = _cache(FIXTURE_V5)
    assert len(cache) == 15 and len(set(cache) - live) == 1  # the deleted file's chunk


def test_upgrade_from_5_keeps_only_what_left_the_index_and_finds_the_rest(tmp_path):
    from kbcli.embedders.base import EmbedderInfo
    from kbcli.stores.common import unpack_vector

    path = tmp_path / "v5.db"
    shutil.copy(FIXTURE_V5, path)
    before, old_cache = _rows(path), _cache(path)
    store = SQLiteStore(path)
    try:
        assert store.integrity_check() == []
        assert _rows(path) == before
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
        indexes = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        live = {h for (h,) in conn.execute("SELECT text_hash FROM chunks")}
        conn.close()
        assert {"chunks_text_hash", "embedding_cache_key"} <= indexes
        kept = _cache(path)
        assert set(kept) == set(old_cache) - live and len(kept) == 1  # no copy of the index
        (gone,) = kept
        assert kept[gone] == old_cache[gone]
        # every vector the index holds is still a cache hit, exactly as stored
        info = EmbedderInfo("local", "all-MiniLM-L6-v2", 384)
        docs = {d.text: d.embedding for d in store.iter_documents(with_embeddings=True)}
        assert store.cached_embeddings(info, list(docs)) == docs
        assert all(docs[t] == unpack_vector(old_cache[h]) for t, h in _hashes(docs).items())
        _scores_are_plain_bm25(store, {d.id: d for d in store.list_all()})
        added = store.add([Document("a new note", "new-note", {})], [[0.5] * 384], embedder=info)
        assert added == ["a new note"] and store.integrity_check() == []
    finally:
        store.close()


def _hashes(docs: dict) -> dict[str, str]:
    from kbcli.stores.common import text_hash

    return {t: text_hash(t) for t in docs}


def test_the_upgrade_gives_the_freed_space_back(tmp_path):
    from kbcli.stores.sqlite.schema import reclaim

    path = tmp_path / "big.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE filler (b BLOB)")
    conn.executemany("INSERT INTO filler VALUES (?)", [(bytes(4000),)] * 200)
    conn.commit()
    conn.execute("DELETE FROM filler")
    conn.commit()
    size = path.stat().st_size
    other = sqlite3.connect(path)  # a reader in the middle of a read: skipped, not waited for
    other.execute("BEGIN")
    other.execute("SELECT count(*) FROM filler").fetchone()
    conn.execute("PRAGMA busy_timeout = 30000")
    assert reclaim(conn) is False
    other.execute("COMMIT")
    other.close()
    assert reclaim(conn) is True and path.stat().st_size < size / 4
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
    conn.close()
