"""What keyword scores must be: random histories checked against the independent plain BM25
(``bm25_plain``), and :func:`kbcli.text.bm25.rank` over a database's own tables
(stores/test_bm25_parity.py, stores/test_keyword_pack.py, stores/test_postgres_store.py,
filters/test_in_rank_order.py)."""

from __future__ import annotations

import json
import random
import sqlite3

import pytest

from bm25_plain import plain_bm25_with_sources
from kbcli.filters.model import matches
from kbcli.stores.sqlite.catalog import unpack_terms
from kbcli.text.analysis import keyword_counts
from kbcli.types import Document

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


def reference_rank(path, analyzer, query: str, k: int, filter, weight: float) -> list:
    """(id, score) of :func:`kbcli.text.bm25.rank` over the database's tables and the chunks'
    forward indexes: the definition."""
    from kbcli.filters.model import matches
    from kbcli.text.bm25 import CorpusStats, QueryTerm, rank, select_terms

    conn = sqlite3.connect(path)
    counts = analyzer.query_counts(query)
    marks = ",".join("?" * len(counts))
    found = [
        QueryTerm(tid, counts[term], df, sdf)
        for tid, term, df, sdf in conn.execute(
            f"SELECT id, term, df, sdf FROM terms WHERE term IN ({marks})", list(counts)
        )
    ]
    n, total, sources = conn.execute("SELECT n, total_length, sources FROM stats").fetchone()
    lengths = dict(conn.execute("SELECT id, length FROM sources"))
    chunks = {
        doc: (cid, json.loads(meta))
        for doc, cid, meta in conn.execute("SELECT doc, id, metadata FROM chunks")
    }

    postings: dict[int, list] = {}
    for doc, src, dl, blob in conn.execute("SELECT doc, src, length, terms FROM chunks"):
        for term, tf in unpack_terms(blob).items():
            postings.setdefault(term, []).append((doc, src, tf, dl))
    ranked = rank(
        select_terms(found),
        lambda t: postings.get(t, []),
        lengths.__getitem__,
        CorpusStats(n, total, sources),
        k,
        source_weight=weight,
        allowed=None if filter is None else (lambda doc: matches(chunks[doc][1], filter)),
    )
    conn.close()
    return [(chunks[s.doc][0], s.score) for s in ranked]
