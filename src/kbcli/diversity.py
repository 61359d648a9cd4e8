"""Result diversity: near-duplicate collapse and maximal marginal relevance (MMR).

MMR (Carbonell & Goldstein 1998) picks, one at a time, the candidate maximising
``lambda * relevance - (1 - lambda) * max similarity to the results already picked``.
Relevance is the hit's score divided by the best score in the pool (min-max scaled if any
score is negative), so one lambda means about the same in every mode and the weakest candidate
is not treated as irrelevant. Similarity is the cosine of stored vectors when every candidate
has one, otherwise the Jaccard overlap of the analyzer's term sets (keyword mode needs no
vectors).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from .scoring import max_scale, min_max
from .types import SearchResult

Similarity = Callable[[int, int], float]


def duplicate_key(text: str) -> str:
    """Chunks with the same key are copies: the text with whitespace runs collapsed."""
    return " ".join(text.split())


def collapse_duplicates(hits: list[SearchResult], *, explain: bool = False) -> list[SearchResult]:
    """Keep the first (best) hit of each text; later copies are dropped. With ``explain`` the
    kept hit lists the dropped ids under ``explain["duplicates"]``."""
    kept: dict[str, SearchResult] = {}
    for hit in hits:
        key = duplicate_key(hit.document.text)
        first = kept.get(key)
        if first is None:
            kept[key] = hit
        elif explain:
            first.explain = first.explain or {}
            first.explain.setdefault("duplicates", []).append(hit.document.id)
    return list(kept.values())


def jaccard(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> float:
    """``|a & b| / |a | b|``; 0.0 when both are empty."""
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (0.0 when either is zero)."""
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def mmr_order(relevance: Sequence[float], similarity: Similarity, lam: float, k: int) -> list[int]:
    """Indices of up to ``k`` candidates in MMR order; ties keep the pool order."""
    remaining = list(range(len(relevance)))
    chosen: list[int] = []
    max_sim = [0.0] * len(relevance)
    while remaining and len(chosen) < k:
        if chosen:
            best = max(remaining, key=lambda i: (lam * relevance[i] - (1 - lam) * max_sim[i], -i))
        else:
            best = max(remaining, key=lambda i: (relevance[i], -i))
        chosen.append(best)
        remaining.remove(best)
        for i in remaining:
            s = similarity(i, best)
            if s > max_sim[i]:
                max_sim[i] = s
    return chosen


def vector_similarity(vectors: Sequence[Sequence[float]]) -> Similarity:
    """Pairwise cosine over ``vectors`` (computed at once with numpy)."""
    from .vectors import as_unit_matrix

    unit = as_unit_matrix(vectors)
    sims = unit @ unit.T
    return lambda i, j: float(sims[i, j])


def term_similarity(texts: Sequence[str], analyzer: Any) -> Similarity:
    """Pairwise Jaccard over the analyzer's term sets of ``texts``."""
    sets = [frozenset(analyzer.terms(t)) for t in texts]
    return lambda i, j: jaccard(sets[i], sets[j])


def mmr_rerank(
    hits: list[SearchResult],
    lam: float,
    k: int,
    *,
    vectors: Sequence[Sequence[float] | None] | None = None,
    analyzer: Any = None,
    explain: bool = False,
) -> list[SearchResult]:
    """The ``k`` hits chosen by MMR from ``hits`` (best first); scores are left unchanged.

    ``vectors[i]`` belongs to ``hits[i]``; when any is missing, term Jaccard is used instead.
    """
    if not hits:
        return []
    raw = {str(i): h.score for i, h in enumerate(hits)}
    scores = max_scale(raw) if min(raw.values()) >= 0 else min_max(raw)
    relevance = [scores[str(i)] for i in range(len(hits))]
    if vectors is not None and all(v is not None and len(v) for v in vectors):
        similarity = vector_similarity(vectors)  # type: ignore[arg-type]
        measure = "cosine"
    else:
        if analyzer is None:
            from .analysis import Analyzer

            analyzer = Analyzer()
        similarity = term_similarity([h.document.text for h in hits], analyzer)
        measure = "jaccard"
    order = mmr_order(relevance, similarity, lam, k)
    out = [hits[i] for i in order]
    if explain:
        for i, hit in zip(order, out):
            hit.explain = hit.explain or {}
            hit.explain["mmr"] = {"lambda": lam, "pool_rank": i + 1, "similarity": measure}
    return out
