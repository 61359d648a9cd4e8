"""The reference API where users' code broke before the storage contracts (issue 11), one test
per item."""

from __future__ import annotations

import warnings

import pytest

from fake_providers import FakeServer
from kbcli import (
    Document,
    HybridRetriever,
    IngestPipeline,
    InMemoryStore,
    KnowledgeBase,
    SearchOptions,
    SimpleEmbedder,
    SimpleTextChunker,
    SQLiteStore,
    resolve_embedder,
)
from kbcli.config.lookup import reset_config_cache
from kbcli.config.trust import trust
from kbcli.errors import InvalidOptionError, LoaderError


def test_search_options_read_no_configuration_the_knowledge_base_hands_rerank_alpha_in(tmp_path):
    # issue 38: SearchOptions reads no configuration; from_config gives the retriever the
    # configured limits.rerank_alpha, which applies while the search does not choose one
    assert SearchOptions().alpha == 0.6
    (tmp_path / "cwd" / "jianmu.yaml").write_text("limits: {rerank_alpha: 0.3}\n")
    reset_config_cache()
    options = SearchOptions()
    assert options.alpha == 0.6 and not options.alpha_chosen
    assert SearchOptions(alpha=0.9).alpha_chosen
    kb = KnowledgeBase.from_config()
    try:
        assert kb.retriever.default_alpha() == 0.3
    finally:
        kb.close()


def test_weak_embedder_protection_still_applies_when_alpha_was_not_chosen():
    kb = KnowledgeBase()
    kb.add("alpha beta gamma", {"n": 1})
    kb.add("completely different words", {"n": 2})
    hits = kb.search("alpha", k=2, explain=True)
    assert hits[0].explain["alpha"] < 0.01  # WEAK_DENSE_ALPHA, not the configured 0.6
    chosen = kb.search("alpha", k=2, explain=True, alpha=0.6)
    assert chosen[0].explain["alpha"] == 0.6


def test_resolve_embedder_list_form_takes_the_first_buildable(monkeypatch, tmp_path):
    reset_config_cache()
    # No keys: gemini and openai cannot be built, the list ends at simple.
    assert type(resolve_embedder(["gemini", "openai", "simple"])).__name__ == "SimpleEmbedder"
    assert type(resolve_embedder(["gemini", "openai"])).__name__ == "SimpleEmbedder"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert type(resolve_embedder(["gemini", "openai", "simple"])).__name__ == "OpenAIEmbedder"


def test_a_single_named_provider_still_fails_loudly(monkeypatch, tmp_path):
    reset_config_cache()
    file = tmp_path / "cwd" / "jianmu.yaml"
    file.write_text("rag: {embedding: {provider: gemini}}\n")
    trust(file, file.read_bytes())  # it names a provider: found in the cwd, it needs trust
    reset_config_cache()
    from kbcli.errors import EmbedderError

    with pytest.raises(EmbedderError, match="GOOGLE_API_KEY"):
        resolve_embedder()


def test_mmr_on_the_default_in_memory_store():
    kb = KnowledgeBase()
    for i in range(6):
        kb.add(f"reset your password step {i}", {"i": i})
    kb.add("reset your password step 0", {"copy": True})
    hits = kb.search("reset password", k=3, mmr=0.5)
    assert len(hits) == 3


class ReferenceOnlyStore:
    """Only the reference's add/search/delete."""

    def __init__(self):
        self.inner = InMemoryStore()

    def add(self, docs, embeddings=None):
        return self.inner.add(docs, embeddings)

    def search(self, query_vec, k=5, filter=None):
        return self.inner.search(query_vec, k, filter)

    def delete(self, ids):
        return self.inner.delete(ids)


def test_reference_only_store_gives_semantic_results_with_a_note():
    store = ReferenceOnlyStore()
    kb = KnowledgeBase(store=store)
    kb.add("the vpn password rotates", {"n": 1})
    kb.add("lunch is at noon", {"n": 2})
    with pytest.warns(UserWarning, match="semantic route only"):
        hits = kb.search("vpn password", k=2)
    assert hits and hits[0].document.metadata["n"] == 1
    assert kb.search("vpn password", k=1, mode="semantic")[0].document.metadata["n"] == 1
    with pytest.raises(InvalidOptionError, match="semantic mode"):
        kb.search("vpn", mode="keyword")


def test_sqlite_list_all_returns_embeddings_and_empty_vector_gives_newest(tmp_path):
    store = SQLiteStore(tmp_path / "kb.db")
    store.add([Document("a", "x"), Document("b", "y")], [[1.0, 0.0], [0.0, 1.0]])
    assert [d.embedding for d in store.list_all()] == [[1.0, 0.0], [0.0, 1.0]]
    for s in (store, InMemoryStore()):
        if isinstance(s, InMemoryStore):
            s.add([Document("a", "x"), Document("b", "y")], [[1.0, 0.0], [0.0, 1.0]])
        hits = s.search([], k=5)
        assert [(h.document.id, h.score) for h in hits] == [("b", 1.0), ("a", 1.0)]


def test_simple_text_chunker_sees_normalised_text():
    store = InMemoryStore()
    pipe = IngestPipeline(store=store, chunker=SimpleTextChunker(20, 0))
    ids = pipe.ingest_text("one    two\n\n\n   three four five six seven eight")
    texts = [d.text for d in store.get(ids)]
    # Normalised first (whitespace collapsed), then cut into 20-character windows.
    assert "".join(texts).replace(" ", "") == "onetwothreefourfivesixseveneight"
    assert len(texts[0]) == 20 and texts[0].startswith("one two three")


def test_loader_errors_are_runtime_errors(tmp_path):
    kb = KnowledgeBase()
    bad = tmp_path / "x.doc"
    bad.write_bytes(b"\xd0\xcf\x11\xe0 not a real doc")
    with pytest.raises(RuntimeError) as caught:
        kb.ingest_file(bad)
    assert isinstance(caught.value, LoaderError)


def test_reference_aliases_and_as_tool_wraps_the_search_pipeline():
    import asyncio

    kb = KnowledgeBase()
    assert kb._ingest is kb.ingestor and kb._rag is kb.pipeline
    kb.add("the vpn password rotates every 90 days")
    tool = kb.as_tool()
    calls = []
    search = kb.pipeline.search
    kb.pipeline.search = lambda query, options=None: calls.append(query) or search(query, options)
    assert "90 days" in asyncio.run(tool.run("vpn password"))
    assert calls == ["vpn password"]  # the tool searches through the search pipeline


def test_learned_dimension_is_not_refused_later_by_a_name_table(monkeypatch, tmp_path):
    reset_config_cache()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeServer() as server:  # serves 8-dimension vectors under any model name
        (tmp_path / "cwd" / "jianmu.yaml").write_text(
            "rag:\n  embedding:\n    provider: openai\n    model: text-embedding-3-small\n"
            f"    base_url: {server.url}/v1\n"
        )
        local = tmp_path / "cwd" / "jianmu.yaml"
        trust(local, local.read_bytes())  # it names a server: found in the cwd, it needs trust
        reset_config_cache()
        db = tmp_path / "kb.db"
        kb = KnowledgeBase.open(db)
        kb.add("first fact")
        kb.close()
        assert SQLiteStore(db).embedder_info.dimension == 8
        again = KnowledgeBase.open(db)
        again.add("second fact")  # the same configuration is not refused
        assert again.search("fact", k=2, mode="semantic")
        again.close()


def test_hybrid_retriever_over_a_store_without_keywords_never_crashes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = ReferenceOnlyStore()
        store.add([Document("a", "x")], [SimpleEmbedder().embed_query("x")])
        hits = HybridRetriever(store, SimpleEmbedder()).search("x", k=1)
        assert [h.document.id for h in hits] == ["a"]


def test_one_optional_import_helper_names_the_real_install_command(monkeypatch):
    import sys

    from kbcli.errors import MissingDependencyError, require

    monkeypatch.setitem(sys.modules, "jieba", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'kbcli\[zh\]'"):
        require("jieba", extra="zh", feature="The jieba Chinese tokenizer")
    from pathlib import Path

    import tomllib

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert "zh" in extras["project"]["optional-dependencies"]
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(MissingDependencyError, match="pip install openai$"):
        require("openai", feature="The openai embedder")
