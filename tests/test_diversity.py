import pytest

from kbcli import Document, InvalidOptionError, SearchOptions, SearchResult
from kbcli.diversity import collapse_duplicates, jaccard, mmr_order, mmr_rerank


def hit(doc_id, text, score):
    return SearchResult(Document(doc_id, text), score)


def test_collapse_keeps_the_best_copy():
    hits = [hit("a", "same  text", 3.0), hit("b", "other", 2.0), hit("c", "same text", 1.0)]
    kept = collapse_duplicates(hits, explain=True)
    assert [h.document.id for h in kept] == ["a", "b"]
    assert kept[0].explain == {"duplicates": ["c"]}


def test_jaccard():
    assert jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)
    assert jaccard(set(), set()) == 0.0


def test_mmr_order_by_hand():
    # 0 and 1 are near-identical; 2 is different but a little less relevant
    sims = {(0, 1): 0.95, (0, 2): 0.1, (1, 2): 0.1}

    def sim(i, j):
        return 1.0 if i == j else sims[(min(i, j), max(i, j))]

    relevance = [1.0, 0.98, 0.7]
    assert mmr_order(relevance, sim, 1.0, 3) == [0, 1, 2]  # pure relevance
    assert mmr_order(relevance, sim, 0.5, 3) == [0, 2, 1]  # diversity promotes 2


def test_mmr_rerank_uses_vectors_or_terms():
    hits = [
        hit("a", "reset your password in settings", 3.0),
        hit("b", "reset your password in the settings", 2.9),
        hit("c", "billing address changes", 1.0),
    ]
    by_terms = mmr_rerank(hits, 0.3, 2, explain=True)
    assert [h.document.id for h in by_terms] == ["a", "c"]
    assert by_terms[0].explain["mmr"]["similarity"] == "jaccard"
    vectors = [[1.0, 0.0], [0.99, 0.1], [0.0, 1.0]]
    by_vectors = mmr_rerank(hits, 0.3, 2, vectors=vectors, explain=True)
    assert [h.document.id for h in by_vectors] == ["a", "c"]
    assert by_vectors[1].explain["mmr"] == {"lambda": 0.3, "pool_rank": 3, "similarity": "cosine"}
    assert [h.score for h in by_vectors] == [3.0, 1.0]  # scores unchanged


def test_mmr_option_validated():
    assert SearchOptions(mmr=0.5).mmr == 0.5
    for bad in (1.5, -0.1, True, "x"):
        with pytest.raises(InvalidOptionError, match="mmr"):
            SearchOptions(mmr=bad)
