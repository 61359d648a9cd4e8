"""The allowed-rowid cache (``catalog.AllowedRowids``): a selective filter's allowed set is read
from the table once per database generation and shared by dense and keyword search, and never
outlives a write, whether this store or another process made it.

A filter that 3 of 6,000 chunks pass: dense search walks its ranking in windows of up to 4,096
ids, finds fewer than k, and falls back to the allowed set. Real SQLite files, real FAISS and
Chroma indexes; ``scans`` counts the reads of the chunks table.
"""

from __future__ import annotations

import random

import pytest

from extras import need
from kbcli import SQLiteStore
from kbcli.types import Document

N = 6000
DIM = 16
TEAM = {"team": "x"}


def vector(rng: random.Random) -> list[float]:
    return [rng.uniform(-1, 1) for _ in range(DIM)]


def sqlite_store(path):
    return SQLiteStore(path / "kb.db")


def faiss_store(path):
    from kbcli.stores.faiss.store import FaissStore

    need("faiss")
    return FaissStore(path=path / "kb.db", index_factory="HNSW32")


def chroma_store(path):
    need("chromadb")
    from kbcli.stores.chroma.store import ChromaStore

    return ChromaStore(path / "chroma")


# Chroma runs what its ``where`` can express itself; $exists takes the exact, catalog route.
CASES = [
    (sqlite_store, TEAM),
    (faiss_store, TEAM),
    (chroma_store, {"team": {"$exists": True}}),
]


def filled(make, tmp_path):
    rng = random.Random(5)
    store = make(tmp_path)
    docs = []
    for i in range(N):
        meta = {"source": f"/d/{i % 600}.md", **(TEAM if i in (10, 3000, 5990) else {})}
        docs.append(Document(f"c{i}", f"note {i} about item {i % 97}", meta))
    store.add(docs, [vector(rng) for _ in docs])
    return store, rng


def ids(hits) -> list[str]:
    return sorted(h.document.id for h in hits)


@pytest.mark.slow
@pytest.mark.parametrize("make, flt", CASES, ids=["sqlite", "faiss-hnsw", "chroma"])
def test_the_allowed_set_is_read_once_per_generation_and_never_stale(make, flt, tmp_path):
    store, rng = filled(make, tmp_path)
    try:
        query = vector(rng)
        assert ids(store.search(query, k=5, filter=flt)) == ["c10", "c3000", "c5990"]
        assert store._allowed.scans == 1
        for _ in range(3):
            assert ids(store.search(vector(rng), k=5, filter=flt)) == ["c10", "c3000", "c5990"]
        assert store._allowed.scans == 1  # the same filter, the same generation

        store.add([Document("n1", "a new team note", {"source": "/d/new.md", **TEAM})],
                  [query])  # fmt: skip
        assert ids(store.search(query, k=5, filter=flt)) == ["c10", "c3000", "c5990", "n1"]
        assert store._allowed.scans == 2
        store.delete(["c3000"])
        assert ids(store.search(query, k=5, filter=flt)) == ["c10", "c5990", "n1"]
        assert store._allowed.scans == 3
    finally:
        store.close()


def test_another_process_write_is_seen(tmp_path):
    """The generation is read in each search's snapshot: a write through another connection
    (another process's, as far as SQLite is concerned) makes the kept set stale."""
    store, rng = filled(sqlite_store, tmp_path)
    other = SQLiteStore(store.path)
    try:
        query = vector(rng)
        assert ids(store.search(query, k=5, filter=TEAM)) == ["c10", "c3000", "c5990"]
        other.add([Document("o1", "from elsewhere", {"source": "/e.md", **TEAM})], [query])
        assert ids(store.search(query, k=5, filter=TEAM)) == ["c10", "c3000", "c5990", "o1"]
        other.delete(["c10"])
        assert ids(store.search(query, k=5, filter=TEAM)) == ["c3000", "c5990", "o1"]
        assert store._allowed.scans == 3
    finally:
        other.close()
        store.close()


@pytest.mark.slow
def test_keyword_and_dense_search_share_it(tmp_path):
    """A filter's bitmap in the keyword index is built from the same kept set as dense
    search's fallback: one read of the table for both (a hybrid search asks for both)."""
    store, rng = filled(sqlite_store, tmp_path)
    try:
        assert ids(store.search(vector(rng), k=5, filter=TEAM)) == ["c10", "c3000", "c5990"]
        assert store._allowed.scans == 1
        for _ in range(2):  # the second search with a filter builds the keyword bitmap
            hits = store.keyword_search("note item", k=5, filter=TEAM)
            assert ids(hits) == ["c10", "c3000", "c5990"]
        assert store._allowed.scans == 1
    finally:
        store.close()


def test_the_cache_keeps_the_most_recent_filters(tmp_path):
    store, rng = filled(sqlite_store, tmp_path)
    try:
        query = vector(rng)
        size = store._allowed.size
        filters = [{"team": "x", "n": {"$ne": i}} for i in range(size + 1)]
        for flt in filters:
            store.search(query, k=5, filter=flt)
        assert store._allowed.scans == size + 1
        store.search(query, k=5, filter=filters[-1])  # kept
        assert store._allowed.scans == size + 1
        store.search(query, k=5, filter=filters[0])  # the oldest went first
        assert store._allowed.scans == size + 2
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("make", [sqlite_store, faiss_store], ids=["sqlite", "faiss-hnsw"])
def test_a_kept_selective_set_skips_the_walk(make, tmp_path, monkeypatch):
    """Once a selective filter's set is kept, dense search ranks that set directly instead of
    checking windows of the ranking in SQL (about 0.2 s per search at 100k chunks); FAISS
    skips its first look at the nearest."""
    from kbcli.stores.sqlite import catalog

    store, rng = filled(make, tmp_path)
    checks = []
    real = catalog.passing
    monkeypatch.setattr(catalog, "passing", lambda *a: checks.append(1) or real(*a))
    try:
        store.search(vector(rng), k=5, filter=TEAM)
        assert checks  # the first search walked, then read the set
        checks.clear()
        for _ in range(3):
            query = vector(rng)
            hits = store.search(query, k=2, filter=TEAM)
            assert checks == []
            # the exact top 2 of the allowed chunks, as an unfiltered exact ranking orders them
            full = [h.document.id for h in store.search(query, k=N)]
            assert [h.document.id for h in hits] == [
                i for i in full if i in {"c10", "c3000", "c5990"}
            ][:2]
    finally:
        store.close()
