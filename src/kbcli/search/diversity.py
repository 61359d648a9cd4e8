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

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from kbcli.search.fusion import max_scale, min_max
from kbcli.text.analysis import Analyzer
from kbcli.text.vector_math import as_unit_matrix
from kbcli.types import SearchResult

if TYPE_CHECKING:  # numpy is imported when an MMR search runs, not by the keyword path
    import numpy as np
    from numpy.typing import NDArray

    #: A pool's vectors: one per candidate (None when it has none), or a float matrix.
    Vectors = Sequence[Sequence[float] | None] | NDArray[np.floating[Any]]
    #: The same with a vector for every candidate.
    Complete = Sequence[Sequence[float]] | NDArray[np.floating[Any]]


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


class Similarity(Protocol):
    """Similarities of every candidate in a pool to one of them."""

    def to(self, j: int) -> NDArray[np.floating[Any]]:
        """A float array: the similarity of each candidate to candidate ``j``."""
        ...


class VectorSimilarity:
    """Cosine over the pool's vectors, one row at a time: the unit matrix (n x d, float32) is
    all it keeps. A pairwise matrix (n x n) was 6.4 GB for a pool of 40,000."""

    def __init__(self, vectors: Complete):
        import numpy as np

        # d x n: one candidate's row times it reads memory in order (twice as fast as n x d)
        self.columns: NDArray[np.float32] = np.ascontiguousarray(as_unit_matrix(vectors).T)

    def to(self, j: int) -> NDArray[np.float32]:
        return self.columns[:, j] @ self.columns


class TermSimilarity:
    """Jaccard overlap of the analyzer's term sets, one row at a time: ``|a & b|`` for every
    candidate comes from the postings of ``j``'s terms, ``|a | b|`` from the set sizes."""

    def __init__(self, texts: Sequence[str], analyzer: Analyzer) -> None:
        import numpy as np

        ids: dict[str, int] = {}
        self.terms = [
            np.array(sorted({ids.setdefault(t, len(ids)) for t in analyzer.terms(text)}), np.int64)
            for text in texts
        ]
        self.sizes = np.array([len(t) for t in self.terms], np.float64)
        holders: list[list[int]] = [[] for _ in ids]
        for row, terms in enumerate(self.terms):
            for term in terms.tolist():
                holders[term].append(row)
        self.postings = [np.array(rows, np.int64) for rows in holders]

    def to(self, j: int) -> NDArray[np.float64]:
        import numpy as np

        shared = np.zeros(len(self.terms), np.float64)
        for term in self.terms[j].tolist():
            shared[self.postings[term]] += 1.0  # each row once per term
        union = self.sizes + self.sizes[j] - shared
        out = np.zeros_like(shared)
        np.divide(shared, union, out=out, where=union > 0)
        return out


def mmr_order(relevance: Sequence[float], similarity: Similarity, lam: float, k: int) -> list[int]:
    """Indices of up to ``k`` candidates in MMR order; ties keep the pool order.

    Greedy, keeping for each candidate its largest similarity to those picked so far, times
    ``1 - lambda`` (one vector of the pool's length, updated with one row of similarities per
    pick): memory is that of the pool's vectors, never a pool x pool matrix. The arithmetic is
    that of the textbook loop, in doubles, so the order is the same."""
    import numpy as np

    n = len(relevance)
    rel = np.asarray(relevance, dtype=np.float64)
    gain = lam * rel  # lambda x relevance; -inf once picked
    penalty = np.zeros(n, dtype=np.float64)  # (1 - lambda) x max similarity to the picked
    score = np.empty(n, dtype=np.float64)
    row = np.empty(n, dtype=np.float64)
    chosen: list[int] = []
    wanted = min(k, n)
    while len(chosen) < wanted:
        if chosen:
            np.subtract(gain, penalty, out=score)
            best = int(np.argmax(score))  # the first of equal maxima: pool order
        else:
            best = int(np.argmax(rel))
        chosen.append(best)
        gain[best] = -np.inf
        if len(chosen) < wanted:
            np.multiply(similarity.to(best), 1 - lam, out=row, dtype=np.float64)
            np.maximum(penalty, row, out=penalty)
    return chosen


def mmr_rerank(
    hits: list[SearchResult],
    lam: float,
    k: int,
    *,
    vectors: Vectors | None = None,
    analyzer: Analyzer | None = None,
    explain: bool = False,
) -> list[SearchResult]:
    """The ``k`` hits chosen by MMR from ``hits`` (best first); scores are left unchanged.

    ``vectors[i]`` belongs to ``hits[i]`` (a list of vectors, or a float matrix); when any is
    missing, term Jaccard is used instead.
    """
    if not hits:
        return []
    raw = {str(i): h.score for i, h in enumerate(hits)}
    scores = max_scale(raw) if min(raw.values()) >= 0 else min_max(raw)
    relevance = [scores[str(i)] for i in range(len(hits))]
    similarity: Similarity
    if vectors is not None and _complete(vectors):
        similarity = VectorSimilarity(vectors)
        measure = "cosine"
    else:
        if analyzer is None:
            analyzer = Analyzer()
        similarity = TermSimilarity([h.document.text for h in hits], analyzer)
        measure = "jaccard"
    order = mmr_order(relevance, similarity, lam, k)
    out = [hits[i] for i in order]
    if explain:
        for i, hit in zip(order, out):
            hit.explain = hit.explain or {}
            hit.explain["mmr"] = {"lambda": lam, "pool_rank": i + 1, "similarity": measure}
    return out


def _complete(vectors: Vectors) -> TypeGuard[Complete]:
    """True when every candidate has a vector (a matrix always has)."""
    if not isinstance(vectors, Sequence):  # a matrix
        return bool(vectors.ndim == 2 and vectors.shape[1])
    return all(v is not None and len(v) for v in vectors)
