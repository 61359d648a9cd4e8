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
