"""The VectorIndex suite against a brute-force reference index (a scan: exact by definition).

No store in this tree exposes a VectorIndex yet; the reference proves the suite itself. A real
index (the numpy one, FAISS ...) adds its own fixture file beside this one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from kbcli.testing import VectorIndexContract


class ScanIndex:
    """Every vector in a dict; search scores all of them."""

    exact = True

    def __init__(self) -> None:
        self.vectors: dict[int, list[float]] = {}

    def upsert(self, ids: Sequence[int], vectors: Sequence[Sequence[float]]) -> None:
        for i, vec in zip(ids, vectors):
            self.vectors[int(i)] = list(vec)

    def remove(self, ids: Sequence[int]) -> None:
        for i in ids:
            self.vectors.pop(int(i), None)

    def search(
        self, query: Sequence[float], k: int, allowed: Sequence[int] | None = None
    ) -> list[tuple[int, float]]:
        pool = (
            self.vectors
            if allowed is None
            else {i: self.vectors[i] for i in allowed if i in self.vectors}
        )
        qn = math.sqrt(sum(x * x for x in query))

        def score(vec: list[float]) -> float:
            norm = math.sqrt(sum(x * x for x in vec)) * qn
            return sum(x * y for x, y in zip(query, vec)) / norm if norm else 0.0

        ranked = sorted(((i, score(v)) for i, v in pool.items()), key=lambda h: (-h[1], h[0]))
        return ranked[:k]

    def __len__(self) -> int:
        return len(self.vectors)


@pytest.fixture
def vector_index():
    return ScanIndex()


class TestScanIndex(VectorIndexContract):
    pass
