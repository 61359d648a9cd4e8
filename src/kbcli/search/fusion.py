"""Score fusion as small pure functions (BM25 itself lives in :mod:`kbcli.text.bm25`)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from kbcli.text.bm25 import MAX_SCORED_TERMS, SOURCE_WEIGHT, bm25_idf, bm25_term  # noqa: F401 (re-exported)

RRF_K = 60
# Hybrid fusion reads each route's best FUSION_WINDOW hits only, however deep it recalled: they
# set the scale (best = 1, the window's lowest = 0) and only they earn fused score. Scaled over
# the whole recalled pool, every fused score moved with the pool's lowest score, and the pool
# grows with k (kb search by file recalls max(4k, 50) chunks, kb eval 200): -k 5 and -k 100
# put different files first (52 of the 100 tldr task questions with MiniLM). Every hybrid
# search recalls at least this many per route, so the window, and every fused score, is the
# same at any k. 100 is what kb search's default -k already recalled per route: its rankings
# there are unchanged (SciFact, Cranfield, tldr with MiniLM); 50 lost 0.010 nDCG@10 on
# Cranfield, 200 gained 0.005 there (none elsewhere) for a quarter more search time
# (docs/quality.md, "One ranking whatever -k").
FUSION_WINDOW = 100
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


def window_scale(scores: Mapping[str, float], window: int = FUSION_WINDOW) -> dict[str, float]:
    """Min-max over the best ``window`` scores, clipped at 0: the best scores 1, the window's
    lowest 0, and every document ranked past the window 0, so a document's value does not
    depend on how many more were recalled below it. When the window's scores are all equal,
    its documents score 1.0. Equal scores keep ``scores``' order (the route's ranking)."""
    if not scores:
        return {}
    ranked = sorted(scores.items(), key=lambda item: -item[1])
    inside = ranked[:window]
    hi, lo = inside[0][1], inside[-1][1]
    out = dict.fromkeys(scores, 0.0)
    span = hi - lo
    for key, value in inside:
        out[key] = 1.0 if span <= 1e-12 else (value - lo) / span
    return out


def weighted_fusion(
    dense: Mapping[str, float],
    keyword: Mapping[str, float],
    alpha: float,
    *,
    window: int = FUSION_WINDOW,
    muted: Collection[str] = (),
) -> dict[str, float]:
    """``alpha * dense + (1 - alpha) * keyword``, each route scaled over its best ``window``
    (:func:`window_scale`).

    A document found by one route only gets 0 from the other; the dense scores of ``muted``
    documents count 0 (they still take their place in the dense window).
    """
    nd, nk = window_scale(dense, window), window_scale(keyword, window)
    return {
        key: alpha * (0.0 if key in muted else nd.get(key, 0.0)) + (1.0 - alpha) * nk.get(key, 0.0)
        for key in nd.keys() | nk.keys()
    }


def max_scale(scores: Mapping[str, float]) -> dict[str, float]:
    """Divide non-negative scores by the largest, so every found document keeps a score > 0."""
    top = max(scores.values(), default=0.0)
    if top <= 0.0:
        return {key: 0.0 for key in scores}
    return {key: max(value, 0.0) / top for key, value in scores.items()}


def keyword_first_fusion(
    dense: Mapping[str, float],
    keyword: Mapping[str, float],
    alpha: float,
    *,
    window: int = FUSION_WINDOW,
    muted: Collection[str] = (),
) -> dict[str, float]:
    """Fusion for a weak dense route: the keyword ranking decides, the dense route fills in.

    Keyword hits score ``alpha + (1 - alpha) * keyword / best_keyword`` (in ``[alpha, 1]``;
    the best keyword score does not depend on the recall depth), documents only the dense
    route found score ``alpha * dense`` (scaled over the dense route's best ``window``,
    :func:`window_scale`, so in ``[0, alpha]``; ``muted`` ones 0): every keyword hit ranks
    above every dense-only document, in keyword order; callers break exact keyword ties with
    the dense score.
    """
    nd, nk = window_scale(dense, window), max_scale(keyword)
    return {
        key: alpha + (1.0 - alpha) * nk[key]
        if key in nk
        else (0.0 if key in muted else alpha * nd.get(key, 0.0))
        for key in nd.keys() | nk.keys()
    }


def rrf_fusion(
    *rankings: list[str], k: int = RRF_K, window: int | None = FUSION_WINDOW
) -> dict[str, float]:
    """Reciprocal rank fusion (Cormack et al. 2009): ``sum 1 / (k + rank)``, rank from 1,
    over each ranking's first ``window`` (None: all of it); a document ranked only past the
    windows scores 0, so no score depends on how deep the rankings go."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            part = 1.0 / (k + rank) if window is None or rank <= window else 0.0
            fused[key] = fused.get(key, 0.0) + part
    return fused


def below_floor(
    dense: Mapping[str, float], keyword: Collection[str], floor: float | None
) -> set[str]:
    """The documents of ``dense`` not in ``keyword`` whose dense score is under ``floor`` (the
    index's calibrated relevance floor, :mod:`kbcli.search.calibration`): look-alikes, not hits.
    :func:`~kbcli.search.retrievers.fuse` passes the keyword route's window as ``keyword``: their
    dense score counts 0, and they are dropped unless the keyword route found them deeper."""
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
