"""Score fusion as small pure functions (BM25 itself lives in :mod:`kbcli.bm25`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .bm25 import MAX_SCORED_TERMS, SOURCE_WEIGHT, bm25_idf, bm25_term  # noqa: F401 (re-exported)

RRF_K = 60
# Per-query dense weight (:func:`confident_alpha`): a keyword top-1 document that leads the
# second by this share of its score is "sure", and the dense route then only breaks near-ties.
# Measured over the recorded routes of SciFact train, Cranfield, CMRC2018, DRCD dev, tldr and
# the man pages (MiniLM, static, e5; docs/quality.md): 0.35 kept DRCD at keyword with e5
# (a fixed 0.6: hit@1 -0.047) and kept most of MiniLM's gains on the task sets.
KEYWORD_SURE_MARGIN = 0.35
MIN_DENSE_ALPHA = 0.001  # the dense weight at or past the sure margin: it still breaks ties


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


def below_floor(
    dense: Mapping[str, float], keyword: Mapping[str, float], floor: float | None
) -> set[str]:
    """The documents only the dense route found whose score is under ``floor`` (the index's
    calibrated relevance floor, :mod:`kbcli.calibration`): look-alikes, not hits. Dropped
    after fusion, so both routes are still normalised over their whole pool."""
    if floor is None:
        return set()
    return {key for key, value in dense.items() if key not in keyword and value < floor}


def keyword_margin(scores: Iterable[tuple[str, float]]) -> float:
    """How far the keyword route's best document leads its second: ``(best - second) / best``
    over ``(document, score)`` pairs, each document by its best score (its chunks are one
    document). 1.0 when one document matched, 0.0 when none did or the best score is not
    positive."""
    best: dict[str, float] = {}
    for key, value in scores:
        if value > best.get(key, float("-inf")):
            best[key] = value
    ordered = sorted(best.values(), reverse=True)
    if not ordered or ordered[0] <= 0.0:
        return 0.0
    if len(ordered) == 1:
        return 1.0
    return min(1.0, max(0.0, (ordered[0] - ordered[1]) / ordered[0]))


def confident_alpha(
    alpha: float, margin: float, sure: float = KEYWORD_SURE_MARGIN, least: float = MIN_DENSE_ALPHA
) -> float:
    """The dense weight for one query: ``alpha`` where the keyword route is unsure (``margin``
    0, :func:`keyword_margin`), falling linearly to ``least`` at ``sure`` and beyond, so a
    document the keyword route is sure of is not pushed down by look-alike vectors."""
    if sure <= 0.0:
        return least
    return max(min(least, alpha), alpha * max(0.0, 1.0 - margin / sure))
