"""Access scopes: ``KnowledgeBase.scoped`` and tools over it never show a document outside the
scope, on any route, whatever the caller sends."""

from __future__ import annotations

import itertools

import pytest

import tenants as shared
from kbcli import FilterError, KnowledgeBase, SimpleEmbedder, SQLiteStore
from kbcli.agent.tools.read import NO_CHUNK, NO_FILE, knowledge_tools
from kbcli.knowledge_base import ScopedKnowledgeBase, join_chunks
from kbcli.types import Document, SearchResult

MODES = ("keyword", "semantic", "hybrid")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return shared.build(tmp_path_factory.mktemp("tenants"))


@pytest.fixture(params=["sqlite", "memory"])
def kb(setup, request):
    sqlite = SQLiteStore(setup.db)
    if request.param == "sqlite":
        store = sqlite
    else:  # the same documents and vectors in an InMemoryStore
        from kbcli import InMemoryStore

        store = InMemoryStore()
        docs = list(sqlite.iter_documents(with_embeddings=True))
        store.add(docs, [d.embedding for d in docs], embedder=sqlite.embedder_info)
        sqlite.close()
    kb = KnowledgeBase(store=store, embedder=SimpleEmbedder())
    yield kb
    kb.close()


def test_scoped_needs_a_real_filter(kb):
    with pytest.raises(FilterError):
        kb.scoped({})
    with pytest.raises(FilterError):
        kb.scoped({"tenant": {"$regex": "a"}})
    view = kb.scoped(shared.SCOPE)
    assert isinstance(view, ScopedKnowledgeBase) and view.filter == shared.SCOPE


def test_search_on_every_route_stays_inside(kb, setup):
    view = kb.scoped(shared.SCOPE)
    for query, mode, mmr in itertools.product(
        ["password reset", "zebracanary", "invoices vpn backups"], MODES, [None, 0.3]
    ):
        hits = view.search(query, k=50, mode=mode, mmr=mmr)
        assert all(h.document.metadata["tenant"] == "acme" for h in hits), (query, mode, mmr)
        assert not setup.leaks(" ".join(h.document.id + h.document.text for h in hits))
    # the unscoped index does hold the forbidden near-copies
    assert setup.leaks(" ".join(h.document.text for h in kb.search("zebracanary", k=50)))


def test_the_caller_filter_only_narrows(kb):
    view = kb.scoped(shared.SCOPE)
    assert view.search("password", k=50, mode="keyword", filter={"tenant": "globex"}) == []
    widened = view.search(
        "password", k=50, mode="keyword", filter={"$or": [{"tenant": "globex"}, {}]}
    )
    assert widened and all(h.document.metadata["tenant"] == "acme" for h in widened)
    narrower = view.scoped({"page": 1})
    assert [d.metadata["page"] for d in narrower.list()] == [1]


def test_reranker_only_sees_the_scope(setup):
    seen: list[SearchResult] = []

    class Recorder:
        def rerank(self, query, results):
            seen.extend(results)
            return list(reversed(results))

    kb = KnowledgeBase(store=SQLiteStore(setup.db), embedder=SimpleEmbedder(), reranker=Recorder())
    try:
        for mode in MODES:
            hits = kb.scoped(shared.SCOPE).search("password invoices zebracanary", k=3, mode=mode)
            assert len(hits) == 3
    finally:
        kb.close()
    assert seen and all(r.document.metadata["tenant"] == "acme" for r in seen)


def test_hidden_chunks_do_not_lift_their_source(kb):
    # /acme/doc0.md holds acme's chunk and a hidden initech chunk repeating its words; under
    # the scope the source part of the score counts only acme's chunk.
    view = kb.scoped(shared.SCOPE)
    hit = next(
        h
        for h in view.search("reset password settings", k=20, mode="keyword", explain=True)
        if h.document.metadata["source"] == "/acme/doc0.md"
    )
    parts = hit.explain["keyword"]
    unscoped = kb.search("reset password settings", k=50, mode="keyword", explain=True)
    lifted = next(h for h in unscoped if h.document.id == hit.document.id)
    assert lifted.explain["keyword"]["bm25_source"] > parts["bm25_source"]


def test_get_list_count_stats_and_files(kb, setup):
    view = kb.scoped(shared.SCOPE)
    allowed, hidden = setup.allowed_ids[0], setup.forbidden_ids[0]
    assert [d.id for d in view.get([hidden, allowed, "nope"])] == [allowed]
    assert view.get([hidden]) == view.get(["no-such-id"]) == []
    assert {d.id for d in view.list()} == set(setup.allowed_ids)
    assert view.count() == len(setup.allowed_ids)
    assert view.count({"page": 1}) == 1
    assert all(source.startswith(("/acme/", setup.acme_file)) for source, _ in view.sources())
    stats = view.stats()
    assert stats["chunks"] == len(setup.allowed_ids) and stats["scoped"] is True
    assert stats["sources"] == len(shared.ACME_TEXTS) + 1
    assert stats["embedder"]["provider"] == "simple"
    source, text = view.file_text(setup.acme_file)
    assert source == setup.acme_file and "Section 8" in text and not setup.leaks(text)
    from kbcli import NotFoundError

    with pytest.raises(NotFoundError) as hidden_file:
        view.file_text(setup.globex_file)
    with pytest.raises(NotFoundError) as unknown_file:
        view.file_text("/no/such/file.md")
    assert str(hidden_file.value).replace(setup.globex_file, "P") == str(
        unknown_file.value
    ).replace("/no/such/file.md", "P")


def test_join_chunks_keeps_each_overlap_once():
    from kbcli.ingest import SimpleTextChunker

    text = "".join(f"word{n} " for n in range(200))
    chunks = SimpleTextChunker(120, 30).chunk(text)
    docs = [Document(str(n), c, {"chunk_index": n}) for n, c in enumerate(chunks)]
    assert join_chunks(list(reversed(docs))) == text


def test_python_tools_sweep(kb, setup):
    """Hundreds of searches across modes, every k, crafted arguments: nothing leaks."""
    search, get, stats = knowledge_tools(kb, filter=shared.SCOPE)
    calls = 0
    outputs = []
    queries = shared.queries()
    ks = itertools.cycle(range(1, search.max_k + 1))
    for query, mode in itertools.product(queries, MODES):
        result = search.call({"query": query, "k": next(ks), "mode": mode})
        outputs.append(result.text)
        assert not result.is_error or query == "a" * 300, result.text
        calls += 1
    for crafted, mode, query in itertools.product(
        shared.CRAFTED, MODES, ["password invoices zebracanary", "quokkasecret"]
    ):
        result = search.call({"query": query, "mode": mode, **crafted})
        outputs.append(result.text)
        calls += 1
    for doc_id in setup.forbidden_ids:
        result = get.call({"id": doc_id})
        assert result.is_error and result.text == NO_CHUNK
        outputs.append(result.text)
    for path in (setup.globex_file, "/globex/doc0.md", "/globex/zebracanary.md"):
        result = get.call({"path": path})
        assert result.is_error and result.text == NO_FILE
    outputs.append(stats.call({}).text)
    outputs.append(get.call({"path": setup.acme_file}).text)
    outputs += [get.call({"id": i}).text for i in setup.allowed_ids]
    assert calls > 500
    leaks = [(text, setup.leaks(text)) for text in outputs if setup.leaks(text)]
    assert leaks == []
    # ...and the sweep did find things: the scope is not simply empty.
    assert sum(text.startswith("1. ") for text in outputs) > 200


# --- paths in scopes are canonical (issue 37) -------------------------------------------------


@pytest.mark.parametrize(
    "scope",
    [
        {"source": {"$prefix": "/acme/./"}},
        {"source": {"$prefix": "/globex/../acme/"}},
        {"source": {"$prefix": "//acme//"}},
        {"source": {"$in": [f"/acme/sub/../doc{n}.md" for n in range(8)]}},
    ],
    ids=["dot", "dotdot", "slashes", "in"],
)
def test_a_scopes_paths_mean_what_they_name(kb, scope):
    """A scope's ``source`` read as written used to match nothing (``/acme/./``) or, worse,
    what it names lexically but not in fact; it is read in canonical form."""
    view = kb.scoped(scope)
    sources = {source for source, _ in view.sources()}
    assert sources == {f"/acme/doc{n}.md" for n in range(8)}
    hits = view.search("password reset", k=50, mode="keyword")
    assert hits and all(h.document.metadata["source"].startswith("/acme/") for h in hits)
    # a caller's filter is read the same way, and only narrows
    narrowed = view.search(
        "password reset", k=50, mode="keyword", filter={"source": "/acme/x/../doc0.md"}
    )
    assert {h.document.metadata["source"] for h in narrowed} == {"/acme/doc0.md"}
    assert view.count({"source": "/globex/../acme/doc1.md"}) == 2  # acme's and initech's


def test_a_scope_that_excludes_a_path_excludes_it_in_any_spelling(kb):
    view = kb.scoped({"tenant": "acme", "source": {"$ne": "/acme/./doc0.md"}})
    assert "/acme/doc0.md" not in {source for source, _ in view.sources()}
