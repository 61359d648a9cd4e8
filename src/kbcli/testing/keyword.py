"""KeywordIndex: BM25 with source context and a pre-filter, kept exact on every change.

Needs a ``store`` fixture (an empty store that is also a DocumentCatalog); see
:mod:`kbcli.testing`.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from kbcli.errors import FilterError
from kbcli.protocols import DocumentWriter, KeywordIndex, supports
from kbcli.testing._common import Boom, KeywordStore, ids
from kbcli.text.analysis import Analyzer
from kbcli.types import Document

FRUIT = [
    Document("f1", "apple apple banana", {"source": "fruit.md", "lang": "en"}),
    Document("f2", "apple cherry date elderberry fig grape", {"source": "fruit.md", "lang": "de"}),
    Document("f3", "banana cherry", {"source": "other.md", "lang": "en"}),
    Document("f4", "kiwi lemon", {"lang": "de"}),
]


# A page whose title names the query, and two pages repeating the word in shorter bodies: with
# the title scored as its own field (weight 2) the page ranks first; as plain text it was 3rd.
TITLED = [
    Document(
        "page",
        "# systemctl\n\nControl the systemd system and service manager: start, stop and inspect"
        " units, read their state and choose what starts at boot.",
        {"source": "/docs/systemctl.md", "title": "systemctl", "heading": "systemctl"},
    ),
    Document(
        "howto",
        "To run nginx as a service: systemctl start nginx, then systemctl enable nginx so that"
        " it starts at boot.",
        {
            "source": "/docs/services.md",
            "title": "Managing services",
            "heading": "Managing services",
        },
    ),
    Document(
        "notes",
        "After changing a unit file run systemctl daemon-reload, then systemctl restart the unit.",
        {"source": "/docs/upgrade.md", "title": "Upgrade notes", "heading": "Upgrade notes"},
    ),
]


def _bm25(tf: float, dl: float, avgdl: float, k1: float, b: float) -> float:
    return tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl / avgdl))


def _idf(n: int, df: int) -> float:
    return math.log((n - df + 0.5) / (df + 0.5) + 1.0)


def expected_scores(
    docs: list[Document], analyzer: Analyzer, query: str, k1: float, b: float, weight: float
) -> dict[str, float]:
    """Plain-Python BM25 with source context for ``docs`` (no heading, no filter)."""
    terms = {d.id: Counter(analyzer.terms(d.text)) for d in docs}
    source = {d.id: d.metadata.get("source") or f"\0{d.id}" for d in docs}
    by_source: dict[str, Counter[str]] = {}
    for d in docs:
        by_source.setdefault(source[d.id], Counter()).update(terms[d.id])
    avgdl = sum(sum(c.values()) for c in terms.values()) / len(docs)
    avgsl = sum(sum(c.values()) for c in by_source.values()) / len(by_source)
    out = {}
    for d in docs:
        chunk = part = 0.0
        for term, qtf in Counter(analyzer.terms(query)).items():
            df = sum(1 for c in terms.values() if term in c)
            sdf = sum(1 for c in by_source.values() if term in c)
            if term in terms[d.id]:
                dl = sum(terms[d.id].values())
                chunk += qtf * _idf(len(docs), df) * _bm25(terms[d.id][term], dl, avgdl, k1, b)
                src = by_source[source[d.id]]
                sl = sum(src.values())
                part += qtf * _idf(len(by_source), sdf) * _bm25(src[term], sl, avgsl, k1, b)
        if chunk:
            out[d.id] = chunk + weight * part
    return out


class KeywordIndexContract:
    """Ranking, k, filters, source context, explain and upkeep of a keyword index."""

    def fill(self, store: DocumentWriter, docs: list[Document] = FRUIT) -> None:
        store.add([Document(d.id, d.text, dict(d.metadata)) for d in docs])

    def test_is_a_keyword_index(self, store: KeywordStore) -> None:
        assert supports(store, KeywordIndex)
        assert isinstance(store.keyword_signature, str) and store.keyword_signature
        assert store.analyzer.terms("apple") == store.analyzer.terms("apple")

    def test_a_page_titled_with_the_query_ranks_first(self, store: KeywordStore) -> None:
        self.fill(store, TITLED)
        assert ids(store.keyword_search("systemctl", k=3)) == ["page", "notes", "howto"]
        assert ids(store.keyword_search("systemctl", k=3, filter={"title": "systemctl"})) == [
            "page"
        ]

    def test_ranks_by_bm25(self, store: KeywordStore) -> None:
        self.fill(store)
        hits = store.keyword_search("apple", k=10, source_weight=0.0)
        assert ids(hits) == ["f1", "f2"]  # more occurrences in a shorter chunk wins
        assert hits[0].score > hits[1].score > 0

    def test_scores_are_bm25_with_source_context(self, store: KeywordStore) -> None:
        self.fill(store)
        for query, k1, b, weight in [
            ("apple", 1.5, 0.75, 2.0),
            ("banana cherry", 1.2, 0.5, 0.0),
            ("cherry cherry kiwi", 2.0, 1.0, 1.0),
        ]:
            want = expected_scores(FRUIT, store.analyzer, query, k1, b, weight)
            hits = store.keyword_search(query, k=10, k1=k1, b=b, source_weight=weight)
            got = {h.document.id: h.score for h in hits}
            assert got == pytest.approx(want, rel=1e-6), query
            assert [h.score for h in hits] == sorted(got.values(), reverse=True)

    def test_k_limits_the_hits(self, store: KeywordStore) -> None:
        self.fill(store)
        assert (
            ids(store.keyword_search("apple banana cherry", k=2))
            == ids(store.keyword_search("apple banana cherry", k=10))[:2]
        )
        assert len(store.keyword_search("apple banana cherry", k=1)) == 1

    def test_no_match_and_empty_queries(self, store: KeywordStore) -> None:
        self.fill(store)
        assert store.keyword_search("zzyzx", k=5) == []
        assert store.keyword_search("", k=5) == []
        assert store.keyword_search("   ", k=5) == []

    def test_empty_index(self, store: KeywordStore) -> None:
        assert store.keyword_search("apple", k=5) == []

    def test_hits_carry_documents(self, store: KeywordStore) -> None:
        self.fill(store)
        (hit,) = store.keyword_search("kiwi", k=5)
        assert (hit.document.id, hit.document.text, hit.document.metadata) == (
            "f4",
            "kiwi lemon",
            {"lang": "de"},
        )

    def test_explain_parts(self, store: KeywordStore) -> None:
        self.fill(store)
        for weight in (0.0, 2.0, 0.5):
            hits = store.keyword_search("apple cherry", k=10, source_weight=weight)
            assert hits
            for hit in hits:
                parts = hit.explain
                assert parts is not None
                assert set(parts) >= {"bm25_chunk", "bm25_source", "source_weight"}
                assert parts["source_weight"] == weight
                assert parts["bm25_chunk"] > 0
                if weight:
                    assert parts["bm25_source"] > 0
                assert hit.score == pytest.approx(
                    parts["bm25_chunk"] + weight * parts["bm25_source"]
                )

    def test_filter_is_a_pre_filter(self, store: KeywordStore) -> None:
        self.fill(store)
        hits = store.keyword_search("apple banana cherry", k=2, filter={"lang": "de"})
        assert ids(hits) == ["f2"]  # the best 'de' hit, though 'en' ones score higher
        hits = store.keyword_search("banana", k=5, filter={"lang": "en", "source": "other.md"})
        assert ids(hits) == ["f3"]
        assert store.keyword_search("apple", k=5, filter={"lang": "fr"}) == []

    def test_filter_keeps_k(self, store: KeywordStore) -> None:
        docs = [Document(f"d{i}", "apple " * (i + 1), {"even": i % 2 == 0}) for i in range(10)]
        self.fill(store, docs)
        hits = store.keyword_search("apple", k=3, filter={"even": True})
        assert len(hits) == 3 and all(h.document.metadata["even"] is True for h in hits)

    def test_a_filtered_out_chunk_never_lifts_another(self, store: KeywordStore) -> None:
        # "shown" and "twin" are alike but for their source; "hidden" shares shown's source,
        # is hidden by the filter, and would lift shown's source score if it leaked.
        self.fill(
            store,
            [
                Document("hidden", "apple apple apple apple", {"source": "s.md", "lang": "en"}),
                Document("shown", "apple pie", {"source": "s.md", "lang": "de"}),
                Document("twin", "apple pie", {"source": "t.md", "lang": "de"}),
            ],
        )
        hits = {h.document.id: h for h in store.keyword_search("apple", k=5, filter={"lang": "de"})}
        assert set(hits) == {"shown", "twin"}
        shown, twin = hits["shown"], hits["twin"]
        assert shown.explain is not None and twin.explain is not None
        assert shown.explain["bm25_chunk"] == pytest.approx(twin.explain["bm25_chunk"])
        assert shown.explain["bm25_source"] <= twin.explain["bm25_source"] + 1e-9
        assert shown.score <= twin.score + 1e-9

    def test_source_context_lifts_the_chunk_of_the_file_about_the_query(
        self, store: KeywordStore
    ) -> None:
        self.fill(
            store,
            [
                Document("about1", "apple orchard", {"source": "about.md"}),
                Document("about2", "apple harvest apple", {"source": "about.md"}),
                Document("about3", "apple trees", {"source": "about.md"}),
                Document("misc1", "apple orchard", {"source": "misc.md"}),
                Document("misc2", "car engine oil", {"source": "misc.md"}),
                Document("misc3", "train station", {"source": "misc.md"}),
            ],
        )
        flat_hits = store.keyword_search("orchard", k=5, source_weight=0.0)
        flat = {h.document.id: h.score for h in flat_hits}
        assert flat["about1"] == pytest.approx(flat["misc1"])
        hits = store.keyword_search("apple orchard", k=5, source_weight=2.0)
        scores = {h.document.id: h.score for h in hits}
        assert scores["about1"] > scores["misc1"]

    def test_bm25_parameters_are_used(self, store: KeywordStore) -> None:
        self.fill(store)
        base = store.keyword_search("apple", k=1, source_weight=0.0)[0].score
        assert store.keyword_search("apple", k=1, k1=3.0, source_weight=0.0)[0].score != base
        assert store.keyword_search("cherry", k=5, b=0.0, source_weight=0.0)[0].score != (
            store.keyword_search("cherry", k=5, b=1.0, source_weight=0.0)[0].score
        )

    def test_bad_filter_is_a_clear_error(self, store: KeywordStore) -> None:
        self.fill(store)
        with pytest.raises(FilterError):
            store.keyword_search("apple", k=5, filter={"lang": {"$regex": "e"}})

    # --- upkeep ------------------------------------------------------------------------------

    def test_upsert_reindexes_the_text(self, store: KeywordStore) -> None:
        self.fill(store)
        store.add([Document("f3", "mango papaya", {"source": "other.md"})])
        assert "f3" not in ids(store.keyword_search("banana", k=10))
        assert ids(store.keyword_search("mango", k=10)) == ["f3"]

    def test_deleted_documents_leave_the_index(self, store: KeywordStore) -> None:
        self.fill(store)
        store.remove(["f1"])
        assert ids(store.keyword_search("apple", k=10)) == ["f2"]
        store.delete_source("fruit.md")
        assert store.keyword_search("apple", k=10) == []
        store.delete_where({"lang": "de"})
        assert store.keyword_search("kiwi", k=10) == []
        assert ids(store.keyword_search("banana", k=10)) == ["f3"]

    def test_scores_stay_exact_after_changes(self, store: KeywordStore) -> None:
        self.fill(store)
        store.add([Document("f5", "apple kiwi kiwi", {"source": "other.md"})])
        store.remove(["f2"])
        store.add([Document("f1", "apple banana", {"source": "fruit.md"})])
        left = store.list_all()
        want = expected_scores(left, store.analyzer, "apple kiwi", 1.5, 0.75, 2.0)
        got = {h.document.id: h.score for h in store.keyword_search("apple kiwi", k=10)}
        assert got == pytest.approx(want, rel=1e-6)

    def test_rolled_back_writes_never_reach_the_index(self, store: KeywordStore) -> None:
        self.fill(store)
        before = [(h.document.id, h.score) for h in store.keyword_search("apple kiwi", k=10)]
        with pytest.raises(Boom):
            with store.transaction():
                store.add([Document("new", "apple apple kiwi", {"source": "fruit.md"})])
                store.remove(["f4"])
                raise Boom
        after = [(h.document.id, h.score) for h in store.keyword_search("apple kiwi", k=10)]
        assert after == before

    def test_rebuild_keyword_index(self, store: KeywordStore) -> None:
        self.fill(store)
        before = [(h.document.id, h.score) for h in store.keyword_search("apple cherry", k=10)]
        assert store.rebuild_keyword_index() == 4
        after = [(h.document.id, h.score) for h in store.keyword_search("apple cherry", k=10)]
        assert [i for i, _ in after] == [i for i, _ in before]
        assert [s for _, s in after] == pytest.approx([s for _, s in before])
