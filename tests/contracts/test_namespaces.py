"""Every contract suite on a namespace B beside a populated namespace A in the same place: two
Chroma collections in one folder, two PostgreSQL tables in one database.

Namespace A holds documents whose ids, sources, file records and cached texts are those the
suites use, with other texts, metadata and vectors, plus ids of its own: a B that saw any of
A's rows fails the suites' exact counts and lists, and after every test A must be exactly as it
was (documents, vectors, keyword and dense answers, filtered answers, file records, embedding
cache), so nothing B does — add, delete by id, by source or by filter, replace, rebuild —
reaches A. The last tests check the same both ways, directly.
"""

from __future__ import annotations

import pytest

from extras import need
from kbcli.embedders.base import EmbedderInfo
from kbcli.testing import (
    DocumentCatalogContract,
    EmbeddingCacheContract,
    FileLedgerContract,
    FilterDifferentialContract,
    KeywordIndexContract,
    PersistenceContract,
    RoutesContract,
    VectorStoreContract,
    reopener,
)
from kbcli.testing._common import INFO
from kbcli.testing.ledger import record
from kbcli.types import Document

# ids the suites use (a1, b1, north, /d/a.md chunks ...) with A's own texts and vectors
A_ROWS = [
    ("a1", "tenant alpha secret one", {"source": "a.md", "tenant": "A", "n": 1}, [1.0, 0.0, 0.0]),
    ("b1", "tenant alpha secret two", {"source": "b.md", "tenant": "A", "n": 3}, [0.0, 1.0, 0.0]),
    ("north", "tenant alpha north", {"side": "left", "tenant": "A"}, [0.0, 1.0, 0.0]),
    ("east", "tenant alpha east", {"side": "left", "tenant": "A"}, [1.0, 0.0, 0.0]),
    ("/d/a.md#one", "one text of tenant alpha", {"source": "/d/a.md"}, [0.5, 0.5, 0.0]),
    ("only-a", "alpha beta one two north", {"source": "x.md", "tenant": "A"}, [0.0, 0.0, 1.0]),
]
A_INFO = EmbedderInfo("contract", "fixed-3", 3)  # the suites' embedder: a shared cache would clash


def populate(a) -> None:
    a.add([Document(i, t, dict(m)) for i, t, m, _ in A_ROWS], [v for *_, v in A_ROWS])
    a.replace_file(
        record("/d/a.md", 7, ["/d/a.md#one"]),
        [Document("/d/a.md#one", "one text of tenant alpha", {"source": "/d/a.md"})],
        [[0.5, 0.5, 0.0]],
        embedder=A_INFO,
    )
    a.cache_embeddings(INFO, {"alpha": [9.0, 9.0, 9.0], "beta": [8.0, 8.0, 8.0]})


def snapshot(a) -> dict:
    """Everything A answers, to compare after B's test."""
    docs = a.list_all()
    return {
        "docs": [(d.id, d.text, d.metadata, d.embedding) for d in docs],
        "count": a.count(),
        "filtered": a.count({"tenant": "A"}),
        "sources": a.sources(),
        "keyword": [(h.document.id, round(h.score, 6)) for h in a.keyword_search("alpha", k=20)],
        "dense": [h.document.id for h in a.search([1.0, 0.2, 0.1], k=20)],
        "dense_filtered": [
            h.document.id for h in a.search([1.0, 0.2, 0.1], k=20, filter={"side": "left"})
        ],
        "files": {p: (r.sha256, r.chunk_ids) for p, r in a.file_records().items()},
        "cache": a.cached_embeddings(INFO, ["alpha", "beta", "gamma"]),
    }


def _chroma(folder, collection):
    from kbcli.stores.chroma.store import ChromaStore

    return ChromaStore(folder, collection=collection, busy_timeout=0.05)


def _postgres(dsn, table):
    from kbcli.stores.postgres import PostgresStore

    return PostgresStore(dsn, table, busy_timeout=10.0)


@pytest.fixture(params=["chroma", "postgres"])
def place(request, tmp_path):
    """``open(name)``: a store of namespace ``name`` in one shared place."""
    if request.param == "chroma":
        need("chromadb")
        folder = tmp_path / "chroma"
        return lambda name: _chroma(folder, name)
    dsn = request.getfixturevalue("pg_dsn")
    prefix = request.getfixturevalue("pg_table")
    return lambda name: _postgres(dsn, f"{prefix}_{name.replace('-', '_')}")


@pytest.fixture
def neighbour(place):
    """Namespace A, populated, and what it answered before B's test."""
    a = place("tenant-a")
    populate(a)
    before = snapshot(a)
    yield a
    try:
        assert snapshot(a) == before, "namespace B's test changed namespace A"
    finally:
        a.close()


@pytest.fixture
def store(place, neighbour):
    opened = place("tenant-b")
    yield opened
    opened.close()


@pytest.fixture
def reopen(store, place):
    yield from reopener(store, lambda old: place("tenant-b"))


class TestVectorStore(VectorStoreContract):
    pass


class TestCatalog(DocumentCatalogContract):
    pass


class TestKeyword(KeywordIndexContract):
    pass


class TestFileLedger(FileLedgerContract):
    pass


class TestFilterDifferential(FilterDifferentialContract):
    pass


class TestEmbeddingCache(EmbeddingCacheContract):
    pass


class TestRoutes(RoutesContract):
    pass


class TestPersistence(PersistenceContract):
    pass


def test_neither_namespace_sees_the_other(place):
    """Each way: listing, counting, keyword, dense and filtered search, file records, cache and
    deletes by id, by source and by filter stay inside one namespace."""
    a, b = place("tenant-a"), place("tenant-b")
    try:
        populate(a)
        b.add(
            [Document("a1", "tenant bravo private", {"source": "a.md", "tenant": "B"}),
             Document("only-b", "bravo private", {"source": "y.md", "tenant": "B"})],
            [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]],
        )  # fmt: skip
        for mine, other, own, tenant, word in (
            (a, b, "only-a", "A", "alpha"),
            (b, a, "only-b", "B", "bravo"),
        ):
            ids = {d.id for d in mine.list_all()}
            assert own in ids and ("only-b" if mine is a else "only-a") not in ids
            assert mine.count({"tenant": "B" if mine is a else "A"}) == 0
            assert mine.count() == len(ids)
            assert mine.get(["a1"])[0].metadata["tenant"] == tenant
            assert not other.keyword_search(word, k=10)
            dense = other.search([1.0, 0.0, 0.0], k=10)
            assert all(h.document.metadata.get("tenant") != tenant for h in dense)
            assert not other.search([0.0, 0.0, 1.0], k=10, filter={"tenant": tenant})
        assert "/d/a.md" in a.file_records() and not b.file_records()
        assert not b.cached_embeddings(INFO, ["alpha"])
        # deletes through B never reach A
        b.delete(["a1"])
        assert b.delete_source("a.md") == 0 and b.delete_where({"tenant": "A"}) == 0
        assert a.get(["a1"])[0].text == "tenant alpha secret one"
        assert a.delete_where({"tenant": "A"}) == 5
        assert [d.id for d in b.list_all()] == ["only-b"]
    finally:
        a.close()
        b.close()
