"""The per-query dense weight: hybrid fusion trusts the keyword route where it is sure."""

import pytest

from kbcli import Document, HybridRetriever, SearchOptions, SQLiteStore
from kbcli.cli.render.explain import explain_text
from kbcli.search.fusion import (
    KEYWORD_SURE_MARGIN,
    MIN_DENSE_ALPHA,
    confident_alpha,
    keyword_margin,
)
from table_embedder import TableEmbedder, table_store

# --- the rule by hand ---------------------------------------------------------------------------


def test_keyword_margin_is_the_top_files_lead_over_the_next():
    assert keyword_margin([]) == 0.0
    assert keyword_margin([("a", 4.0)]) == 1.0  # the only file with the words
    assert keyword_margin([("a", 10.0), ("b", 5.0)]) == pytest.approx(0.5)
    assert keyword_margin([("b", 5.0), ("a", 10.0)]) == pytest.approx(0.5)  # order free
    assert keyword_margin([("a", 3.0), ("b", 3.0)]) == 0.0  # a tie: unsure
    assert keyword_margin([("a", 0.0), ("b", 0.0)]) == 0.0


def test_keyword_margin_counts_a_files_chunks_once():
    # chunk 2 of file a is not a rival of chunk 1: the next file is b
    assert keyword_margin([("a", 10.0), ("a", 9.9), ("b", 2.0)]) == pytest.approx(0.8)


def test_confident_alpha_falls_linearly_from_the_base_to_the_least():
    assert confident_alpha(0.6, 0.0) == 0.6
    assert confident_alpha(0.6, KEYWORD_SURE_MARGIN / 2) == pytest.approx(0.3)
    assert confident_alpha(0.6, KEYWORD_SURE_MARGIN) == MIN_DENSE_ALPHA
    assert confident_alpha(0.6, 1.0) == MIN_DENSE_ALPHA
    assert confident_alpha(0.3, 0.1, sure=0.2) == pytest.approx(0.15)
    assert confident_alpha(0.0, 0.0) == 0.0  # a base under the least is not raised
    assert confident_alpha(0.6, 0.5, sure=0.0) == MIN_DENSE_ALPHA


# --- through HybridRetriever --------------------------------------------------------------------

QUERY = "rotate nginx logfiles"
TEXTS = {
    # the page the keywords are sure of: every query word, twice
    "right": "rotate nginx logfiles: logrotate rotates nginx logfiles daily",
    # a look-alike for the dense route with none of the query's words
    "wrong": "web server journal cleanup",
    "other": "nginx configuration reference",
}
TABLE = {
    QUERY: [1.0, 0.0, 0.0],
    TEXTS["wrong"]: [1.0, 0.0, 0.0],  # the vectors confuse it with the query
    TEXTS["right"]: [0.3, 0.95, 0.0],
    TEXTS["other"]: [0.0, 0.0, 1.0],
}


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    return table_store(request.param, tmp_path, TEXTS, TableEmbedder(TABLE, KEYWORD_SURE_MARGIN))


def ids(hits):
    return [h.document.id for h in hits]


def test_a_keyword_sure_page_is_not_pushed_down_by_a_look_alike(store):
    """The fixed alpha 0.6 ranked the dense look-alike above the page every query word is in
    (0.6 from the dense route beats 0.4 from the keyword one); the per-query weight falls to
    0.001 when the keyword route is this sure."""
    r = HybridRetriever(store, TableEmbedder(TABLE, KEYWORD_SURE_MARGIN), alpha=0.6)
    assert ids(r.search(QUERY, 3, SearchOptions(mode="keyword")))[0] == "right"
    assert ids(r.search(QUERY, 3, SearchOptions(alpha=0.6)))[0] == "wrong"  # --alpha forces it
    hits = r.search(QUERY, 3, SearchOptions(explain=True))
    assert ids(hits)[:2] == ["right", "wrong"]  # the look-alike still fills in, second
    top = hits[0].explain
    assert top["keyword_margin"] >= KEYWORD_SURE_MARGIN
    assert top["alpha"] == MIN_DENSE_ALPHA
    assert top["alpha_note"].startswith("per query: keyword route sure")
    assert "alpha 0.001 (per query: keyword route sure" in explain_text(top)


def test_where_the_keyword_route_is_unsure_the_dense_route_keeps_its_weight(tmp_path):
    # two pages with the same keyword score: the margin is 0, alpha stays 0.6 and the dense
    # route decides between them
    texts = {"a": "rotate nginx logfiles kilo", "b": "rotate nginx logfiles mega"}
    table = {QUERY: [1.0, 0.0]}
    store = SQLiteStore(tmp_path / "kb.db")
    docs = [Document(key, text, {"source": f"{key}.md"}) for key, text in texts.items()]
    store.add(docs, [[0.2, 1.0], [1.0, 0.1]])
    r = HybridRetriever(store, TableEmbedder(table, KEYWORD_SURE_MARGIN), alpha=0.6)
    keyword_hits = r.keyword.search(QUERY, 10, SearchOptions())
    assert r.effective_alpha(SearchOptions(), QUERY, keyword_hits) == 0.6
    hits = r.search(QUERY, 2, SearchOptions(explain=True))
    assert ids(hits) == ["b", "a"]  # b's vector is the query's
    assert hits[0].explain["alpha"] == 0.6 and hits[0].explain["keyword_margin"] == 0.0
    assert "keyword route unsure" in hits[0].explain["alpha_note"]


def test_the_margin_is_between_files_not_chunks(tmp_path):
    """Two chunks of one file do not make the keyword route look unsure."""
    store = SQLiteStore(tmp_path / "kb.db")
    docs = [
        Document("a#1", TEXTS["right"], {"source": "a.md"}),
        Document("a#2", TEXTS["right"] + " again", {"source": "a.md"}),
        Document("w", TEXTS["wrong"], {"source": "w.md"}),
        Document("o", TEXTS["other"], {"source": "o.md"}),
    ]
    emb = TableEmbedder(
        {**TABLE, TEXTS["right"] + " again": TABLE[TEXTS["right"]]}, KEYWORD_SURE_MARGIN
    )
    store.add(docs, emb.embed_documents([d.text for d in docs]))
    r = HybridRetriever(store, emb, alpha=0.6)
    keyword_hits = r.keyword.search(QUERY, 10, SearchOptions())
    assert ids(keyword_hits)[:2] == ["a#1", "a#2"] or ids(keyword_hits)[:2] == ["a#2", "a#1"]
    assert r.effective_alpha(SearchOptions(), QUERY, keyword_hits) == MIN_DENSE_ALPHA
    assert ids(r.search(QUERY, 1, SearchOptions()))[0].startswith("a#")


def test_a_chosen_alpha_and_a_weak_embedder_keep_their_weights(store):
    r = HybridRetriever(store, TableEmbedder(TABLE, KEYWORD_SURE_MARGIN), alpha=0.6)
    keyword_hits = r.keyword.search(QUERY, 10, SearchOptions())
    assert r.effective_alpha(SearchOptions(alpha=0.6), QUERY, keyword_hits) == 0.6
    hits = r.search(QUERY, 1, SearchOptions(alpha=0.6, explain=True))
    assert "alpha_note" not in hits[0].explain and "keyword_margin" not in hits[0].explain

    class Weak(TableEmbedder):
        weak = True

    weak = HybridRetriever(store, Weak(TABLE), alpha=0.6)
    assert weak.effective_alpha(SearchOptions(), QUERY, keyword_hits) == 0.001
    note = weak.search(QUERY, 1, SearchOptions(explain=True))[0].explain["alpha_note"]
    assert note.startswith("keyword-first")


def test_the_embedders_own_alpha_is_the_base_of_the_per_query_weight(store):
    class OwnAlpha(TableEmbedder):
        alpha = 0.3

    r = HybridRetriever(store, OwnAlpha(TABLE), alpha=0.9)
    assert r.base_alpha(SearchOptions()) == 0.3
    assert r.effective_alpha(SearchOptions(), QUERY) == 0.3  # no keyword hits given
    nothing = r.keyword.search("zzzz", 10, SearchOptions())
    assert r.effective_alpha(SearchOptions(), "zzzz", nothing) == 0.3  # keywords found none


def test_an_embedder_without_a_declared_ramp_keeps_one_weight_for_every_query(store):
    """MiniLM declares no ``keyword_sure_margin``: the keyword route's lead does not move its
    weight (the README's quick start: on 7 files a one-word keyword match led by 48 % and
    buried the page the question meant)."""
    r = HybridRetriever(store, TableEmbedder(TABLE), alpha=0.6)
    keyword_hits = r.keyword.search(QUERY, 50, SearchOptions())
    assert r.effective_alpha(SearchOptions(), QUERY, keyword_hits) == 0.6
    top = r.search(QUERY, 3, SearchOptions(explain=True))[0]
    assert top.explain["alpha"] == 0.6 and "keyword_margin" not in top.explain
