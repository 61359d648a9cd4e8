"""A Chroma collection is a namespace: its own catalog beside the others in one folder, folders
written by an older kbcli (one ``kbcli.db`` for every collection) keep their data, and a
catalog never feeds two collections nor a collection two catalogs.

``data/chroma-folders-21d2d9a.tar.gz`` was written by the code of commit 21d2d9a (catalog
``<folder>/kbcli.db`` shared by every collection), with the built-in embedder:

- ``single/``: ``KnowledgeBase(store=ChromaStore("single"))``, ``ingest_file`` of each
  ``examples/docs/*.md``, one semantic search (so the collection was synced);
- ``shared/``: collection ``jianmu`` ingested two of those files, collection ``notes`` added
  ``note-1``; both searched, so both were synced from the one shared catalog;
- ``unsynced/``: one file ingested, never searched (no sync state);
- ``cli/``: ``kb --store chroma ingest examples/docs`` with ``KB_DB=cli/knowledge.db``
  (catalog ``knowledge.db``, collection in ``knowledge.db.chroma/``).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from extras import need

need("chromadb")

import kbcli  # noqa: E402
from kbcli import IndexMismatchError, InvalidOptionError, KnowledgeBase  # noqa: E402
from kbcli.config.lookup import load_config  # noqa: E402
from kbcli.stores import build_store  # noqa: E402
from kbcli.stores.chroma.store import ChromaStore  # noqa: E402
from kbcli.types import Document  # noqa: E402

FIXTURE = Path(__file__).parents[1] / "data" / "chroma-folders-21d2d9a.tar.gz"
SRC = str(Path(kbcli.__file__).resolve().parents[1])


@pytest.fixture
def old(tmp_path):
    """The folders of the fixture, unpacked."""
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path


def _rows(db: Path) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT id, text, metadata FROM chunks ORDER BY doc").fetchall()
    finally:
        conn.close()


def _listed(store) -> list[tuple]:
    import json

    return [(d.id, d.text, json.loads(json.dumps(d.metadata))) for d in store.list_all()]


def _as_rows(rows: list[tuple]) -> list[tuple]:
    import json

    return [(i, t, json.loads(m)) for i, t, m in rows]


def test_a_single_collection_folder_of_an_older_kbcli_keeps_its_data(old):
    folder = old / "single"
    before = _as_rows(_rows(folder / "kbcli.db"))
    kb = KnowledgeBase(store=ChromaStore(folder))
    try:
        assert _listed(kb.store) == before and len(before) == 7
        assert (folder / "jianmu.kbcli.db").exists() and not (folder / "kbcli.db").exists()
        assert not list(folder.glob("kbcli.db*"))  # its keyword pack and lock went with it
        # the same answers as before, from the Chroma collection it had (not rebuilt)
        hits = kb.search("reset your password", k=3, mode="semantic")
        assert [h.document.id for h in hits] == [
            "4aa847fd7fed410a865f2fd06d45d244",
            "28be8525eafd47d59357d16307175e1e",
            "27f89870afc54743a04cab67f75daefe",
        ]
        assert kb.store._matrix.rebuilds == 0
        assert kb.search("password", k=3, mode="keyword")
    finally:
        kb.close()
    again = ChromaStore(folder)
    assert _listed(again) == before  # and it opens again as the new layout
    again.close()


def test_a_shared_folder_of_an_older_kbcli_gives_each_collection_its_data(old):
    folder = old / "shared"
    before = _as_rows(_rows(folder / "kbcli.db"))
    assert len(before) == 8
    fresh = ChromaStore(folder, collection="fresh")  # never synced there: starts empty
    assert fresh.count() == 0 and (folder / "kbcli.db").exists()
    fresh.close()
    docs = ChromaStore(folder)
    assert _listed(docs) == before
    assert (folder / "kbcli.db").exists()  # notes was synced from it too and has no copy yet
    notes = ChromaStore(folder, collection="notes")
    try:
        assert _listed(notes) == before  # what each collection saw before, kept
        assert not (folder / "kbcli.db").exists()
        # from now on they are separate
        docs.add([Document("docs-only", "a page only docs has", {"source": "d.md"})], [[0.5] * 64])
        notes.delete(["note-1"])
        assert notes.get(["docs-only"]) == [] and docs.get(["note-1"])
        assert len(notes.search([1.0] * 64, k=20)) == 7
        assert len(docs.search([1.0] * 64, k=20)) == 9
    finally:
        docs.close()
        notes.close()


def test_an_unsynced_folder_of_an_older_kbcli_is_taken_by_the_collection_opened(old):
    folder = old / "unsynced"
    before = _as_rows(_rows(folder / "kbcli.db"))
    store = ChromaStore(folder, collection="docs")
    try:
        assert _listed(store) == before and len(before) == 4
        assert len(store.search([1.0] * 64, k=10)) == 4
    finally:
        store.close()
    assert not (folder / "kbcli.db").exists()


def _kb(*args: str, db: Path, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "XDG_"))}
    env.update(HOME=str(home), KB_DB=str(db), PYTHONPATH=SRC)
    return subprocess.run(
        [sys.executable, "-m", "kbcli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_a_kb_database_with_its_chroma_folder_of_an_older_kbcli_works(old, tmp_path):
    home, cwd = tmp_path / "h", tmp_path / "w"
    home.mkdir()
    cwd.mkdir()
    db = old / "cli" / "knowledge.db"
    done = _kb("--store", "chroma", "search", "password", "--mode", "semantic", "--by", "chunk",
               "-k", "10", "--json", db=db, cwd=cwd, home=home)  # fmt: skip
    assert done.returncode == 0, done.stderr
    import json

    assert len(json.loads(done.stdout)) == 10
    doctor = _kb("--store", "chroma", "doctor", db=db, cwd=cwd, home=home)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    # the database now feeds collection 'jianmu': another collection over it is refused
    (cwd / "jianmu.yaml").write_text("store: {backend: chroma, collection: other}\n")
    refused = _kb("--store", "chroma", "search", "password", db=db, cwd=cwd, home=home)
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert "catalog of the Chroma collection 'jianmu'" in refused.stderr


def test_a_catalog_feeds_one_collection(tmp_path):
    db = tmp_path / "kb.db"
    ChromaStore(tmp_path / "c", collection="alpha", db=db).close()
    with pytest.raises(IndexMismatchError, match="catalog of the Chroma collection 'alpha'"):
        ChromaStore(tmp_path / "c", collection="beta", db=db)
    ChromaStore(tmp_path / "c", collection="alpha", db=db).close()


def test_a_collection_is_fed_by_one_catalog(tmp_path):
    folder = tmp_path / "c"
    first = ChromaStore(folder, collection="alpha")
    first.add([Document("x", "words", {})], [[1.0, 0.0]])
    assert first.search([1.0, 0.0], k=1)  # synced from alpha.kbcli.db
    first.close()
    with pytest.raises(IndexMismatchError, match="built from .*alpha.kbcli.db"):
        ChromaStore(folder, collection="alpha", db=tmp_path / "other.db")
    # once that catalog is gone, the collection is only a stale copy: taken over and rebuilt
    (folder / "alpha.kbcli.db").unlink()
    other = ChromaStore(folder, collection="alpha", db=tmp_path / "other.db")
    try:
        other.add([Document("y", "other words", {})], [[0.0, 1.0]])
        assert [h.document.id for h in other.search([1.0, 0.0], k=5)] == ["y"]
    finally:
        other.close()


@pytest.mark.parametrize("name", ["a", "../up", "with/slash", "-dash", "x" * 600, "a..b"])
def test_a_collection_name_chroma_refuses_is_refused_first(tmp_path, name):
    with pytest.raises(InvalidOptionError, match="Invalid Chroma collection name"):
        ChromaStore(tmp_path / "c", collection=name)
    assert not (tmp_path / "c").exists()


def test_build_store_keeps_the_configured_database_as_the_catalog(tmp_path):
    """``kb`` (build_store): the catalog is ``--db``/``paths.knowledge_db``, the collection
    lives in ``store.path`` (or ``<db>.chroma``); two databases with their own collections
    share one Chroma folder without seeing each other."""
    shared = tmp_path / "chroma"
    stores = []
    for name in ("left", "right"):
        config_file = tmp_path / f"{name}.yaml"
        config_file.write_text(f"store: {{backend: chroma, path: {shared}, collection: {name}}}\n")
        stores.append(build_store(load_config(config_file), db=tmp_path / f"{name}.db"))
    left, right = stores
    try:
        assert left.path == tmp_path / "left.db" and left.chroma_path == shared
        left.add([Document("l", "left words", {"source": "l.md"})], [[1.0, 0.0]])
        right.add([Document("r", "right words", {"source": "r.md"})], [[1.0, 0.0]])
        assert [h.document.id for h in left.search([1.0, 0.0], k=5)] == ["l"]
        assert [h.document.id for h in right.search([1.0, 0.0], k=5)] == ["r"]
        assert not right.keyword_search("left")
    finally:
        left.close()
        right.close()
    plain = tmp_path / "plain.yaml"
    plain.write_text("store: {backend: chroma}\n")
    default = build_store(load_config(plain), db=tmp_path / "d.db")
    assert (default.path, default.chroma_path) == (tmp_path / "d.db", tmp_path / "d.db.chroma")
    default.close()


def test_a_copy_of_a_database_and_its_folder_opens_beside_the_original(tmp_path):
    """A backup (database and Chroma folder copied together) is the same index: its
    collection's state names the original catalog, which still exists, and that is no
    reason to refuse it."""
    import shutil

    original = ChromaStore(tmp_path / "c", db=tmp_path / "kb.db")
    original.add([Document("x", "words", {})], [[1.0, 0.0]])
    assert original.search([1.0, 0.0], k=1)
    original.close()
    backup = tmp_path / "backup"
    backup.mkdir()
    shutil.copy2(tmp_path / "kb.db", backup / "kb.db")
    shutil.copytree(tmp_path / "c", backup / "c")
    copy = ChromaStore(backup / "c", db=backup / "kb.db")
    try:
        assert [h.document.id for h in copy.search([1.0, 0.0], k=1)] == ["x"]
        assert copy._matrix.rebuilds == 0
    finally:
        copy.close()
