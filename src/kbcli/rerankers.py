"""Rerankers reorder a recalled candidate pool; heavier ones load their models lazily."""

from __future__ import annotations

from .types import SearchResult


class PassthroughReranker:
    """Returns its input unchanged (the reference default)."""

    def rerank(self, query: str, results: list[SearchResult]) -> list[SearchResult]:
        """Return ``results`` as they are."""
        return results
