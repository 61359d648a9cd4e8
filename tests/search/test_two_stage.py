"""RAGPipeline's second stage: candidate pool, rerank, min_relevance refusal, cut to k, filters
before recall, explain; rag.rerank / rag.rewrite configuration; the agent tool's refusal."""

from __future__ import annotations

import asyncio

import pytest

from fake_rerank import OverlapReranker
from kbcli import (
    ConfigError,
    Document,
    InvalidOptionError,
    KnowledgeBase,
    PassthroughReranker,
    RAGPipeline,
    SearchOptions,
    SearchResult,
)
from kbcli.config.lookup import RerankConfig, load_config
from kbcli.config.registry import RERANKERS
from kbcli.config.trust import trust
from kbcli.errors import RerankerError
from kbcli.search.rerank import APIReranker, build_reranker


class PoolRetriever:
    def __init__(self, n=200):
        self.n = n
        self.asked = []

    def search(self, query, k=5, options=None):
        self.asked.append(k)
        return [
            SearchResult(Document(f"d{i}", f"text {i}"), 1.0 - i / 1000, {"keyword": {"rank": i}})
            for i in range(min(k, self.n))
        ]


class FixedReranker:
    """Scores d<i> as scores.get(i, 0.0)."""

    def __init__(self, scores):
        self.scores = scores
        self.seen = []

    def rerank(self, query, results):
        self.seen.append([r.document.id for r in results])
        out = [
            SearchResult(r.document, self.scores.get(int(r.document.id[1:]), 0.0)) for r in results
        ]
        return sorted(out, key=lambda r: -r.score)


def test_pool_is_candidates_never_below_twice_k():
    retriever = PoolRetriever()
    pipeline = RAGPipeline(retriever, PassthroughReranker())
    pipeline.search("q", SearchOptions(k=5))
    pipeline.search("q", SearchOptions(k=5, candidates=8))
    pipeline.search("q", SearchOptions(k=5, candidates=100))
    pipeline.search("q", SearchOptions(k=40))
    assert retriever.asked == [50, 10, 100, 80]
    RAGPipeline(retriever, PassthroughReranker(), candidates=12).search("q", SearchOptions(k=3))
    assert retriever.asked[-1] == 12
    RAGPipeline(retriever).search("q", SearchOptions(k=3, candidates=99))  # no reranker: k
    assert retriever.asked[-1] == 3


def test_threshold_cuts_then_k_and_scores_are_the_rerankers():
    reranker = FixedReranker({7: 0.9, 3: 0.8, 12: 0.6, 1: 0.4, 30: 0.75})
    hits = RAGPipeline(PoolRetriever(), reranker).search("q", SearchOptions(k=3, min_relevance=0.5))
    assert [(h.document.id, h.score) for h in hits] == [("d7", 0.9), ("d3", 0.8), ("d30", 0.75)]
    assert len(reranker.seen[0]) == 50
    assert not hits.refused and hits.candidates == 50 and hits.best_relevance == 0.9
    few = RAGPipeline(PoolRetriever(), reranker).search("q", SearchOptions(k=5, min_relevance=0.7))
    assert [h.document.id for h in few] == ["d7", "d3", "d30"]  # fewer than k: no weak filler


def test_nothing_relevant_is_a_refusal_not_weak_evidence():
    reranker = FixedReranker({0: 0.2, 1: 0.1})
    hits = RAGPipeline(PoolRetriever(), reranker, min_relevance=0.5).search("q", SearchOptions())
    assert list(hits) == [] and hits.refused
    assert hits.best_relevance == 0.2 and hits.min_relevance == 0.5 and hits.candidates == 50
    empty = RAGPipeline(PoolRetriever(0), reranker, min_relevance=0.5).search("q")
    assert list(empty) == [] and not empty.refused  # nothing recalled: nothing to refuse


def test_explain_shows_recall_rank_fused_and_rerank_scores():
    hits = RAGPipeline(PoolRetriever(), FixedReranker({9: 0.95})).search(
        "q", SearchOptions(k=1, explain=True)
    )
    assert hits[0].explain == {
        "keyword": {"rank": 9},
        "recall_rank": 10,
        "fused": pytest.approx(0.991),
        "rerank": 0.95,
    }


def test_rerank_switch_per_search():
    retriever = PoolRetriever()
    reranker = FixedReranker({9: 0.95})
    pipeline = RAGPipeline(retriever, reranker)
    hits = pipeline.search("q", SearchOptions(k=2, rerank=False))
    assert [h.document.id for h in hits] == ["d0", "d1"] and reranker.seen == []
    assert retriever.asked == [2]
    with pytest.raises(InvalidOptionError, match="drop --no-rerank"):
        pipeline.search("q", SearchOptions(rerank=False, min_relevance=0.5))
    bare = RAGPipeline(retriever)
    for options in (SearchOptions(rerank=True), SearchOptions(min_relevance=0.3)):
        with pytest.raises(InvalidOptionError, match="rag.rerank.provider"):
            bare.search("q", options)


def test_a_reranker_cannot_invent_documents():
    class Inventor:
        def rerank(self, query, results):
            return [SearchResult(Document("made-up", "x"), 1.0), *results]

    hits = RAGPipeline(PoolRetriever(), Inventor()).search("q", SearchOptions(k=3))
    assert [h.document.id for h in hits] == ["d0", "d1", "d2"]


def _kb(reranker):
    kb = KnowledgeBase(reranker=reranker)
    for i in range(30):
        team = "ops" if i % 3 == 0 else "dev"
        kb.add(f"reset password step {i} for the {team} team", {"team": team, "n": i})
    return kb


def test_filters_apply_before_recall_so_the_reranker_sees_only_allowed_docs():
    seen = []

    class Spy(OverlapReranker):
        def rerank(self, query, results):
            seen.extend(r.document.metadata["team"] for r in results)
            return super().rerank(query, results)

    kb = _kb(Spy())
    hits = kb.search("reset password ops", k=4, filter={"team": "ops"})
    assert len(hits) == 4 and {h.document.metadata["team"] for h in hits} == {"ops"}
    assert set(seen) == {"ops"} and len(seen) == 10  # all ten ops chunks, nothing else


def test_user_reranker_plugs_into_knowledge_base_and_the_tool_refuses():
    kb = _kb(OverlapReranker())
    hits = kb.search("reset password dev", k=3, mode="keyword")
    assert all(h.score == 1.0 for h in hits) and len(hits) == 3
    tool = kb.as_tool()
    assert asyncio.run(tool.run("reset password", k=2)).startswith("1. ")
    kb.pipeline.min_relevance = 0.9
    assert asyncio.run(tool.run("tomato basil garden")) == "No relevant knowledge found."


def test_rerank_config_defaults_and_validation(tmp_path):
    file = tmp_path / "jianmu.yaml"
    file.write_text("rag: {}\n")
    rerank = load_config(file).rag.rerank
    assert rerank == RerankConfig() and rerank.provider == "none" and rerank.candidates == 50
    assert build_reranker(load_config(file)) is None
    file.write_text(
        "rag:\n  rerank: {provider: API, base_url: 'http://127.0.0.1:1/v1', model: m,"
        " candidates: 80, min_relevance: 0.3, batch_size: 16, max_documents: 200}\n"
        "  rewrite: {mode: hyde, model: w, base_url: 'http://127.0.0.1:1/v1'}\n"
    )
    config = load_config(file)
    assert config.rag.rerank.provider == "api" and config.rag.rerank.min_relevance == 0.3
    assert config.rag.rewrite.mode == "hyde"
    reranker = build_reranker(config)
    assert isinstance(reranker, APIReranker) and reranker.max_documents == 200
    bad = {
        "rag: {rerank: {provider: colbert}}": "must be one of none, passthrough",
        "rag: {rerank: {candidate: 5}}": "did you mean candidates",
        "rag: {rerank: {candidates: 0}}": "at least 1",
        "rag: {rerank: {max_documents: 0}}": "at least 1",
        "rag: {rerank: {max_documents: 1.5}}": "whole number",
        "rag: {rerank: {min_relevance: high}}": "must be a number",
        "rag: {rerank: {method: pairwise}}": "pointwise, listwise",
        "rag: {rewrite: {mode: magic}}": "none, hyde, expand, both",
        "rag: {rewrite: {modes: hyde}}": "did you mean mode",
    }
    for text, message in bad.items():
        file.write_text(text + "\n")
        with pytest.raises(ConfigError, match=message):
            load_config(file)
    assert set(RERANKERS) == {"passthrough", "cross-encoder", "api", "llm"}


def test_a_class_path_selects_a_users_reranker(tmp_path):
    file = tmp_path / "jianmu.yaml"
    file.write_text("rag: {rerank: {provider: 'fake_rerank:OverlapReranker'}}\n")
    assert isinstance(build_reranker(load_config(file)), OverlapReranker)


def test_open_builds_the_configured_reranker_only_when_a_search_reranks(tmp_path):
    file = tmp_path / "cwd" / "jianmu.yaml"
    file.write_text("rag: {rerank: {provider: api}}\n")  # no base_url: fails when built
    trust(file, file.read_bytes())  # in the cwd, and it turns on a rerank server: trusted
    config = load_config(file)
    kb = KnowledgeBase.open(tmp_path / "kb.db", config=config)
    try:
        kb.add("reset password")
        assert kb.pipeline.has_reranker and kb.pipeline._reranker is None
        assert len(kb.search("password", mode="keyword", rerank=False)) == 1
        with pytest.raises(RerankerError, match="rag.rerank.base_url"):
            kb.search("password", mode="keyword")
    finally:
        kb.close()
    file.write_text(
        "rag: {rerank: {provider: 'fake_rerank:OverlapReranker', min_relevance: 0.6}}\n"
    )
    kb = KnowledgeBase.open(tmp_path / "kb.db", config=load_config(file))
    try:
        assert kb.search("password reset", mode="keyword")[0].score == 1.0
        refused = kb.search("tomatoes password basil", mode="keyword")
        assert list(refused) == [] and refused.refused and refused.min_relevance == 0.6
    finally:
        kb.close()


def test_every_built_in_reranker_meets_the_protocol(tmp_path):
    from kbcli import RerankerProtocol
    from kbcli.search.rerank import CrossEncoderReranker, LLMReranker

    built = [
        PassthroughReranker(),
        CrossEncoderReranker(tmp_path),  # nothing is loaded until rerank
        APIReranker("http://127.0.0.1:1"),
        LLMReranker("m", "http://127.0.0.1:1"),
        OverlapReranker(),
    ]
    assert all(isinstance(r, RerankerProtocol) for r in built)
    assert all(r.rerank("q", []) == [] for r in built)


def test_a_scoped_view_keeps_the_reranker_and_rewrites_inside_the_scope():
    seen = []

    class Spy(OverlapReranker):
        def rerank(self, query, results):
            seen.extend(r.document.metadata["team"] for r in results)
            return super().rerank(query, results)

    class Rewriter:
        def routes(self, query, mode):
            return [("other", "reset password dev team", mode)]

    kb = _kb(Spy())
    kb.pipeline.rewriter = Rewriter()
    hits = kb.scoped({"team": "ops"}).search("reset password", k=3)
    assert len(hits) == 3 and {h.document.metadata["team"] for h in hits} == {"ops"}
    assert set(seen) == {"ops"}  # neither route leaked another team's chunk to the reranker
