"""A filter never seen before, with many candidates: checked in rank order, never a full scan.

The SQLite keyword index checks a new filter in SQL on the best unfiltered candidates (and on
every candidate of their sources, which make the source part) until the k-th passing chunk
beats every unchecked one (``KeywordTables._checked_in_order``). Every result here is compared
with :func:`kbcli.text.bm25.rank` over the database's tables with the filter applied first
(``reference_rank``): ids in order, ties included, and scores.
"""

from __future__ import annotations

import random
import sqlite3

import pytest

from kbcli import Document, SQLiteStore
from kbcli.stores.sqlite import keyword, packed, ranking
from keyword_reference import reference_rank

WORDS = [f"w{i}" for i in range(12)]
QUERIES = ["w1 w2", "w3", "w0 w5 w9", "w1 w1 w4", "w6 w7 w8 w10 w11"]
# Every operator of the filter language, on per-source keys (team, source) and per-chunk ones
# (part, flag, tags); a few let nearly everything through, a few almost nothing.
FILTERS = [
    {"team": "ops"},
    {"team": {"$ne": "ops"}},
    {"team": {"$in": ["ops", "qa"]}},
    {"team": {"$nin": ["dev"]}},
    {"part": {"$gt": 2}},
    {"part": {"$gte": 7}},
    {"part": {"$lt": 1}},
    {"part": {"$lte": 8}},
    {"flag": {"$exists": True}},
    {"flag": {"$exists": False}},
    {"flag": True},
    {"source": {"$prefix": "/d1/"}},
    {"$or": [{"team": "qa"}, {"part": 0}]},
    {"$and": [{"source": {"$prefix": "/d2/"}}, {"part": {"$ne": 3}}]},
    {"part": 999},
]


def corpus(rng: random.Random, n: int) -> list[Document]:
    """Short chunks of few words (many equal scores: ties), 8 chunks per source in 3 folders,
    metadata that differs within a source (part, flag) and across sources (team)."""
    docs = []
    for i in range(n):
        words = rng.sample(WORDS, rng.randint(1, 3))
        if i % 5 == 0:
            words = ["w1", "w2"]  # identical chunks: equal scores up to their sources
        meta = {
            "team": ["ops", "dev", "qa"][(i // 8) % 3],
            "source": f"/d{(i // 8) % 3}/s{i // 8}.md",
            "part": i % 10,
        }
        if i % 3:
            meta["flag"] = i % 2 == 0
        docs.append(Document(f"c{i:04d}", " ".join(words), meta))
    return docs


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("inorder") / "kb.db"
    store = SQLiteStore(path)
    store.add(corpus(random.Random(5), 800))
    yield store
    store.close()


def fresh(store: SQLiteStore) -> None:
    """Forget every filter this process met (a new process, as for each ``kb search``)."""
    store._keywords._filters.clear()
    store._allowed._entries.clear()
    store._allowed.scans = 0


def assert_exact(store, query: str, k: int, filter, weight: float) -> None:
    got = store.keyword_search(query, k=k, filter=filter, source_weight=weight)
    want = reference_rank(store.path, store.analyzer, query, k, filter, weight)
    assert [h.document.id for h in got] == [i for i, _ in want], (query, k, filter, weight)
    assert [h.score for h in got] == pytest.approx([s for _, s in want], abs=1e-9)


@pytest.fixture
def rounds(monkeypatch):
    """How each in-order check ended: its rows, or None (fell back to the bitmap)."""
    ended: list = []
    real = keyword.KeywordTables._checked_in_order

    def spy(self, *args, **kwargs):
        rows = real(self, *args, **kwargs)
        ended.append(rows)
        return rows

    monkeypatch.setattr(keyword.KeywordTables, "_checked_in_order", spy)
    monkeypatch.setattr(packed, "FILTER_PROBE", 400)  # candidates checked at once; the budget
    return ended


@pytest.mark.slow
@pytest.mark.parametrize("first", [1, 25], ids=["rounds", "one-round"])
@pytest.mark.parametrize("weight", [0.0, 2.0], ids=["chunk-only", "sources"])
def test_a_new_filter_checked_in_order_ranks_like_filter_then_rank(
    store, rounds, monkeypatch, weight, first
):
    monkeypatch.setattr(ranking, "IN_ORDER_FIRST", first)
    for query in QUERIES:
        for filter in FILTERS:
            for k in (0, 1, 3, 12):
                fresh(store)
                assert_exact(store, query, k, filter, weight)
    assert rounds and all(r is not None for r in rounds)  # every one answered in order


def test_a_selective_new_filter_falls_back_to_its_bitmap(store, rounds, monkeypatch):
    monkeypatch.setattr(packed, "FILTER_PROBE", 60)
    monkeypatch.setattr(ranking, "IN_ORDER_FIRST", 2)
    for filter in ({"part": 999}, {"$and": [{"part": 3}, {"team": "qa"}]}):
        fresh(store)
        assert_exact(store, "w1 w2 w3 w4", 10, filter, 2.0)
        assert rounds[-1] is None and store._allowed.scans == 1


def test_a_new_filter_of_many_candidates_reads_no_bitmap(store, monkeypatch):
    """Fails before the in-order check: a new filter whose candidates exceed the probe read
    every chunk's metadata (one scan of the table)."""
    monkeypatch.setattr(packed, "FILTER_PROBE", 300)
    for query, filter in (("w1 w2 w3 w4 w5", {"team": "ops"}), ("w6 w7 w8", {"part": 4})):
        fresh(store)
        terms = list(store.analyzer.query_counts(query))
        with sqlite3.connect(store.path) as conn:
            marks = ",".join("?" * len(terms))
            sql = f"SELECT sum(df) FROM terms WHERE term IN ({marks})"
            (postings,) = conn.execute(sql, terms).fetchone()
        assert postings > 300  # more candidates than the probe checks at once
        assert_exact(store, query, 5, filter, 2.0)
        assert store._allowed.scans == 0


def test_the_second_query_of_a_filter_builds_its_bitmap(store, rounds):
    fresh(store)
    flt = {"part": {"$gte": 5}}
    for query in ("w1 w2 w3 w4 w5", "w6 w7 w8 w9"):
        assert_exact(store, query, 5, flt, 2.0)
    assert len(rounds) == 1 and store._allowed.scans == 1
    assert_exact(store, "w1 w3 w5 w7", 5, flt, 2.0)  # the bitmap serves
    assert len(rounds) == 1 and store._allowed.scans == 1


def test_a_new_filter_sees_the_commit_before_it(tmp_path, rounds, monkeypatch):
    monkeypatch.setattr(packed, "FILTER_PROBE", 100)
    monkeypatch.setattr(ranking, "IN_ORDER_FIRST", 4)
    store = SQLiteStore(tmp_path / "kb.db")
    store.add(corpus(random.Random(6), 400))
    flt = {"team": "dev"}
    for step in range(3):
        # a chunk that ranks first for the query and passes the filter, then one that fails it
        best = Document(f"new{step}", "w1 w2 zz", {"team": "dev", "source": f"/n{step}"})
        store.add([best])
        fresh(store)
        hits = store.keyword_search("w1 w2 w3 zz", k=3, filter=flt)
        assert hits[0].document.id == f"new{step}"
        assert_exact(store, "w1 w2 w3 zz", 3, flt, 2.0)
        store.remove([f"new{step}"])
        fresh(store)
        assert f"new{step}" not in [
            h.document.id for h in store.keyword_search("w1 w2 w3 zz", k=3, filter=flt)
        ]
        assert_exact(store, "w1 w2 w3 zz", 3, flt, 2.0)
    assert rounds and all(r is not None for r in rounds)
    store.close()
