import asyncio

import pytest

from kbcli import (
    Document,
    IngestPipeline,
    InMemoryStore,
    KnowledgeBase,
    PassthroughReranker,
    RAGPipeline,
    SearchOptions,
    SearchResult,
    SimpleEmbedder,
    SQLiteStore,
)


class CountingRetriever:
    def __init__(self, n):
        self.n = n
        self.asked = []

    def search(self, query, k=5, options=None):
        self.asked.append(k)
        return [
            SearchResult(Document(f"d{i}", f"text {i}"), 1.0 - i / 100)
            for i in range(min(k, self.n))
        ]


class ReverseReranker:
    def rerank(self, query, results):
        return list(reversed(results))


def test_rag_pipeline_reranks_a_wider_pool_then_cuts_to_k():
    retriever = CountingRetriever(100)
    hits = RAGPipeline(retriever, ReverseReranker()).search("q", SearchOptions(k=3))
    assert retriever.asked == [50] and len(hits) == 3  # rag.rerank.candidates default
    assert [h.document.id for h in hits] == ["d49", "d48", "d47"]
    retriever = CountingRetriever(100)
    RAGPipeline(retriever, ReverseReranker()).search("q", SearchOptions(k=30))
    assert retriever.asked == [60]  # never below 2 x k


def test_rag_pipeline_without_reranker_and_min_score():
    retriever = CountingRetriever(10)
    hits = RAGPipeline(retriever).search("q", SearchOptions(k=5, min_score=0.975))
    assert retriever.asked == [5] and [h.document.id for h in hits] == ["d0", "d1", "d2"]
    assert PassthroughReranker().rerank("q", hits) == hits


def test_ingest_text_chunks_with_config_limits(tmp_path):
    (tmp_path / "cwd" / "jianmu.yaml").write_text(
        "limits: {chunk_size: 40, chunk_overlap: 0}\nrag: {chunker: simple}\n"
    )
    store = InMemoryStore()
    pipe = IngestPipeline(store=store)
    ids = pipe.ingest_text("word " * 50, {"tag": "x"})
    docs = store.get(ids)
    assert len(docs) == len(ids) > 3
    assert all(len(d.text) <= 40 for d in docs)
    assert [d.metadata["chunk_index"] for d in docs] == list(range(len(docs)))
    assert all(d.metadata["tag"] == "x" and d.embedding for d in docs)


def test_ingest_file_sets_source_and_replaces_previous_chunks(tmp_path):
    f = tmp_path / "guide.md"
    f.write_text("# Setup\n\nInstall the tool.\n\n## Linux\n\nUse apt to install it.\n")
    store = SQLiteStore(tmp_path / "kb.db")
    kb = KnowledgeBase(store=store)
    first = kb.ingest_file(f, {"team": "ops"})
    docs = store.get(first)
    assert {d.metadata["source"] for d in docs} == {str(f.resolve())}
    assert any(d.metadata.get("heading") == "Setup > Linux" for d in docs)
    f.write_text("# Setup\n\nCompletely new content.\n")
    second = kb.ingest_file(f)
    assert store.get(first) == [] and store.count() == len(second)


def test_knowledge_base_defaults_add_and_search():
    kb = KnowledgeBase()
    assert isinstance(kb.store, InMemoryStore) and isinstance(kb.embedder, SimpleEmbedder)
    a = kb.add(
        "To reset your password open Settings and choose Reset password.", {"source": "help.md"}
    )
    kb.add("The weather tomorrow will be sunny.", id="w1")
    hits = kb.search("reset password", k=1, mode="keyword")
    assert hits[0].document.id == a
    assert kb.search("weather", mode="hybrid", k=2)[0].document.id == "w1"
    assert list(kb.search("sunny", filter={"source": "help.md"}, mode="keyword")) == []
    assert kb.delete(["w1"]) and not kb.delete(["w1"])


def test_knowledge_base_open_is_persistent_and_keyword_needs_no_embedder(tmp_path, monkeypatch):
    db = tmp_path / "kb.db"
    kb = KnowledgeBase.open(db, embedder=SimpleEmbedder())
    kb.add("password reset instructions")
    kb.close()
    from kbcli import pipeline

    def no_embedder(*a, **k):
        raise AssertionError("keyword search must not resolve an embedder")

    monkeypatch.setattr(pipeline.LazyEmbedder, "resolved", property(no_embedder))
    reopened = KnowledgeBase.open(db)
    assert (
        reopened.search("password", mode="keyword")[0].document.text
        == "password reset instructions"
    )


def test_tool_contract():
    kb = KnowledgeBase()
    kb.add("Reset a password from the account page.", {"source": "/docs/account.md"})
    kb.add("Unrelated cooking recipe.")
    tool = kb.as_tool()
    assert tool.name == "knowledge_search" and tool.description
    schema = tool.input_schema
    assert schema["required"] == ["query"] and schema["properties"]["k"]["default"] == 3
    assert set(schema["properties"]["mode"]["enum"]) == {"keyword", "semantic", "hybrid"}
    out = asyncio.run(tool.run("reset password", k=1, mode="keyword"))
    doc_id = kb.search("reset password", k=1, mode="keyword")[0].document.id
    assert out == (
        f"1. Reset a password from the account page. (source: /docs/account.md; id: {doc_id})"
    )
    assert asyncio.run(tool.run(input="cooking recipe", mode="keyword")).startswith("1. Unrelated")
    assert asyncio.run(tool.run("")) == "Error: No query provided"
    assert asyncio.run(tool.run()) == "Error: No query provided"
    assert asyncio.run(tool.run("zzzqqq", mode="keyword")) == "No relevant knowledge found."


def test_tool_over_a_rag_pipeline():
    from kbcli import KnowledgeSearchTool

    tool = KnowledgeSearchTool(RAGPipeline(CountingRetriever(5)))
    out = asyncio.run(tool.run("anything", k=2))
    assert out.splitlines() == ["1. text 0 (id: d0)", "2. text 1 (id: d1)"]


def test_protocols_are_satisfied():
    from kbcli import (
        DocumentLoaderProtocol,
        EmbedderProtocol,
        RerankerProtocol,
        RetrieverProtocol,
        TextChunkerProtocol,
        TextNormalizerProtocol,
        VectorStoreProtocol,
    )
    from kbcli.ingest import DefaultDocumentLoader, SimpleTextChunker, WhitespaceNormalizer

    kb = KnowledgeBase()
    assert isinstance(kb.embedder, EmbedderProtocol)
    assert isinstance(kb.store, VectorStoreProtocol)
    assert isinstance(kb.retriever, RetrieverProtocol)
    assert isinstance(PassthroughReranker(), RerankerProtocol)
    assert isinstance(DefaultDocumentLoader(), DocumentLoaderProtocol)
    assert isinstance(WhitespaceNormalizer(), TextNormalizerProtocol)
    assert isinstance(SimpleTextChunker(), TextChunkerProtocol)


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_search_modes_on_sqlite(tmp_path, mode):
    kb = KnowledgeBase(store=SQLiteStore(tmp_path / "kb.db"))
    kb.ingest_text("How to reset a forgotten password step by step.", {"source": "a"})
    kb.ingest_text("Tomorrow's weather forecast: sunny and warm.", {"source": "b"})
    hits = kb.search("reset password", k=1, mode=mode)
    assert hits and hits[0].document.metadata["source"] == "a"


def test_tool_access_filter_cannot_be_widened():
    from kbcli import KnowledgeSearchTool

    kb = KnowledgeBase()
    kb.add("public password reset guide", {"team": "public"})
    kb.add("secret password vault keys", {"team": "secret"})
    tool = KnowledgeSearchTool(kb, access_filter={"team": "public"})
    out = asyncio.run(tool.run("password", k=5, mode="keyword"))
    assert "public" in out and "secret" not in out
    widened = asyncio.run(
        tool.run("password", k=5, mode="keyword", filter={"$or": [{"team": "secret"}, {}]})
    )
    assert "secret" not in widened
    narrowed = asyncio.run(tool.run("password", mode="keyword", filter={"team": "secret"}))
    assert narrowed == "No relevant knowledge found."


def test_unconfigured_index_keeps_the_embedder_it_was_built_with(tmp_path, monkeypatch):
    db = tmp_path / "kb.db"
    notes = []
    kb = KnowledgeBase.open(db, on_note=notes.append)
    kb.add("reset the password from settings")
    assert kb.store.embedder_info.provider == "simple"
    assert "simple" in notes[0]
    kb.close()
    # A key appears later (say, set for another tool): the index must not switch embedders.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    notes.clear()
    kb = KnowledgeBase.open(db, on_note=notes.append)
    hits = kb.search("password settings", mode="semantic", k=1)
    assert hits and "built with" in notes[0]
    assert kb.embedder.info.provider == "simple"


def test_open_takes_ranking_weights_from_the_given_config(tmp_path):
    from dataclasses import replace

    from kbcli import KnowledgeBase
    from kbcli.config.lookup import Config, LimitsConfig

    config = replace(Config(), limits=LimitsConfig(rerank_alpha=0.3, source_weight=0.0))
    kb = KnowledgeBase.open(tmp_path / "kb.db", config=config)
    try:
        assert kb.retriever.default_alpha() == 0.3
        assert kb.retriever.keyword.default_source_weight() == 0.0
    finally:
        kb.close()
