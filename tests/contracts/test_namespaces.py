"""Two namespaces in one place (two Chroma collections in one folder, two PostgreSQL tables
in one database) never see or change each other.

Namespace A holds documents whose ids, sources, file records and cached texts are those B uses,
with other texts, metadata and vectors, plus ids of its own. Every write a store offers is
applied to B in turn and, alike, to a store of the same kind alone in a place of its own: after
each, B answers exactly as the lone store does (documents, counts, keyword and dense scores,
filtered answers, file records, embedding cache, metadata), so B sees none of A's rows or
statistics, and A answers exactly as before, so nothing B does reaches A. The last test checks
the same both ways, directly. (What each store must do at all is the contract suites' job, in
this folder's other files: they are not run again here.)
"""

from __future__ import annotations

import contextlib

import pytest

from extras import need
from kbcli.embedders.base import EmbedderInfo
from kbcli.protocols import VectorWriter, supports
from kbcli.testing._common import INFO
from kbcli.testing.ledger import record
from kbcli.types import Document

# the ids B writes (a1, b1, north, /d/a.md chunks ...) with A's own texts and vectors
A_ROWS = [
    ("a1", "tenant alpha secret one", {"source": "a.md", "tenant": "A", "n": 1}, [1.0, 0.0, 0.0]),
    ("b1", "tenant alpha secret two", {"source": "b.md", "tenant": "A", "n": 3}, [0.0, 1.0, 0.0]),
    ("north", "tenant alpha north", {"side": "left", "tenant": "A"}, [0.0, 1.0, 0.0]),
    ("east", "tenant alpha east", {"side": "left", "tenant": "A"}, [1.0, 0.0, 0.0]),
    ("/d/a.md#one", "one text of tenant alpha", {"source": "/d/a.md"}, [0.5, 0.5, 0.0]),
    ("only-a", "alpha beta one two north", {"source": "x.md", "tenant": "A"}, [0.0, 0.0, 1.0]),
]
A_INFO = EmbedderInfo("contract", "fixed-3", 3)  # A's embedder; B records others (INFO, B_INFO)


def populate(a) -> None:
    a.add([Document(i, t, dict(m)) for i, t, m, _ in A_ROWS], [v for *_, v in A_ROWS])
    a.replace_file(
        record("/d/a.md", 7, ["/d/a.md#one"]),
        [Document("/d/a.md#one", "one text of tenant alpha", {"source": "/d/a.md"})],
        [[0.5, 0.5, 0.0]],
        embedder=A_INFO,
    )
    a.cache_embeddings(INFO, {"alpha": [9.0, 9.0, 9.0], "beta": [8.0, 8.0, 8.0]})


def snapshot(a, words: tuple[str, ...] = ("alpha",)) -> dict:
    """Everything a namespace answers, to compare after another's writes."""
    docs = a.list_all()

    def scored(hits):
        return [(h.document.id, round(h.score, 5)) for h in hits]

    return {
        "docs": [(d.id, d.text, d.metadata, d.embedding) for d in docs],
        "get": [(d.id, d.text) for d in a.get(["a1", "b1", "north", "/d/a.md#one", "only-b"])],
        "iter_filtered": [d.id for d in a.iter_documents({"side": "left"})],
        "count": a.count(),
        "filtered": {t: a.count({"tenant": t}) for t in ("A", "B")},
        "sources": a.sources(),
        "keyword": {w: scored(a.keyword_search(w, k=20)) for w in words},
        "keyword_filtered": {
            w: scored(a.keyword_search(w, k=20, filter={"side": "left"})) for w in words
        },
        "dense": scored(a.search([1.0, 0.2, 0.1], k=20)),
        "dense_filtered": scored(a.search([1.0, 0.2, 0.1], k=20, filter={"side": "left"})),
        "files": {p: (r.sha256, r.chunk_ids) for p, r in a.file_records().items()},
        "cache": {
            info.model: a.cached_embeddings(info, ["alpha", "beta", "gamma", "bravo"])
            for info in (INFO, A_INFO, B_INFO)
        },
        "meta": a.get_meta("namespace-test"),
        "embedder": a.embedder_info,
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
def alone(request, tmp_path):
    """A store of the same kind as ``place``'s, alone in a place of its own."""
    if request.node.callspec.params["place"] == "chroma":
        opened = _chroma(tmp_path / "alone", "tenant-b")
    else:
        prefix = request.getfixturevalue("pg_table")
        opened = _postgres(request.getfixturevalue("pg_dsn"), f"{prefix}_alone")
    yield opened
    opened.close()


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


B_INFO = EmbedderInfo("contract", "other-3", 3)
B_WORDS = ("alpha", "bravo", "north", "one")


def _doc(doc_id: str, text: str, **meta) -> Document:
    return Document(doc_id, text, meta)


def _rolled_back(store) -> None:
    with contextlib.suppress(RuntimeError), store.transaction():
        store.add([_doc("tx", "bravo never kept", tenant="B")], [[1.0, 0.0, 0.0]])
        raise RuntimeError("roll back")


# Every write of the store protocols, on the ids, sources, files and cached texts A holds.
WRITES = [
    ("add", lambda s: s.add(
        [_doc("a1", "bravo one north", source="a.md", tenant="B", side="left"),
         _doc("b1", "bravo two", source="b.md", tenant="B"),
         _doc("north", "bravo north alpha", side="left", tenant="B"),
         _doc("only-b", "bravo alone", source="y.md", tenant="B")],
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.3, 0.3, 0.3], [0.0, 0.0, 1.0]],
    )),
    ("add again (upsert)", lambda s: s.add(
        [_doc("b1", "bravo two again north", source="b.md", tenant="B", side="left")],
        [[0.2, 0.9, 0.1]],
    )),
    ("replace_source", lambda s: s.replace_source(
        "y.md", [_doc("only-b", "bravo alone replaced", source="y.md", tenant="B")],
        [[0.1, 0.0, 0.9]],
    )),
    ("replace_file", lambda s: s.replace_file(
        record("/d/a.md", 3, ["/d/a.md#one"]),
        [_doc("/d/a.md#one", "one bravo file text", source="/d/a.md", tenant="B")],
        [[0.4, 0.4, 0.2]], embedder=INFO,
    )),
    ("replace_files", lambda s: s.replace_files([
        (record("/d/b.md", 2, ["/d/b.md#one"]),
         [_doc("/d/b.md#one", "bravo second file", source="/d/b.md", tenant="B")],
         [[0.0, 0.5, 0.5]], INFO),
    ])),
    ("touch_file", lambda s: s.touch_file(record("/d/b.md", 2, ["/d/b.md#one"]))),
    ("cache_embeddings", lambda s: s.cache_embeddings(
        INFO, {"alpha": [7.0, 7.0, 7.0], "bravo": [6.0, 6.0, 6.0]}
    )),
    ("set_vectors", lambda s: supports(s, VectorWriter) and s.set_vectors(
        {"b1": [0.0, 0.8, 0.2]}
    )),
    ("set_meta", lambda s: s.set_meta("namespace-test", "B")),
    ("rebuild_keyword_index", lambda s: s.rebuild_keyword_index()),
    ("checkpoint and prepare_search", lambda s: (s.checkpoint(), s.prepare_search())),
    ("a rolled-back transaction", lambda s: _rolled_back(s)),
    ("remove", lambda s: s.remove(["north"])),
    ("delete", lambda s: s.delete(["east"])),  # an id only A holds
    ("delete_source", lambda s: s.delete_source("a.md")),
    ("delete_where", lambda s: s.delete_where({"tenant": "A"})),  # none of B's
    ("delete_where B", lambda s: s.delete_where({"side": "left"})),
    ("reembed", lambda s: s.reembed(
        lambda texts: [[float(len(t) % 3), 1.0, 0.5] for t in texts], B_INFO
    )),
]  # fmt: skip


def test_every_write_to_b_answers_as_alone_and_leaves_a_unchanged(place, neighbour, alone):
    before = snapshot(neighbour)
    b = place("tenant-b")
    try:
        for name, write in WRITES:
            write(b)
            write(alone)
            assert snapshot(b, B_WORDS) == snapshot(alone, B_WORDS), f"B differs after {name}"
            assert snapshot(neighbour) == before, f"{name} on B changed A"
        b.close()
        b = place("tenant-b")  # reopened, B still answers as the lone store
        assert snapshot(b, B_WORDS) == snapshot(alone, B_WORDS)
    finally:
        b.close()


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
