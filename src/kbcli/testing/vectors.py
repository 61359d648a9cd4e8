"""VectorIndex: nearest-neighbour search over vectors keyed by integer row ids.

Needs a ``vector_index`` fixture (an empty index); see :mod:`kbcli.testing`. An index whose
``exact`` is False is checked for the shape of its answers, not their equality to a scan.
"""

from __future__ import annotations

import math
import random

import pytest

from kbcli.protocols import VectorIndex, supports

POINTS = {
    1: [0.0, 1.0, 0.0],  # north
    2: [1.0, 0.0, 0.0],  # east
    3: [0.75, 0.75, 0.0],  # north-east
    4: [0.0, 0.0, 1.0],  # up
}


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


class VectorIndexContract:
    """Upsert, remove, len, cosine ranking, the allowed-id pre-filter and exactness."""

    def fill(self, index: VectorIndex) -> None:
        index.upsert(list(POINTS), list(POINTS.values()))

    def test_is_a_vector_index(self, vector_index: VectorIndex) -> None:
        assert supports(vector_index, VectorIndex)
        assert isinstance(vector_index.exact, bool)

    def test_empty_index(self, vector_index: VectorIndex) -> None:
        assert len(vector_index) == 0
        assert vector_index.search([1.0, 0.0, 0.0], 3) == []

    def test_search_ranks_by_cosine(self, vector_index: VectorIndex) -> None:
        self.fill(vector_index)
        assert len(vector_index) == 4
        hits = vector_index.search([0.1, 1.0, 0.0], 3)
        assert [i for i, _ in hits] == [1, 3, 2]
        assert [s for _, s in hits] == pytest.approx(
            [_cosine([0.1, 1.0, 0.0], POINTS[i]) for i in (1, 3, 2)], abs=1e-5
        )

    def test_k_larger_than_the_index(self, vector_index: VectorIndex) -> None:
        self.fill(vector_index)
        assert sorted(i for i, _ in vector_index.search([1.0, 1.0, 1.0], 50)) == [1, 2, 3, 4]

    def test_ties_by_id(self, vector_index: VectorIndex) -> None:
        vector_index.upsert([9, 5, 7], [[1.0, 0.0, 0.0]] * 3)
        assert [i for i, _ in vector_index.search([1.0, 0.0, 0.0], 3)] == [5, 7, 9]

    def test_allowed_is_a_pre_filter(self, vector_index: VectorIndex) -> None:
        self.fill(vector_index)
        hits = vector_index.search(POINTS[2], 2, allowed=[1, 4])
        assert sorted(i for i, _ in hits) == [1, 4]  # min(k, len(allowed)), not fewer
        assert [i for i, _ in vector_index.search(POINTS[2], 5, allowed=[3])] == [3]
        assert vector_index.search(POINTS[2], 5, allowed=[]) == []

    def test_allowed_ids_without_vectors_are_ignored(self, vector_index: VectorIndex) -> None:
        self.fill(vector_index)
        assert [i for i, _ in vector_index.search(POINTS[2], 5, allowed=[2, 99])] == [2]

    def test_upsert_replaces(self, vector_index: VectorIndex) -> None:
        self.fill(vector_index)
        vector_index.upsert([1], [[1.0, 0.0, 0.0]])
        assert len(vector_index) == 4
        assert sorted(i for i, _ in vector_index.search([1.0, 0.0, 0.0], 2)) == [1, 2]

    def test_remove(self, vector_index: VectorIndex) -> None:
        self.fill(vector_index)
        vector_index.remove([1, 42])
        assert len(vector_index) == 3
        assert 1 not in [i for i, _ in vector_index.search(POINTS[1], 10)]
        vector_index.remove([])
        assert len(vector_index) == 3

    def test_exact_index_equals_a_scan(self, vector_index: VectorIndex) -> None:
        rng = random.Random(5)
        ids = rng.sample(range(1, 10_000), 200)
        vecs = [[rng.uniform(-1, 1) for _ in range(8)] for _ in ids]
        vector_index.upsert(ids, vecs)
        vector_index.remove(ids[:20])
        live = dict(zip(ids[20:], vecs[20:]))
        allowed = rng.sample(sorted(live), 50)
        for allow in (None, allowed):
            query = [rng.uniform(-1, 1) for _ in range(8)]
            hits = vector_index.search(query, 10, allowed=allow)
            assert len(hits) == 10
            pool = live if allow is None else {i: live[i] for i in allow}
            assert {i for i, _ in hits} <= set(pool)
            scores = [s for _, s in hits]
            assert scores == sorted(scores, reverse=True)
            if vector_index.exact:
                want = sorted(pool, key=lambda i: (-_cosine(query, pool[i]), i))[:10]
                assert [i for i, _ in hits] == want

    def test_copies_of_one_vector(self, vector_index: VectorIndex) -> None:
        """The same vector under many ids (one chunk text in many files): each id is found,
        ties by id, and removing or moving some copies leaves the others."""
        self.fill(vector_index)
        vector_index.upsert([30, 10, 20, 40], [POINTS[2]] * 4)
        assert len(vector_index) == 8
        assert [i for i, _ in vector_index.search(POINTS[2], 3)] == [2, 10, 20]
        assert [i for i, _ in vector_index.search(POINTS[2], 5, allowed=[40, 30, 1])] == [
            30, 40, 1,
        ]  # fmt: skip
        vector_index.remove([2, 20])
        vector_index.upsert([10], [POINTS[4]])
        assert len(vector_index) == 6
        assert [i for i, _ in vector_index.search(POINTS[2], 2)] == [30, 40]
        assert [i for i, _ in vector_index.search(POINTS[4], 2)] == [4, 10]
        vector_index.remove([30, 40])
        assert [i for i, _ in vector_index.search(POINTS[2], 1)] == [3]

    def test_exact_index_with_copies_equals_a_scan(self, vector_index: VectorIndex) -> None:
        rng = random.Random(11)
        base = [[rng.gauss(0, 1) for _ in range(8)] for _ in range(60)]
        ids = rng.sample(range(1, 10_000), 240)
        vecs = [base[rng.randrange(len(base))] for _ in ids]  # every vector about 4 times
        vector_index.upsert(ids[:200], vecs[:200])
        vector_index.upsert(ids[200:], vecs[200:])
        vector_index.remove(ids[:30])
        live = dict(zip(ids[30:], vecs[30:]))
        for allow in (None, rng.sample(sorted(live), 40)):
            query = [rng.gauss(0, 1) for _ in range(8)]
            pool = live if allow is None else {i: live[i] for i in allow}
            for k in (1, 7, 25):
                hits = vector_index.search(query, k, allowed=allow)
                assert len(hits) == k and len({i for i, _ in hits}) == k
                assert {i for i, _ in hits} <= set(pool)
                for i, score in hits:
                    assert score == pytest.approx(_cosine(query, pool[i]), abs=1e-5)
                if vector_index.exact:
                    want = sorted(pool, key=lambda i: (-_cosine(query, pool[i]), i))[:k]
                    assert [s for _, s in hits] == pytest.approx(
                        [_cosine(query, pool[i]) for i in want], abs=1e-5
                    )
