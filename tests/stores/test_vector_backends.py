"""FAISS and Chroma stores beyond the contract suites: filtered dense search keeps k on every
store, the derived FAISS file (stale, missing, corrupt, half-written), the Chroma sync, the
where compiler, missing extras and the store settings."""

from __future__ import annotations

import random
import sys

import pytest

from extras import need
from kbcli import Document, InMemoryStore, SQLiteStore
from kbcli.config.lookup import load_config
from kbcli.errors import ConfigError, FilterError, MissingDependencyError
from kbcli.filters.model import matches

faiss = need("faiss")
chromadb = need("chromadb")

from kbcli.stores.chroma.store import ChromaStore, compile_where  # noqa: E402
from kbcli.stores.faiss.store import FILE_MAGIC, FaissStore  # noqa: E402

DIM = 8


def _docs(n: int = 60, seed: int = 3) -> tuple[list[Document], list[list[float]]]:
    rng = random.Random(seed)
    docs = [
        Document(f"d{i}", f"chunk number {i}", {"source": f"s{i % 6}.md", "n": i, "hot": i < 10})
        for i in range(n)
    ]
    vecs = [[rng.uniform(-1, 1) for _ in range(DIM)] for _ in docs]
    return docs, vecs


STORES = {
    "memory": lambda tmp: InMemoryStore(),
    "sqlite": lambda tmp: SQLiteStore(tmp / "kb.db"),
    "faiss": lambda tmp: FaissStore(path=tmp / "kb.db"),
    "faiss-hnsw": lambda tmp: FaissStore(index_factory="HNSW16", path=tmp / "kb.db"),
    "faiss-hnsw-ef": lambda tmp: FaissStore(
        index_factory="HNSW16", ef_search=4, path=tmp / "kb.db"
    ),
    "faiss-ivf": lambda tmp: FaissStore(index_factory="IVF4,Flat", path=tmp / "kb.db"),
    "faiss-l2": lambda tmp: FaissStore(metric="l2", path=tmp / "kb.db"),
    "chroma": lambda tmp: ChromaStore(tmp / "chroma"),
    "postgres": None,  # the session's PostgreSQL server (tests/pg_server.py), when installed
}


# approximate indexes: k allowed hits, not always the exact k
APPROXIMATE = {"faiss-hnsw", "faiss-hnsw-ef", "faiss-ivf", "chroma", "postgres"}


@pytest.mark.parametrize("name", list(STORES))
def test_filtered_dense_search_keeps_k_when_the_nearest_are_filtered_out(tmp_path, name, request):
    if name == "postgres":
        from kbcli.stores.postgres import PostgresStore

        dsn, table = request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_table")
        store = PostgresStore(dsn, table)
    else:
        store = STORES[name](tmp_path)
    docs, vecs = _docs(200)
    query = [1.0] * DIM
    # the 10 "hot" chunks sit right on the query: all of them are filtered out below
    vecs[:10] = [[1.0 + 0.01 * i] * DIM for i in range(10)]
    store.add(docs, vecs)
    for flt in ({"hot": False, "n": {"$lt": 40}}, {"source": "s1.md", "hot": {"$ne": True}}):
        hits = store.search(query, k=5, filter=flt)
        assert len(hits) == 5
        assert all(matches(h.document.metadata, flt) for h in hits)
        allowed = [(d, v) for d, v in zip(docs, vecs) if matches(d.metadata, flt)]
        want = sorted(allowed, key=lambda dv: -_cos(query, dv[1]))[:5]
        same = {h.document.id for h in hits} & {d.id for d, _ in want}
        assert len(same) == 5 if name not in APPROXIMATE else len(same) >= 3
    # a filter that needs the exact fallback on Chroma ($exists) keeps k too
    hits = store.search(query, k=4, filter={"n": {"$gte": 100}, "source": {"$exists": True}})
    assert len(hits) == 4 and all(h.document.metadata["n"] >= 100 for h in hits)
    store.close()


def _cos(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (sum(x * x for x in a) ** 0.5 * sum(y * y for y in b) ** 0.5)


# --- the derived FAISS file -------------------------------------------------------------------


def _faiss_store(path):
    store = FaissStore(path=path)
    docs, vecs = _docs()
    store.add(docs, vecs)
    return store, docs, vecs


def _top(store, vec, k=5):
    return [h.document.id for h in store.search(vec, k=k)]


def test_faiss_file_is_written_tagged_and_reused(tmp_path):
    store, docs, vecs = _faiss_store(tmp_path / "kb.db")
    first = _top(store, vecs[7])
    assert first[0] == "d7" and store.faiss_path.exists()
    store.close()
    again = FaissStore(path=tmp_path / "kb.db")
    assert _top(again, vecs[7]) == first
    assert again._matrix.rebuilds == 0  # read from the file, not rebuilt
    again.close()


def test_stale_faiss_file_is_updated_by_difference(tmp_path):
    store, docs, vecs = _faiss_store(tmp_path / "kb.db")
    _top(store, vecs[0])
    store.remove(["d7", "d59"])  # d59 is the newest: its rowid is reused below
    store.add([Document("new", "a new chunk", {})], [vecs[7]])
    assert _top(store, vecs[7], 1) == ["new"]
    assert len(store._matrix._current[1]) == 59
    assert store._matrix.rebuilds == 1  # only the first build: the rest by difference
    store.close()
    other = FaissStore(path=tmp_path / "kb.db")  # a stale file seen by another process
    writer = SQLiteStore(tmp_path / "kb.db")  # a plain SQLite writer: the file is stale
    writer.remove(["d3"])
    writer.close()
    assert "d3" not in _top(other, vecs[3], 10)
    assert other._matrix.rebuilds == 0
    other.close()


@pytest.mark.parametrize("damage", ["missing", "truncated", "garbage"])
def test_missing_or_corrupt_faiss_file_is_rebuilt(tmp_path, damage):
    store, docs, vecs = _faiss_store(tmp_path / "kb.db")
    want = _top(store, vecs[11])
    path = store.faiss_path
    store.close()
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:-100])
    else:
        path.write_bytes(FILE_MAGIC + b"\xff" * 64)
    again = FaissStore(path=tmp_path / "kb.db")
    assert _top(again, vecs[11]) == want
    assert again._matrix.rebuilds == 1
    again.close()
    assert FaissStore(path=tmp_path / "kb.db")._matrix.path.stat().st_size > 1000


def test_a_half_written_temp_file_is_never_used(tmp_path):
    store, docs, vecs = _faiss_store(tmp_path / "kb.db")
    want = _top(store, vecs[5])
    path = store.faiss_path
    store.close()
    good = path.read_bytes()
    # a writer killed mid-write leaves only its temp file; the real name is untouched
    dead = path.parent / f"{path.name}.4194999.tmp"  # above any pid in use here
    dead.write_bytes(good[: len(good) // 2])
    path.unlink()
    again = FaissStore(path=tmp_path / "kb.db")
    assert _top(again, vecs[5]) == want
    assert again._matrix.rebuilds == 1
    assert path.read_bytes()[:8] == FILE_MAGIC
    assert not dead.exists()  # the dead writer's temp file is cleared by the next write
    again.close()


def test_faiss_settings_change_rebuilds_and_dim_is_checked(tmp_path):
    store, docs, vecs = _faiss_store(tmp_path / "kb.db")
    _top(store, vecs[0])
    store.close()
    hnsw = FaissStore(index_factory="HNSW16", path=tmp_path / "kb.db")
    assert _top(hnsw, vecs[9], 1) == ["d9"] and hnsw._matrix.rebuilds == 1
    assert hnsw.stats()["vector_index"]["index_factory"] == "HNSW16"
    hnsw.close()
    fixed = FaissStore(dim=4, path=tmp_path / "other.db")
    with pytest.raises(Exception, match="dimensions"):
        fixed.add([Document("x", "x", {})], [[1.0] * DIM])
    fixed.close()


# --- Chroma -----------------------------------------------------------------------------------


def test_chroma_collection_follows_writes_and_an_interrupted_sync_is_redone(tmp_path):
    store = ChromaStore(tmp_path / "chroma")
    docs, vecs = _docs()
    store.add(docs, vecs)
    assert _top(store, vecs[4], 1) == ["d4"]
    store.remove(["d4"])
    assert "d4" not in _top(store, vecs[4], 10)
    coll = store._matrix
    assert coll.rebuilds == 1 and len(coll._index) == 59
    store.close()
    # a sync killed half-way leaves its state marked dirty: the next one starts over
    state = coll.state_path.read_bytes()
    coll.state_path.write_bytes(state.replace(b'"dirty": false', b'"dirty": true'))
    writer = SQLiteStore(store.path)  # the collection's catalog
    writer.add([Document("late", "late chunk", {"n": 1})], [vecs[4]])
    writer.close()
    again = ChromaStore(tmp_path / "chroma")
    assert _top(again, vecs[4], 1) == ["late"]
    assert again._matrix.rebuilds == 1 and len(again._matrix._index) == 60
    again.close()


def test_where_compiler():
    assert compile_where({"lang": "en"}) == {"lang": {"$eq": "en"}}
    assert compile_where({"a": 1, "b": {"$gte": 2, "$lt": 5}}) == {
        "$and": [{"a": {"$eq": 1}}, {"$and": [{"b": {"$gte": 2}}, {"b": {"$lt": 5}}]}]
    }
    assert compile_where({"$or": [{"a": 1}, {"b": {"$nin": ["x", 2]}}]}) == {
        "$or": [{"a": {"$eq": 1}}, {"$and": [{"b": {"$nin": ["x"]}}, {"b": {"$nin": [2]}}]}]
    }
    assert compile_where({"k": {"$in": ["x", 1]}}) == {
        "$or": [{"k": {"$in": ["x"]}}, {"k": {"$in": [1]}}]
    }
    assert compile_where(None) is None
    for bad in ({"a": {"$exists": True}}, {"a": None}, {"a": {"$gt": "m"}}):
        with pytest.raises(FilterError):
            compile_where(bad)


# --- extras and settings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "module, make, extra",
    [
        ("faiss", lambda p: FaissStore(path=p / "kb.db"), "faiss"),
        ("chromadb", lambda p: ChromaStore(p / "c"), "chroma"),
    ],
)
def test_missing_extra_names_the_pip_command(tmp_path, monkeypatch, module, make, extra):
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingDependencyError) as info:
        make(tmp_path)
    assert str(info.value).endswith(f"pip install 'kbcli[{extra}]'")
    assert "\n" not in str(info.value)


def test_store_settings_are_validated(tmp_path):
    cfg = tmp_path / "jianmu.yaml"
    cfg.write_text("store: {backend: faiss, dim: 384, index_factory: HNSW32, metric: l2}\n")
    store = load_config(cfg).store
    assert store.backend == "faiss"
    assert store.settings == {"dim": 384, "index_factory": "HNSW32", "metric": "l2"}
    cfg.write_text("store: {backend: faiss, index_factory: HNSW32, ef_search: 64}\n")
    assert load_config(cfg).store.settings == {"index_factory": "HNSW32", "ef_search": 64}
    cfg.write_text("store: {backend: chroma, path: /tmp/c, collection: notes}\n")
    assert load_config(cfg).store.settings == {"path": "/tmp/c", "collection": "notes"}
    bad_sections = (
        "{backend: faiss, metric: cos}",
        "{backend: faiss, dim: 0}",
        "{backend: chroma, index_factory: Flat}",
        "{backend: faiss, normalize: 3}",
        "{backend: faiss, ef_search: 0}",
        "{backend: faiss, ef_search: many}",
        "{backend: sqlite, ef_search: 64}",
    )
    for bad in bad_sections:
        cfg.write_text(f"store: {bad}\n")
        with pytest.raises(ConfigError):
            load_config(cfg)


@pytest.mark.parametrize("backend", ["faiss", "chroma"])
def test_an_ingest_leaves_the_derived_index_current(tmp_path, backend):
    from kbcli.types import FileRecord

    make = (
        (lambda: FaissStore(path=tmp_path / "kb.db"))
        if backend == "faiss"
        else (lambda: ChromaStore(tmp_path / "chroma"))
    )
    store = make()
    docs, vecs = _docs(20)
    record = FileRecord("/d/a.md", 1, 1, "x" * 64, "{}", [d.id for d in docs])
    store.replace_file(record, [Document(d.id, d.text, {**d.metadata, "source": "/d/a.md"})
                                for d in docs], vecs)  # fmt: skip
    store.close()  # an ingest's writer: brings the index up to date before closing
    again = make()
    assert _top(again, vecs[3], 1) == ["d3"]
    assert again._matrix.rebuilds == 0  # current: nothing rebuilt by the reader
    again.close()


WRITER_SCRIPT = """
import random, sys
from kbcli import Document
from kbcli.stores.faiss.store import FaissStore

store = FaissStore(path=sys.argv[1])
rng = random.Random(int(sys.argv[2]))
print("started", flush=True)
for i in range(100_000):
    vecs = [[rng.uniform(-1, 1) for _ in range(64)] for _ in range(200)]
    store.add([Document(f"k{sys.argv[2]}-{i}-{j}", "x", {}) for j in range(200)], vecs)
    store.search(vecs[0], k=3)  # writes <db>.faiss: temp -> fsync -> rename
"""


@pytest.mark.slow
def test_kill_minus_nine_never_leaves_a_faiss_file_in_use_half_written(tmp_path):
    import os
    import signal
    import subprocess
    import time
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[2] / "src")
    db = tmp_path / "kb.db"
    rng = random.Random(11)
    for run in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER_SCRIPT, str(db), str(run)],
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": src},
        )
        assert child.stdout.readline().strip() == b"started"
        time.sleep(rng.uniform(0.3, 1.2))
        child.send_signal(signal.SIGKILL)
        child.wait()
        store = FaissStore(path=db)
        faiss_file = store._matrix
        if faiss_file.path.exists():
            assert faiss_file._load() is not None  # whole (maybe stale), never half a file
        with store._db.read() as conn:
            held = len(store._matrix.index(conn).ids())
        assert held == store.count()
        query = [1.0] * 64
        exact = SQLiteStore(db)
        assert _top(store, query, 5) == _top(exact, query, 5)
        exact.close()
        store.close()


def test_ef_search_is_used_by_every_hnsw_search_and_checked(tmp_path):
    from kbcli.errors import InvalidOptionError
    from kbcli.stores.faiss.store import FaissVectorIndex

    np = need("numpy")
    rng = np.random.default_rng(5)
    matrix = rng.standard_normal((3000, 16)).astype("float32")
    ids = np.arange(3000)
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    queries = rng.standard_normal((40, 16)).astype("float32")

    def recall(index: FaissVectorIndex) -> float:
        got = 0
        for q in queries:
            truth = set(np.argsort(-(unit @ q))[:10].tolist())
            got += len({i for i, _ in index.search(q, 10)} & truth)
        return got / (10 * len(queries))

    default = FaissVectorIndex(16, "HNSW8")  # DEFAULT_EF_SEARCH, not FAISS's 16
    default.build(ids, matrix)
    assert recall(default) >= 0.97
    index = FaissVectorIndex(16, "HNSW8", ef_search=1)
    index.build(ids, matrix)
    low = recall(index)
    index.ef_search = 400
    assert recall(index) > low and recall(index) >= 0.99
    # filtered: still k allowed hits at any ef_search
    allowed = ids[ids % 37 == 0].tolist()
    index.ef_search = 1
    hits = index.search(queries[0], 10, allowed)
    assert len(hits) == 10 and all(i % 37 == 0 for i, _ in hits)
    store = FaissStore(index_factory="HNSW32", ef_search=64, path=tmp_path / "kb.db")
    assert store.stats()["vector_index"]["ef_search"] == 64
    store.close()
    for bad in (0, -3, 2.5, True, "64"):
        with pytest.raises(InvalidOptionError):
            FaissVectorIndex(16, "HNSW8", ef_search=bad)


def test_an_unset_ef_search_grows_with_the_graph(monkeypatch):
    """Recall at a fixed ef_search falls as an HNSW graph grows (measured on real embeddings,
    copies held once: 0.979 at 266k vectors with 128, 0.968 at 1M), so unset it grows."""
    from kbcli.stores.faiss import store as faiss_store
    from kbcli.stores.faiss.store import FaissVectorIndex, default_ef_search

    np = need("numpy")
    sizes = [size for size, _ in faiss_store.EF_SEARCH_BY_SIZE]
    assert default_ef_search(0) == default_ef_search(sizes[0]) == faiss_store.DEFAULT_EF_SEARCH
    steps = [default_ef_search(n) for n in (sizes[0], sizes[0] + 1, sizes[-1] + 1, 10**8)]
    assert steps == sorted(steps) and steps[-1] == faiss_store.LARGE_EF_SEARCH > steps[0]
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((500, 16)).astype("float32")
    unset = FaissVectorIndex(16, "HNSW8")
    unset.build(np.arange(500), matrix)
    assert unset.effective_ef_search == default_ef_search(500)
    assert unset._params(None, 10).efSearch == default_ef_search(500)
    assert unset._params(None, 300).efSearch == 300  # never fewer than k
    # the same index counted as large: the larger setting reaches the search
    from kbcli.stores.faiss import index as faiss_index

    monkeypatch.setattr(faiss_index, "EF_SEARCH_BY_SIZE", ((100, 128),))
    assert unset._params(None, 10).efSearch == faiss_store.LARGE_EF_SEARCH
    pinned = FaissVectorIndex(16, "HNSW8", ef_search=64)
    pinned.build(np.arange(500), matrix)
    assert pinned._params(None, 10).efSearch == 64  # a set value is kept at any size


def test_opening_a_faiss_store_for_keyword_search_imports_neither_faiss_nor_numpy(tmp_path):
    import subprocess

    store = FaissStore(path=tmp_path / "kb.db")
    store.add([Document("a", "reset your password here", {"source": "a.md"})], [[1.0] * DIM])
    store.close()
    code = (
        "import sys\n"
        "from kbcli.stores.faiss.store import FaissStore\n"
        f"s = FaissStore(path={str(tmp_path / 'kb.db')!r}, create=False)\n"
        "assert [h.document.id for h in s.keyword_search('password', 3)] == ['a']\n"
        "print(sorted(m for m in ('faiss', 'numpy') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
