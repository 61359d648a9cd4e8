"""Scoring formulas as small pure functions: BM25 and score fusion."""

from __future__ import annotations

import math
from collections.abc import Mapping

RRF_K = 60
# Keyword search scores a chunk as its own BM25 plus SOURCE_WEIGHT times the BM25 of its whole
# source (file). Chunks are short, so a query's words are often spread over a file's chunks;
# the source part lets the file's evidence count. Measured with 500-character chunks (nDCG@10,
# docs/quality.md): SciFact train 0.670 -> 0.696, Cranfield 0.358 -> 0.377 at 2.0.
SOURCE_WEIGHT = 2.0
# Query terms scored at most (the rarest ones found in the index): pasted paragraphs stay fast.
MAX_SCORED_TERMS = 32


def bm25_idf(n_docs: int, df: int) -> float:
    """BM25 idf, Lucene form (never negative): ``ln((N - df + 0.5) / (df + 0.5) + 1)``."""
    return math.log((n_docs - df + 0.5) / (df + 0.5) + 1.0)


def bm25_term(tf: float, dl: float, avgdl: float, k1: float = 1.5, b: float = 0.75) -> float:
    """BM25 term-frequency part: ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``."""
    norm = 1.0 - b + b * (dl / avgdl if avgdl > 0 else 0.0)
    return tf * (k1 + 1.0) / (tf + k1 * norm)


def min_max(scores: Mapping[str, float]) -> dict[str, float]:
    """Scale scores to [0, 1]; when all are equal every score becomes 1.0."""
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi - lo <= 1e-12:
        return {key: 1.0 for key in scores}
    span = hi - lo
    return {key: (value - lo) / span for key, value in scores.items()}


def weighted_fusion(
    dense: Mapping[str, float], keyword: Mapping[str, float], alpha: float
) -> dict[str, float]:
    """``alpha * dense + (1 - alpha) * keyword`` over min-max normalised routes.

    A document found by one route only gets 0 from the other.
    """
    nd, nk = min_max(dense), min_max(keyword)
    return {
        key: alpha * nd.get(key, 0.0) + (1.0 - alpha) * nk.get(key, 0.0)
        for key in set(nd) | set(nk)
    }


def max_scale(scores: Mapping[str, float]) -> dict[str, float]:
    """Divide non-negative scores by the largest, so every found document keeps a score > 0."""
    top = max(scores.values(), default=0.0)
    if top <= 0.0:
        return {key: 0.0 for key in scores}
    return {key: max(value, 0.0) / top for key, value in scores.items()}


def keyword_first_fusion(
    dense: Mapping[str, float], keyword: Mapping[str, float], alpha: float
) -> dict[str, float]:
    """Fusion for a weak dense route: the keyword ranking decides, the dense route fills in.

    Keyword hits score ``alpha + (1 - alpha) * keyword / best_keyword`` (in ``[alpha, 1]``),
    documents only the dense route found score ``alpha * dense`` (min-max scaled, so in
    ``[0, alpha]``): every keyword hit ranks above every dense-only document, in keyword
    order; callers break exact keyword ties with the dense score.
    """
    nd, nk = min_max(dense), max_scale(keyword)
    return {
        key: alpha + (1.0 - alpha) * nk[key] if key in nk else alpha * nd.get(key, 0.0)
        for key in set(nd) | set(nk)
    }


def rrf_fusion(*rankings: list[str], k: int = RRF_K) -> dict[str, float]:
    """Reciprocal rank fusion (Cormack et al. 2009): ``sum 1 / (k + rank)``, rank from 1."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            fused[key] = fused.get(key, 0.0) + 1.0 / (k + rank)
    return fused
