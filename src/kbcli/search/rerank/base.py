"""What every reranker shares: the passthrough default and turning scores into results."""

from __future__ import annotations

import math
from collections.abc import Sequence

from kbcli.types import SearchResult


class PassthroughReranker:
    """Returns its input unchanged (the reference default)."""

    def rerank(self, query: str, results: list[SearchResult]) -> list[SearchResult]:
        """Return ``results`` as they are."""
        return results


def sigmoid(x: float) -> float:
    """``1 / (1 + e^-x)``, a logit as a relevance in [0, 1] (overflow-safe)."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def rescored(results: Sequence[SearchResult], scores: Sequence[float]) -> list[SearchResult]:
    """New results carrying ``scores[i]`` for ``results[i]``, best first; equal scores keep
    the recall order. Documents and ``explain`` are the inputs' own."""
    if len(scores) != len(results):
        raise ValueError(f"{len(scores)} scores for {len(results)} results")
    order = sorted(range(len(results)), key=lambda i: -scores[i])
    return [SearchResult(results[i].document, float(scores[i]), results[i].explain) for i in order]
