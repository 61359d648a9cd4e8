"""Two routes' ranked hits made one list (:func:`fuse`): the hybrid retriever's last step,
the same at any recall depth, with what ``--explain`` says about it."""

from __future__ import annotations

import math
from typing import Any

from kbcli.errors import InvalidOptionError
from kbcli.search.fusion import (
    FUSION_WINDOW,
    KEYWORD_SURE_MARGIN,
    MIN_DENSE_ALPHA,
    below_floor,
    keyword_first_fusion,
    rrf_fusion,
    weighted_fusion,
    window_scale,
)
from kbcli.text.analysis import Analyzer
from kbcli.types import SearchOptions, SearchResult


def option_alpha(options: SearchOptions) -> float:
    """``options.alpha``: a number once the options exist (``SearchOptions`` puts
    :data:`~kbcli.types.DEFAULT_ALPHA` there when none was given)."""
    alpha = options.alpha
    if alpha is None:  # only a caller that set it to None after construction
        raise InvalidOptionError("alpha must be a number between 0 and 1, got None")
    return alpha


def tied(hits: list[SearchResult]) -> bool:
    """True when two neighbours of ``hits`` (one route's ranking) have the same score."""
    return any(a.score == b.score for a, b in zip(hits, hits[1:]))


def by_source(hits: list[SearchResult]) -> list[tuple[str, float]]:
    """``(file, score)`` of each hit: a file's chunks are one document to the margin."""
    return [(str(h.document.metadata.get("source") or h.document.id), h.score) for h in hits]


def confidence_reason(base: float, margin: float, sure: float = KEYWORD_SURE_MARGIN) -> str:
    """What ``--explain`` prints beside the per-query alpha (see
    :func:`~kbcli.search.fusion.confident_alpha`)."""
    if margin >= sure:
        how = "keyword route sure"
    elif margin <= 0.0:
        how = "keyword route unsure"
    else:
        how = "keyword route fairly sure"
    return (
        f"per query: {how}, its top file leads the next by {margin:.0%} of its score; "
        f"{base:g} at 0%, {MIN_DENSE_ALPHA:g} from {sure:.0%}"
    )


def named_hit(query: str, keyword_hits: list[SearchResult], analyzer: Analyzer) -> str | None:
    """The id of the best keyword hit whose document's ``title`` has exactly the query's
    terms, e.g. the page titled ``tar`` for the query "tar" (which BM25 may rank below
    ``git-get-tar-commit-id``); None when there is none."""
    terms = set(analyzer.query_counts(query))
    if not terms:
        return None
    for hit in keyword_hits:
        title = hit.document.metadata.get("title")
        if isinstance(title, str) and set(analyzer.query_counts(title)) == terms:
            return hit.document.id
    return None


def fuse(
    keyword_hits: list[SearchResult],
    dense_hits: list[SearchResult],
    k: int,
    options: SearchOptions,
    default_alpha: float,
    *,
    keyword_first: bool = False,
    floor: float | None = None,
    named: str | None = None,
    window: int = FUSION_WINDOW,
) -> list[SearchResult]:
    """Combine two ranked lists as ``options.fusion`` says, the same way at any recall depth.

    Only each route's first ``window`` hits earn fused score (weighted: scaled over that
    window, :func:`~kbcli.search.fusion.window_scale`; rrf: their ranks), so a document's score
    never depends on how many were recalled below it; documents past both windows score 0
    and follow in the order of their better route rank, which is past the window of a
    shallower recall too: a deeper recall only adds hits after those it had. That holds when
    both lists are their route's ranking cut at one depth of at least ``window`` (or all it
    found), best first, ties in a fixed order (every store: by id). Ties go to the better route
    rank, then the document id.

    ``options.alpha`` overrides ``default_alpha`` for weighted fusion; ``keyword_first`` (weak
    dense route) uses :func:`~kbcli.search.fusion.keyword_first_fusion` instead of min-max for the
    keyword side. ``floor``: a document outside the keyword route's window whose dense score
    is under it gets nothing from the dense route, and is dropped unless the keyword route
    found it (:func:`~kbcli.search.fusion.below_floor`). ``named``: the id of a keyword hit whose
    title is the query; it comes first (scored as the best fused score).
    With ``options.explain`` each hit records each route's rank and raw score (None when that
    route missed it), the fused score, the fusion, the window and (weighted) the alpha.
    """
    docs = {hit.document.id: hit.document for hit in keyword_hits + dense_hits}
    keyword_scores = {hit.document.id: hit.score for hit in keyword_hits}
    dense_scores = {hit.document.id: hit.score for hit in dense_hits}
    keyword_rank = {h.document.id: r for r, h in enumerate(keyword_hits, start=1)}
    dense_rank = {h.document.id: r for r, h in enumerate(dense_hits, start=1)}
    alpha = option_alpha(options) if options.alpha_chosen else default_alpha
    keyword_window = {h.document.id for h in keyword_hits[:window]}
    muted = below_floor(dense_scores, keyword_window, floor)
    if options.fusion == "rrf":
        fused = rrf_fusion([h.document.id for h in keyword_hits], window=window)
        dense_part = rrf_fusion([h.document.id for h in dense_hits], window=window)
        for doc_id, part in dense_part.items():
            fused[doc_id] = fused.get(doc_id, 0.0) + (0.0 if doc_id in muted else part)
    elif keyword_first:
        fused = keyword_first_fusion(
            dense_scores, keyword_scores, alpha, window=window, muted=muted
        )
    else:
        fused = weighted_fusion(dense_scores, keyword_scores, alpha, window=window, muted=muted)
    # A document's better route rank, the dense one only where its dense score counts: the
    # order past the windows, and the depth from which a recall finds (and keeps) it.
    first_rank = {
        doc_id: min(
            keyword_rank.get(doc_id, math.inf),
            math.inf if doc_id in muted else dense_rank.get(doc_id, math.inf),
        )
        for doc_id in fused
    }
    for doc_id in muted:
        if doc_id not in keyword_rank:
            del fused[doc_id]
    if named is not None and named in fused:
        fused[named] = max(fused.values())
    tie_break: dict[str, float] = {}
    if keyword_first and options.fusion != "rrf":
        # exact keyword ties inside the keyword window go to the dense route; past it, to the
        # keyword rank (a tied hit a deeper recall finds must not pass the ones shown)
        scaled = window_scale(dense_scores, window)
        tie_break = {d: v for d, v in scaled.items() if d in keyword_window}
    best = sorted(
        fused.items(),
        key=lambda item: (
            item[0] != named,
            -item[1],
            -tie_break.get(item[0], 0.0),
            first_rank[item[0]],
            item[0],
        ),
    )
    best = best[:k]
    results = [SearchResult(docs[doc_id], score) for doc_id, score in best]
    if options.explain:
        keyword_parts = {h.document.id: h.explain or {} for h in keyword_hits}
        for hit in results:
            doc_id = hit.document.id
            keyword = _route(keyword_rank, keyword_scores, doc_id)
            if keyword is not None:
                keyword.update(keyword_parts[doc_id])
            hit.explain = {
                "keyword": keyword,
                "dense": _route(dense_rank, dense_scores, doc_id),
                "fused": hit.score,
                "fusion": options.fusion,
                "window": window,
            }
            if options.fusion == "weighted":
                hit.explain["alpha"] = alpha
                if keyword_first:
                    hit.explain["keyword_first"] = True
            if doc_id == named:
                hit.explain["named"] = True
            if floor is not None and math.isfinite(floor):
                hit.explain["floor"] = floor
            elif floor is not None:
                hit.explain["dense_only"] = (
                    "none kept (nonsense, or a dense route not trusted for this query)"
                )
    return results


def _route(ranks: dict[str, int], scores: dict[str, float], doc_id: str) -> dict[str, Any] | None:
    if doc_id not in ranks:
        return None
    score = scores[doc_id]
    return {"rank": ranks[doc_id], "score": score if math.isfinite(score) else None}
