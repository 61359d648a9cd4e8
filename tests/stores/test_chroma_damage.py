"""A damaged Chroma folder is found and rebuilt from the catalog, never a silent short answer
and never a traceback: a real folder written by ``kb ingest --store chroma``, damaged four
ways, driven through the real ``kb`` in a subprocess (``kb search --mode semantic``,
``kb doctor``, ``kb doctor --repair``, then the full k hits again)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from extras import need

need("chromadb")

import kbcli  # noqa: E402

pytestmark = pytest.mark.slow  # real kb processes over a 1,200-file index

SRC = str(Path(kbcli.__file__).resolve().parents[1])
FILES = 1200  # enough for Chroma to write its HNSW segment files (index_metadata.pickle too)
K = 10
QUERY = ("note about retrieval", "--mode", "semantic", "--by", "chunk", "-k", str(K))


def _kb(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "kbcli", "--store", "chroma", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A kb database with its Chroma folder after one ingest, and the search's answer."""
    root = tmp_path_factory.mktemp("chroma-damage")
    docs = root / "docs"
    docs.mkdir()
    for i in range(FILES):
        (docs / f"n{i}.md").write_text(
            f"# Note {i}\n\nThis is note {i} about topic {i % 37} and retrieval {i * 7}.\n"
        )
    home = root / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "XDG_"))}
    env.update(HOME=str(home), PYTHONPATH=SRC, KB_DB=str(root / "kb.db"))
    done = _kb(env, root, "ingest", str(docs))
    assert done.returncode == 0, done.stderr
    hits = _kb(env, root, "search", *QUERY, "--json")
    assert hits.returncode == 0, hits.stderr
    answer = [h["id"] for h in json.loads(hits.stdout)]
    assert len(answer) == K
    folder = root / "kb.db.chroma"
    (segment,) = [p for p in folder.iterdir() if p.is_dir()]
    assert (segment / "index_metadata.pickle").exists() and (segment / "data_level0.bin").exists()
    return root, env, answer


def _damage(how: str, folder: Path) -> None:
    (segment,) = [p for p in folder.iterdir() if p.is_dir()]
    if how == "segment-folder-deleted":
        shutil.rmtree(segment)
    elif how == "chroma-sqlite3-truncated":
        with open(folder / "chroma.sqlite3", "r+b") as fh:
            fh.truncate(100_000)
    elif how == "data-level0-truncated":
        with open(segment / "data_level0.bin", "r+b") as fh:
            fh.truncate(1000)
    elif how == "index-metadata-garbage":
        (segment / "index_metadata.pickle").write_bytes(os.urandom(500))
    else:
        raise AssertionError(how)


DAMAGE = [
    "segment-folder-deleted",
    "chroma-sqlite3-truncated",
    "data-level0-truncated",
    "index-metadata-garbage",
]


@pytest.fixture
def copy(pristine, tmp_path):
    """A copy of the pristine database and folder, and kb's environment pointed at it."""
    root, env, answer = pristine
    for name in ("kb.db", "kb.db.chroma"):
        source = root / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name)
        else:
            shutil.copy2(source, tmp_path / name)
    return tmp_path, {**env, "KB_DB": str(tmp_path / "kb.db")}, answer


def _search(env, cwd) -> list[str] | str:
    """The hit ids, or the one-line error."""
    done = _kb(env, cwd, "search", *QUERY, "--json")
    if done.returncode:
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr.count("\n") == 1, done.stderr
        return done.stderr
    return [h["id"] for h in json.loads(done.stdout)]


@pytest.mark.parametrize("how", DAMAGE)
def test_search_on_a_damaged_folder_rebuilds_it_or_names_the_repair(copy, how):
    root, env, answer = copy
    _damage(how, root / "kb.db.chroma")
    got = _search(env, root)
    if isinstance(got, str):
        # Chroma's own database is unreadable: only the repair, asked for, deletes it
        assert how == "chroma-sqlite3-truncated"
        assert "Error: The Chroma collection 'jianmu'" in got and "kb doctor --repair" in got
        repaired = _kb(env, root, "doctor", "--repair")
        assert repaired.returncode == 0, repaired.stdout + repaired.stderr
        got = _search(env, root)
    assert got == answer  # all k hits, the same as before the damage
    assert _kb(env, root, "doctor").returncode == 0


@pytest.mark.parametrize("how", DAMAGE)
def test_doctor_finds_a_damaged_folder_and_the_repair_rebuilds_it(copy, how):
    root, env, answer = copy
    _damage(how, root / "kb.db.chroma")
    checked = _kb(env, root, "doctor", "--json")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    (finding,) = [c for c in report["checks"] if c["check"] == "vector-index"]
    assert finding["status"] == "drift" and "Chroma" in finding["detail"]
    assert all(c["status"] == "ok" for c in report["checks"] if c["check"] != "vector-index")
    repaired = _kb(env, root, "doctor", "--repair", "--json")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    (fixed,) = [c for c in json.loads(repaired.stdout)["checks"] if c["check"] == "vector-index"]
    assert fixed["status"] == "repaired"
    if how == "chroma-sqlite3-truncated":
        assert "deleted Chroma's unreadable files" in fixed["action"]
    assert _kb(env, root, "doctor").returncode == 0
    assert _search(env, root) == answer


def test_a_collection_short_of_the_catalog_is_rebuilt(copy):
    """Vectors gone from the collection behind kb's back (another Chroma client): the state
    file still says it is current, its count says otherwise."""
    root, env, answer = copy
    drop = (
        "import chromadb, sys\n"
        "c = chromadb.PersistentClient(sys.argv[1])\n"
        "col = c.get_collection('jianmu')\n"
        "col.delete(ids=col.get(limit=600, include=[])['ids'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", drop, str(root / "kb.db.chroma")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    checked = _kb(env, root, "doctor")
    assert checked.returncode == 1 and "holds 600 vectors, the catalog 1200" in checked.stdout
    assert _search(env, root) == answer
    assert _kb(env, root, "doctor").returncode == 0


def test_a_short_answer_from_a_collection_in_use_is_completed_and_the_collection_rebuilt(
    tmp_path,
):
    """Vectors lost while a store has the collection open (another Chroma client): the next
    search's answer is short of what the catalog holds, so it comes from the catalog's vectors
    (exact), filtered or not, and the collection is rebuilt for the searches after it."""
    from kbcli.stores.chroma.store import ChromaStore
    from kbcli.types import Document

    store = ChromaStore(tmp_path / "chroma")
    try:
        docs = [Document(f"d{i}", f"text {i}", {"n": i % 2}) for i in range(40)]
        store.add(docs, [[1.0, i / 40, 0.0] for i in range(40)])
        query = [1.0, 0.5, 0.0]
        before = [h.document.id for h in store.search(query, k=10)]
        filtered = [h.document.id for h in store.search(query, k=10, filter={"n": 1})]
        assert len(before) == len(filtered) == 10
        collection = store._matrix._collection()
        collection.delete(ids=collection.get(limit=35, include=[])["ids"])  # 5 left
        assert [h.document.id for h in store.search(query, k=10)] == before
        assert store._matrix.rebuilds == 2  # the first sync, and the rebuild
        assert store._matrix._collection().count() == 40
        odd = store._matrix._collection().get(where={"n": 1}, include=[])["ids"]
        store._matrix._collection().delete(ids=odd[:15])  # 5 of the filter's 20 left
        assert [h.document.id for h in store.search(query, k=10, filter={"n": 1})] == filtered
        assert store._matrix.rebuilds == 3
    finally:
        store.close()


def test_doctor_on_a_collection_never_synced_creates_nothing(tmp_path):
    from kbcli.stores.chroma.store import ChromaStore
    from kbcli.types import Document

    store = ChromaStore(tmp_path / "chroma")
    try:
        store.add([Document("x", "words", {})], [[1.0, 0.0]])
        assert all(f.ok for f in store.doctor())
        assert not (tmp_path / "chroma" / "chroma.sqlite3").exists()
    finally:
        store.close()
