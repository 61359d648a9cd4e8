import pytest

from kbcli import (
    DenseRetriever,
    HybridRetriever,
    InMemoryStore,
    SearchOptions,
)
from kbcli.search.fusion import min_max, rrf_fusion, weighted_fusion
from table_embedder import TableEmbedder, table_store

TEXTS = {
    "kw": "reset password steps",  # keyword-only match
    "dn": "recover a forgotten login",  # dense-only match
    "both": "reset password",
    "none": "weather forecast",
}
TABLE = {
    "reset my password": [1.0, 0.0, 0.0],
    TEXTS["dn"]: [1.0, 0.05, 0.0],
    TEXTS["both"]: [0.8, 0.6, 0.0],
    TEXTS["kw"]: [0.0, 1.0, 0.0],
    TEXTS["none"]: [0.0, -1.0, 0.0],
}


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    return table_store(request.param, tmp_path, TEXTS, TableEmbedder(TABLE))


def test_modes_route_correctly(store):
    r = HybridRetriever(store, TableEmbedder(TABLE), alpha=0.5)
    kw = r.search("reset my password", 10, SearchOptions(mode="keyword"))
    assert {h.document.id for h in kw} == {"kw", "both"}
    dense = r.search("reset my password", 2, SearchOptions(mode="semantic"))
    assert [h.document.id for h in dense] == ["dn", "both"]


def test_weighted_fusion_counts_single_route_documents(store):
    r = HybridRetriever(store, TableEmbedder(TABLE), alpha=0.5)
    hits = r.search("reset my password", 4, SearchOptions(mode="hybrid", explain=True))
    ids = [h.document.id for h in hits]
    assert ids[0] == "both"  # good in both routes
    assert "dn" in ids and "kw" in ids  # each found by one route only
    top = hits[0].explain
    assert top["keyword"]["rank"] == 1 and top["dense"]["rank"] == 2
    assert top["fused"] == pytest.approx(hits[0].score)


def test_alpha_moves_the_balance(store):
    r = HybridRetriever(store, TableEmbedder(TABLE))
    dense_heavy = r.search("reset my password", 4, SearchOptions(alpha=1.0))
    keyword_heavy = r.search("reset my password", 4, SearchOptions(alpha=0.0))
    assert dense_heavy[0].document.id == "dn"
    assert keyword_heavy[0].document.id in ("kw", "both")
    assert keyword_heavy[0].document.id != "dn"


def test_rrf(store):
    r = HybridRetriever(store, TableEmbedder(TABLE))
    hits = r.search("reset my password", 3, SearchOptions(fusion="rrf"))
    assert hits[0].document.id == "both"
    assert hits[0].score == pytest.approx(1 / 61 + 1 / 62)


def test_hybrid_prefilter(store):
    r = HybridRetriever(store, TableEmbedder(TABLE), alpha=0.5)
    hits = r.search("reset my password", 5, SearchOptions(filter={"missing": 1}))
    assert hits == []


def test_default_alpha_is_handed_in_by_from_config_never_read_by_the_retriever(tmp_path):
    # issue 38: configuration is passed in; a retriever built by hand reads no jianmu.yaml
    (tmp_path / "cwd" / "jianmu.yaml").write_text("limits: {rerank_alpha: 0.25}")
    assert HybridRetriever(InMemoryStore()).default_alpha() == 0.6
    assert HybridRetriever(InMemoryStore(), alpha=0.9).default_alpha() == 0.9
    from kbcli import KnowledgeBase

    kb = KnowledgeBase.from_config(store=InMemoryStore())
    assert kb.retriever.default_alpha() == 0.25


def test_dense_retriever_empty_query(store):
    assert DenseRetriever(store, TableEmbedder(TABLE)).search("   ") == []


def test_fusion_functions_by_hand():
    assert min_max({"a": -1.0, "b": 1.0, "c": 0.0}) == {"a": 0.0, "b": 1.0, "c": 0.5}
    assert min_max({"a": 3.0}) == {"a": 1.0}
    fused = weighted_fusion({"a": 0.9, "b": 0.1}, {"b": 5.0, "c": 1.0}, alpha=0.6)
    assert fused == pytest.approx({"a": 0.6, "b": 0.4, "c": 0.0})
    assert rrf_fusion(["a", "b"], ["b"]) == pytest.approx({"a": 1 / 61, "b": 1 / 62 + 1 / 61})
