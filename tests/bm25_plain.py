"""An independent, plain BM25 (the reference formula) to check the indexed implementations."""

from __future__ import annotations

import math


def plain_bm25(
    query_terms: list[str], docs: dict[str, list[str]], k1=1.5, b=0.75
) -> dict[str, float]:
    """Score every document that shares a term with the query; repeated query terms count again."""
    n = len(docs)
    avgdl = sum(len(t) for t in docs.values()) / n
    scores: dict[str, float] = {}
    for term in query_terms:
        df = sum(1 for terms in docs.values() if term in terms)
        if df == 0:
            continue
        idf = math.log((n - df + 0.5) / (df + 0.5) + 1)
        for doc_id, terms in docs.items():
            tf = terms.count(term)
            if tf:
                dl = len(terms)
                s = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
                scores[doc_id] = scores.get(doc_id, 0.0) + s
    return scores


def plain_bm25_with_sources(
    query_terms: list[str],
    docs: dict[str, list[str]],
    sources: dict[str, str | None],
    weight: float,
    k1=1.5,
    b=0.75,
) -> dict[str, float]:
    """Chunk BM25 plus ``weight`` times the BM25 of the chunk's source, where a source is the
    concatenation of its chunks' terms (a chunk without a source is a source of its own)."""
    groups: dict[str, list[str]] = {}
    group_of = {}
    for doc_id, terms in docs.items():
        key = sources.get(doc_id)
        key = f"\0{doc_id}" if key is None else key
        groups.setdefault(key, []).extend(terms)
        group_of[doc_id] = key
    chunk = plain_bm25(query_terms, docs, k1, b)
    source = plain_bm25(query_terms, groups, k1, b)
    return {d: s + weight * source[group_of[d]] for d, s in chunk.items()}
