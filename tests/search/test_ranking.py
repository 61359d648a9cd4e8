"""Ranking behaviour of the hybrid retriever: weak-embedder default, dedupe, MMR, explain."""

import pytest

from kbcli import (
    Document,
    HybridRetriever,
    KnowledgeBase,
    SearchOptions,
    SimpleEmbedder,
    SQLiteStore,
)
from kbcli.eval.beir import ndcg_at_k
from kbcli.search.retrievers import WEAK_DENSE_ALPHA
from table_embedder import TableEmbedder, table_store


class WeakTable(TableEmbedder):
    """A weak embedder with known vectors: it prefers the wrong documents."""

    model, weak = "weak", True


class StrongTable(TableEmbedder):
    model = "weak"


TEXTS = {
    "best": "reset password steps: reset the password from the settings page",
    "good": "password reset is under settings",
    "ok": "reset button on the router",
    "dense": "completely unrelated words that spell alike",
}
QUERY = "reset password"
TABLE = {
    QUERY: [1.0, 0.0, 0.0],
    TEXTS["dense"]: [1.0, 0.0, 0.0],  # the embedder loves the unrelated text
    TEXTS["ok"]: [0.9, 0.4, 0.0],
    TEXTS["good"]: [0.2, 1.0, 0.0],
    TEXTS["best"]: [0.0, 1.0, 0.0],
}


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    return table_store(request.param, tmp_path, TEXTS, WeakTable(TABLE))


def ids(hits):
    return [h.document.id for h in hits]


def test_weak_embedder_default_keeps_the_keyword_order_and_fills_up(store):
    r = HybridRetriever(store, WeakTable(TABLE), alpha=0.6)  # configured alpha: not for weak
    keyword = ids(r.search(QUERY, 4, SearchOptions(mode="keyword")))
    hybrid = ids(r.search(QUERY, 4, SearchOptions(mode="hybrid")))
    assert keyword == ["best", "good", "ok"]
    assert hybrid == keyword + ["dense"]  # dense only fills the place keywords left empty
    assert r.effective_alpha(SearchOptions()) == WEAK_DENSE_ALPHA


def test_explicit_alpha_is_honoured_even_for_a_weak_embedder(store):
    r = HybridRetriever(store, WeakTable(TABLE))
    assert ids(r.search(QUERY, 1, SearchOptions(alpha=0.9))) == ["dense"]


def test_strong_embedder_uses_configured_alpha(store):
    r = HybridRetriever(store, StrongTable(TABLE), alpha=0.9)
    assert r.effective_alpha(SearchOptions()) == 0.9
    assert ids(r.search(QUERY, 1, SearchOptions())) == ["dense"]


def test_explain_in_hybrid_mode(store):
    r = HybridRetriever(store, WeakTable(TABLE))
    hits = r.search(QUERY, 4, SearchOptions(explain=True))
    top = hits[0].explain
    assert top["keyword"]["rank"] == 1 and top["dense"]["rank"] == 4
    assert top["fused"] == pytest.approx(hits[0].score)
    assert (top["fusion"], top["alpha"]) == ("weighted", WEAK_DENSE_ALPHA)
    assert hits[-1].explain["keyword"] is None  # found by the dense route only
    assert all(0.0 <= h.score <= 1.0 for h in hits)  # weighted scores live in [0, 1]


def test_explain_in_single_route_modes(store):
    r = HybridRetriever(store, WeakTable(TABLE))
    hit = r.search(QUERY, 1, SearchOptions(mode="keyword", explain=True))[0]
    parts = hit.explain["keyword"]
    assert (parts["rank"], parts["score"], hit.explain["fused"]) == (1, hit.score, hit.score)
    assert parts["score"] == pytest.approx(
        parts["bm25_chunk"] + parts["source_weight"] * parts["bm25_source"]
    )
    assert r.search(QUERY, 1, SearchOptions(mode="keyword"))[0].explain is None
    rrf = r.search(QUERY, 1, SearchOptions(fusion="rrf", explain=True))[0]
    assert rrf.explain["fusion"] == "rrf" and "alpha" not in rrf.explain


def test_simple_embedder_hybrid_default_not_worse_than_keyword(tmp_path):
    texts = {
        "pw": "To reset a forgotten password open Settings, choose Security, click Reset.",
        "bill": "Invoices are emailed monthly. Update the billing address under Account.",
        "ship": "Orders ship from the nearest warehouse within two business days.",
        "err": "Error ERR_5001 means the password reset token has expired; ask for a new link.",
        "vpn": "Connect to the office VPN with the client certificate before the intranet.",
        "spell": "Passwords, passports and pass-through settings: similar-looking words.",
        "db": "Back up the database nightly with pg_dump and keep seven daily copies.",
        "mail": "Configure the SMTP relay host and port 587 for outgoing mail.",
    }
    queries = {
        "how do I reset my password": {"pw": 2, "err": 1},
        "billing address": {"bill": 1},
        "expired reset token": {"err": 1},
        "vpn certificate": {"vpn": 1},
        "nightly database backup": {"db": 1},
        "outgoing mail relay": {"mail": 1},
        "warehouse shipping time": {"ship": 1},
    }
    kb = KnowledgeBase(store=SQLiteStore(tmp_path / "kb.db"), embedder=SimpleEmbedder())
    for doc_id, text in texts.items():
        kb.add(text, id=doc_id)

    def mean_ndcg(**options):
        return sum(
            ndcg_at_k(ids(kb.search(q, k=5, **options)), rels, 5) for q, rels in queries.items()
        ) / len(queries)

    assert mean_ndcg(mode="hybrid") >= mean_ndcg(mode="keyword") == pytest.approx(1.0)


def test_duplicates_collapse_by_default(tmp_path):
    kb = KnowledgeBase(store=SQLiteStore(tmp_path / "kb.db"))
    kb.add("rotate the API keys every ninety days", {"source": "a.md"}, id="a")
    kb.add("rotate the API keys every ninety days", {"source": "copy/a.md"}, id="b")
    kb.add("keys for the office are at the front desk", id="c")
    for mode in ("keyword", "semantic", "hybrid"):
        hits = kb.search("rotate API keys", k=3, mode=mode, explain=True)
        assert len({h.document.text for h in hits}) == len(hits) == 2
        assert hits[0].explain["duplicates"] in (["a"], ["b"])
    both = kb.search("rotate API keys", k=3, mode="keyword", dedupe=False)
    assert {"a", "b"} <= set(ids(both))


def test_dedupe_still_returns_k_results(tmp_path):
    kb = KnowledgeBase(store=SQLiteStore(tmp_path / "kb.db"))
    for i in range(5):
        kb.add("same chunk about tokens", id=f"dup{i}")
    for i in range(5):
        kb.add(f"tokens of kind {i}", id=f"u{i}")
    hits = kb.search("tokens", k=4, mode="keyword")
    assert len(hits) == 4 and len({h.document.text for h in hits}) == 4


class CopyEmbedder(StrongTable):
    """Near-identical vectors for the copies, a different one for the router text."""

    def __init__(self):
        super().__init__({})

    def embed_documents(self, texts):
        return [self._vector(t) for t in texts]

    @staticmethod
    def _vector(text):
        if "router" in text:
            return [0.3, 1.0, 0.0]
        if "weather" in text:
            return [0.0, 0.0, 1.0]
        return [1.0, 0.01 * len(text), 0.0]

    def embed_query(self, text):
        return [1.0, 0.5, 0.0]


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_mmr_spreads_near_identical_chunks(tmp_path, mode):
    kb = KnowledgeBase(store=SQLiteStore(tmp_path / "kb.db"), embedder=CopyEmbedder())
    kb.add("how to reset your password from the account settings page", id="p1")
    kb.add("how to reset your password from the account settings page.", id="p2x")
    kb.add("how to reset your password from the account settings page now", id="p3")
    kb.add("reset the router: hold the button for ten seconds", id="router")
    kb.add("weather tomorrow: light rain", id="weather")
    query = "reset password settings"
    plain = ids(kb.search(query, k=2, mode=mode, dedupe=False))
    diverse = kb.search(query, k=2, mode=mode, mmr=0.3, explain=True)
    assert set(plain) <= {"p1", "p2x", "p3"}  # relevance alone: two copies
    copies = {"p1", "p2x", "p3"}
    assert len(copies & set(ids(diverse))) == 1  # MMR: one copy and something else
    assert ids(diverse)[0] in copies
    expected = "jaccard" if mode == "keyword" else "cosine"
    assert diverse[0].explain["mmr"]["similarity"] == expected
    assert ids(kb.search(query, k=2, mode=mode, mmr=1.0)) == ids(kb.search(query, k=2, mode=mode))


def test_weak_embedder_hybrid_keeps_keyword_order_exactly(tmp_path):
    from kbcli import SimpleEmbedder, SQLiteStore
    from kbcli.search.retrievers import HybridRetriever

    store = SQLiteStore(tmp_path / "kb.db")
    emb = SimpleEmbedder()
    texts = [f"password reset step {i} " + "filler " * i for i in range(12)]
    texts += ["pass word re set", "completely unrelated weather text"]
    store.add([Document(f"d{i}", t) for i, t in enumerate(texts)], emb.embed_documents(texts))
    r = HybridRetriever(store, emb)
    keyword = [h.document.id for h in r.search("password reset", 20, SearchOptions(mode="keyword"))]
    hybrid = r.search("password reset", 20, SearchOptions(mode="hybrid", dedupe=False))
    ids = [h.document.id for h in hybrid]
    assert ids[: len(keyword)] == keyword  # keyword hits first, in keyword order
    assert set(ids[len(keyword) :]) <= {"d12", "d13"}  # then what only the dense route found
    scores = [h.score for h in hybrid]
    assert scores == sorted(scores, reverse=True)


def test_weak_hybrid_skips_the_dense_route_when_keywords_fill_the_page(tmp_path, monkeypatch):
    from kbcli import SimpleEmbedder, SQLiteStore
    from kbcli.search.retrievers import DenseRetriever, HybridRetriever

    store = SQLiteStore(tmp_path / "kb.db")
    emb = SimpleEmbedder()
    texts = [f"password note {i} " + "filler " * i for i in range(30)] + ["unrelated weather"]
    texts += ["tied word one", "tied word two"]  # equal keyword scores
    store.add([Document(f"d{i}", t) for i, t in enumerate(texts)], emb.embed_documents(texts))
    calls = []
    real = DenseRetriever.search
    monkeypatch.setattr(
        DenseRetriever, "search", lambda self, *a, **k: calls.append(a) or real(self, *a, **k)
    )
    r = HybridRetriever(store, emb)
    assert len(r.search("password", 5, SearchOptions(k=5))) == 5 and calls == []
    few = r.search("weather", 5, SearchOptions(k=5))  # one keyword hit: dense fills the page
    assert len(calls) == 1 and few[0].document.id == "d30" and len(few) == 5
    # the page (or the hit after it) holds a keyword tie: the dense route orders it, as at
    # any other k
    tied = r.search("tied", 1, SearchOptions(k=1, dedupe=False))
    assert len(calls) == 2 and len(tied) == 1


# --- source context: a chunk's file counts in its keyword score ------------------------------

FILES = {
    # a file about passwords: only its second chunk says "reset"
    "pw-1": ("/kb/passwords.md", 1, "Password rules: a password needs twelve characters."),
    "pw-2": ("/kb/passwords.md", 2, "Forgot it? Use reset on the sign-in page."),
    # a file about routers that mentions "reset" once
    "router": ("/kb/router.md", 1, "Hold the button to reset the router."),
}


@pytest.fixture(params=["memory", "sqlite"])
def files_store(request, tmp_path):
    from kbcli import InMemoryStore

    store = InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "kb.db")
    store.add(
        [Document(i, text, {"source": src, "page": page}) for i, (src, page, text) in FILES.items()]
    )
    return store


def test_source_context_lifts_the_chunk_of_the_file_about_the_query(files_store):
    from kbcli import BM25Retriever

    plain = BM25Retriever(files_store, source_weight=0.0).search("reset password", 3)
    assert ids(plain)[:1] == ["pw-1"]  # "password" twice beats "reset"...
    # ...and chunk-only scoring cannot tell the two "reset" chunks apart by their files
    with_source = BM25Retriever(files_store).search("reset password", 3)
    assert ids(with_source).index("pw-2") < ids(with_source).index("router")
    assert ids(plain).index("pw-2") > ids(plain).index("router")


def test_source_context_counts_only_chunks_the_filter_lets_through(files_store):
    from kbcli import BM25Retriever

    r = BM25Retriever(files_store)
    both = {h.document.id: h.explain for h in r.search("password", 3)}
    page2 = r.search("password reset", 3, SearchOptions(filter={"page": 2}))
    assert ids(page2) == ["pw-2"]
    # page 1 (which says "password") is not visible, so it adds nothing to pw-2's file score
    assert page2[0].explain["bm25_source"] == pytest.approx(
        r.search("reset", 3, SearchOptions(filter={"page": 2}))[0].explain["bm25_source"]
    )
    assert both["pw-1"]["bm25_source"] > 0


def test_source_weight_option_overrides_the_retriever(files_store):
    r = HybridRetriever(files_store, WeakTable({}))
    off = r.search("reset password", 3, SearchOptions(mode="keyword", source_weight=0.0))
    on = r.search("reset password", 3, SearchOptions(mode="keyword"))
    assert ids(off) != ids(on)


# --- an embedder that does not know the query's language --------------------------------------

ZH_TEXTS = {
    "zh-best": "重置密码：在设置页面选择安全，然后点击重置密码。",
    "zh-ok": "密码至少需要十二个字符。",
    "zh-dense": "路由器的指示灯说明。",
}
ZH_QUERY = "重置密码"
ZH_TABLE = {
    ZH_QUERY: [1.0, 0.0],
    ZH_TEXTS["zh-dense"]: [1.0, 0.0],  # the English-only model confuses the unrelated text
    ZH_TEXTS["zh-ok"]: [0.0, 1.0],
    ZH_TEXTS["zh-best"]: [0.1, 1.0],
}


class EnglishOnly(TableEmbedder):
    model, languages = "english-only", frozenset({"en"})


class Multilingual(TableEmbedder):
    model, languages = "multi", frozenset({"en", "zh"})
    keyword_sure_margin = 0.35  # as e5 declares: the per-query weight


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_chinese_query_keeps_keyword_order_with_an_english_only_embedder(kind, tmp_path):
    store = table_store(kind, tmp_path, ZH_TEXTS, EnglishOnly(ZH_TABLE))
    r = HybridRetriever(store, EnglishOnly(ZH_TABLE), alpha=0.6)
    keyword = ids(r.search(ZH_QUERY, 3, SearchOptions(mode="keyword")))
    assert ids(r.search(ZH_QUERY, 3, SearchOptions())) == keyword + ["zh-dense"]
    assert r.effective_alpha(SearchOptions(), ZH_QUERY) == WEAK_DENSE_ALPHA
    assert r.effective_alpha(SearchOptions(), "reset password") == 0.6
    # a model that knows Chinese keeps its say (no keyword-first; the per-query weight then
    # follows the keyword route's confidence, sure here), and so does an explicit alpha
    multi = HybridRetriever(store, Multilingual(ZH_TABLE), alpha=0.6)
    assert multi.effective_alpha(SearchOptions(), ZH_QUERY) == 0.6
    top = multi.search(ZH_QUERY, 1, SearchOptions(explain=True))[0]
    assert "keyword_first" not in top.explain and "keyword_margin" in top.explain
    assert ids(r.search(ZH_QUERY, 1, SearchOptions(alpha=0.6)))[0] == "zh-dense"


def test_configured_source_weight_is_the_default(files_store, tmp_path, monkeypatch):
    # issue 38: configuration is passed in: from_config hands limits.source_weight to its
    # retriever; a retriever built by hand reads no jianmu.yaml (2.0, SOURCE_WEIGHT)
    from kbcli import BM25Retriever, KnowledgeBase
    from kbcli.config.lookup import reset_config_cache

    (tmp_path / "jianmu.yaml").write_text("limits: {source_weight: 0}\n", encoding="utf-8")
    monkeypatch.setenv("KB_CONFIG", str(tmp_path / "jianmu.yaml"))
    reset_config_cache()
    try:
        configured = KnowledgeBase.from_config(store=files_store).retriever.keyword
        hits = configured.search("reset password", 3)
        assert all(h.explain["source_weight"] == 0.0 for h in hits)
        bare = BM25Retriever(files_store).search("reset password", 3)
        assert all(h.explain["source_weight"] == 2.0 for h in bare)
        explicit = BM25Retriever(files_store, source_weight=2.0).search("reset password", 3)
        assert all(h.explain["source_weight"] == 2.0 for h in explicit)
    finally:
        monkeypatch.delenv("KB_CONFIG")
        reset_config_cache()
