"""One BM25: every keyword index gives the scores of the definition, after any history.

Random adds, upserts, deletes (by id, source and filter), replaced sources and rebuilds are
applied alike to an InMemoryStore and an SQLiteStore, whose packed postings have a tiny merge
threshold (so the pack is searched with a delta, tombstones and after merges); after each step
both rank random queries
(with and without source context and a filter) exactly like an independent plain BM25
(``bm25_plain``) over the documents they hold, to 1e-6, and SQLite's statistics stay consistent.
"""

from __future__ import annotations

import random

import pytest

from bm25_plain import plain_bm25_with_sources
from kbcli import Document, InMemoryStore, SQLiteStore
from kbcli.filters.model import matches
from kbcli.text.analysis import keyword_counts

WORDS = [f"w{i}" for i in range(40)]
SOURCES = ["/a.md", "/b.md", "/c.md", None]


def random_doc(rng: random.Random, doc_id: str) -> Document:
    text = " ".join(rng.choice(WORDS[: rng.randint(8, 40)]) for _ in range(rng.randint(1, 12)))
    meta = {"team": rng.choice(["ops", "dev"])}
    source = rng.choice(SOURCES)
    if source is not None:
        meta["source"] = source
    return Document(doc_id, text, meta)


def indexed_terms(analyzer, doc: Document) -> list[str]:
    """The terms an index holds for ``doc``: its fields' terms, weighted (title from the file
    name of its source here), as a flat list for the plain formula."""
    return list(keyword_counts(analyzer, doc.text, doc.metadata).elements())


def expected(store, query: list[str], weight: float, filter):
    docs = [d for d in store.iter_documents() if matches(d.metadata, filter)]
    analyzer = store.analyzer
    terms = {d.id: indexed_terms(analyzer, d) for d in docs}
    sources = {d.id: d.metadata.get("source") for d in docs}
    # The statistics count every document; only the scored set is filtered.
    everything = list(store.iter_documents())
    if not everything:
        return {}
    all_terms = {d.id: indexed_terms(analyzer, d) for d in everything}
    all_sources = {d.id: d.metadata.get("source") for d in everything}
    full = plain_bm25_with_sources(query, all_terms, all_sources, weight)
    if not filter:
        return full
    # With a filter a source's part only counts the visible chunks: recompute that part.
    chunk_only = plain_bm25_with_sources(query, all_terms, all_sources, 0.0)
    visible = {d: chunk_only[d] for d in terms if d in chunk_only}
    if weight == 0.0:
        return visible
    return {
        d: _filtered_score(d, query, all_terms, all_sources, terms, sources, weight)
        for d in visible
    }


def _filtered_score(doc, query, all_terms, all_sources, terms, sources, weight):
    import math

    k1, b = 1.5, 0.75
    chunk = plain_bm25_with_sources(query, all_terms, all_sources, 0.0)[doc]
    groups: dict[str, list[str]] = {}
    for d, t in all_terms.items():
        key = all_sources[d] if all_sources[d] is not None else f"\0{d}"
        groups.setdefault(key, []).extend(t)
    n = len(groups)
    avg = sum(len(t) for t in groups.values()) / n
    key = sources[doc] if sources[doc] is not None else f"\0{doc}"
    visible_tf: dict[str, int] = {}
    for d, t in terms.items():
        k = sources[d] if sources[d] is not None else f"\0{d}"
        if k == key:
            for term in t:
                visible_tf[term] = visible_tf.get(term, 0) + 1
    score = 0.0
    length = len(groups[key])
    for term in query:
        sdf = sum(1 for t in groups.values() if term in t)
        tf = visible_tf.get(term, 0)
        if not sdf or not tf:
            continue
        idf = math.log((n - sdf + 0.5) / (sdf + 0.5) + 1)
        score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avg))
    return chunk + weight * score


def check(store, rng: random.Random) -> None:
    for _ in range(4):
        query = rng.sample(WORDS, rng.randint(1, 3))
        for weight in (0.0, 2.0):
            for filter in (None, {"team": "ops"}):
                hits = store.keyword_search(
                    " ".join(query), k=100, filter=filter, source_weight=weight
                )
                want = expected(store, query, weight, filter)
                got = {h.document.id: h.score for h in hits}
                assert set(got) == set(want)
                for doc_id, score in want.items():
                    assert got[doc_id] == pytest.approx(score, abs=1e-6)
                scores = [h.score for h in hits]
                assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("small", [False, True], ids=["numpy", "packread"])
@pytest.mark.parametrize("seed", range(6))
def test_random_histories_keep_scores_exact(tmp_path, seed, monkeypatch, small):
    from types import SimpleNamespace

    from kbcli.stores.sqlite import keyword, packed, packread, packview

    used: list[int] = []
    if small:  # searched as in a process without numpy: packread over the pack and the delta
        monkeypatch.setattr(keyword, "sys", SimpleNamespace(modules={}))
        real = packread.search

        def counted(*args, **kwargs):
            rows = real(*args, **kwargs)
            used.extend([] if rows is None else [1])
            return rows

        monkeypatch.setattr(packread, "search", counted)
    monkeypatch.setattr(packview, "MERGE_MIN", 4)
    monkeypatch.setattr(packed, "FILTER_PROBE", 8 if seed % 2 else 0)
    monkeypatch.setattr(packed, "SPARSE_RATIO", 0 if seed % 3 == 0 else 10**9)  # both scorers
    rng = random.Random(seed)
    stores = [SQLiteStore(tmp_path / f"kb{seed}.db"), InMemoryStore()]
    next_id = 0
    for step in range(40):
        action = rng.choice(
            ["add", "add", "upsert", "delete", "source", "filter", "replace", "rebuild"]
        )
        for store in stores:
            state = random.Random(seed * 1000 + step)  # the same step on both stores
            ids = [d.id for d in store.iter_documents()]
            if action == "add" or not ids:
                store.add(
                    [random_doc(state, f"d{next_id + i}") for i in range(state.randint(1, 6))]
                )
            elif action == "upsert":
                store.add([random_doc(state, state.choice(ids))])
            elif action == "delete":
                store.remove(state.sample(ids, min(len(ids), state.randint(1, 3))))
            elif action == "source":
                store.delete_source(state.choice(SOURCES[:3]))
            elif action == "filter":
                store.delete_where({"team": state.choice(["ops", "dev"])})
            elif action == "replace":
                source = state.choice(SOURCES[:3])
                docs = [random_doc(state, f"r{step}-{i}") for i in range(state.randint(0, 3))]
                for d in docs:
                    d.metadata["source"] = source
                store.replace_source(source, docs)
            else:
                store.rebuild_keyword_index()
        next_id += 6
        ids = [d.id for d in stores[0].iter_documents()]
        for other in stores[1:]:
            assert [d.id for d in other.iter_documents()] == ids
        assert stores[0].integrity_check() == []
        if small and rng.random() < 0.3:
            stores[0].prepare_search()  # a new pack now and then, as `kb ingest` writes
        for store in stores:
            check(store, random.Random(step))
    assert bool(used) == small
