"""``kbcli.protocols.supports``: what ``isinstance`` on a runtime-checkable protocol answers,
asked of the class, so a capability check never evaluates a property (on Python 3.10/3.11
``isinstance`` does: an SQLite store ran six statements per ``DocumentCatalog`` check)."""

from __future__ import annotations

import inspect
import sqlite3
import typing

import pytest

from kbcli import protocols
from kbcli.embedders import SimpleEmbedder
from kbcli.ingest import (
    DefaultDocumentLoader,
    SimpleTextChunker,
    StructureAwareChunker,
    WhitespaceNormalizer,
)
from kbcli.pipeline import KnowledgeBase
from kbcli.protocols import DocumentCatalog, protocol_members, supports
from kbcli.search.retrievers import DenseRetriever
from kbcli.stores import InMemoryStore, SQLiteStore, capabilities
from kbcli.types import Document

PROTOCOLS = [
    value
    for _, value in inspect.getmembers(protocols, inspect.isclass)
    if getattr(value, "_is_runtime_protocol", False)
    and value.__module__ in (protocols.__name__, capabilities.__name__)
]


def typing_members(protocol: type) -> set[str]:
    """The members ``isinstance`` checks, as typing lists them."""
    listed = getattr(protocol, "__protocol_attrs__", None)  # Python 3.12+
    if listed is None:
        listed = typing._get_protocol_attrs(protocol)  # type: ignore[attr-defined]
    return set(listed)


class Listing:
    def list_all(self):
        return []


class OnlySearch:
    def search(self, query_vec, k=5, filter=None):
        return []


class Blocked(InMemoryStore):
    keyword_search = None  # a method switched off, as typing allows


class Chunker:
    def chunk_sections(self, sections):
        return sections


class OwnFlag(Chunker):
    def __init__(self):
        self.normalize_first = False  # a data member set on the instance


class OwnMethod:
    def __init__(self):
        self.embed_documents = lambda texts: [[1.0] for _ in texts]
        self.embed_query = lambda text: [1.0]


class NoneMethod(OwnMethod):
    def __init__(self):
        super().__init__()
        self.embed_query = None


class Slots:
    __slots__ = ("x",)

    def normalize(self, text):
        return text


class Nominal(protocols.Doctor):  # a class that says it implements the protocol
    pass


@pytest.fixture
def objects(tmp_path):
    sqlite = SQLiteStore(tmp_path / "kb.db")
    made = [
        sqlite,
        InMemoryStore(),
        Listing(),
        OnlySearch(),
        Blocked(),
        Chunker(),
        OwnFlag(),
        OwnMethod(),
        NoneMethod(),
        Slots(),
        Nominal(),
        SimpleEmbedder(),
        SimpleTextChunker(),
        StructureAwareChunker(),
        WhitespaceNormalizer(),
        DefaultDocumentLoader(),
        KnowledgeBase(),
        object(),
        "text",
    ]
    yield made
    sqlite.close()


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_the_members_are_the_ones_isinstance_checks(protocol):
    assert {name for name, _ in protocol_members(protocol)} == typing_members(protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_supports_answers_as_isinstance_does(objects, protocol):
    for obj in objects:
        assert supports(obj, protocol) == isinstance(obj, protocol), (type(obj), protocol)


def test_no_property_is_evaluated():
    reads = []

    def read(name):
        def get(self):
            reads.append(name)
            raise AssertionError(f"a capability check read {name}")

        return property(get)

    members = {
        name: (lambda self, *a, **k: None) if is_method else read(name)
        for name, is_method in protocol_members(DocumentCatalog)
    }
    store = type("Store", (), members)()
    assert {"version", "embedder_info"} <= set(members)
    assert supports(store, DocumentCatalog)
    assert supports(store, DocumentCatalog)  # the second answer comes from the cache
    assert reads == []


def _statements(store: SQLiteStore) -> list[str]:
    seen: list[str] = []
    conns = [v for v in vars(store._db).values() if isinstance(v, sqlite3.Connection)]
    assert conns
    for conn in conns:
        conn.set_trace_callback(seen.append)
    return seen


def test_a_check_on_an_sqlite_store_runs_no_statement(tmp_path):
    store = SQLiteStore(tmp_path / "kb.db")
    store.add([Document("a", "reset the password")], [[1.0, 0.0]])
    seen = _statements(store)
    for protocol in PROTOCOLS:
        supports(store, protocol)
    assert seen == []
    store.close()


def test_a_view_adds_no_statement_to_the_stores_own(tmp_path):
    """A scope's count is the store's count of the narrowed filter, and nothing more (on main
    its DocumentCatalog check read two properties first: six more statements)."""
    kb = KnowledgeBase(store=SQLiteStore(tmp_path / "kb.db"))
    kb.add("reset the password", {"team": "ops"})
    kb.add("water the basil", {"team": "garden"})
    view = kb.scoped({"team": "ops"})
    seen = _statements(kb.store)
    assert kb.store.count(view.narrow(None)) == 1
    direct = list(seen)
    seen.clear()
    assert view.count() == 1
    assert seen == direct
    kb.close()


def test_a_dense_search_runs_only_the_stores_statements(tmp_path):
    store = SQLiteStore(tmp_path / "kb.db")
    embedder = SimpleEmbedder()
    store.add([Document("a", "reset the password")], embedder.embed_documents(["reset"]))
    retriever = DenseRetriever(store, embedder)
    retriever.search("password", 1)  # warm: the matrix cache is built
    seen = _statements(store)
    store.check_embedder(embedder.info)
    store.search(embedder.embed_query("password"), 1, None)
    direct = list(seen)
    seen.clear()
    assert [h.document.id for h in retriever.search("password", 1)] == ["a"]
    assert seen == direct
    store.close()
