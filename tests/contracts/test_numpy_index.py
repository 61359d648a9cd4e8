"""The VectorIndex suite against the default exact index (NumpyVectorIndex)."""

from __future__ import annotations

import pytest

from kbcli.stores.numpy_index import NumpyVectorIndex
from kbcli.testing import VectorIndexContract


@pytest.fixture
def vector_index():
    return NumpyVectorIndex()


class TestNumpyVectorIndex(VectorIndexContract):
    pass


def test_a_widening_filtered_search_scores_the_matrix_once(monkeypatch):
    """prefiltered_search asks for wider windows of one query's ranking; the index scores the
    matrix once for them (and again for the next search: nothing is cached across searches)."""
    import random

    from kbcli.stores.common import prefiltered_search
    from kbcli.text import vector_math as vectors

    rng = random.Random(3)
    index = NumpyVectorIndex()
    index.upsert(list(range(2000)), [[rng.random() for _ in range(8)] for _ in range(2000)])
    calls = []
    real = vectors.cosine_scores
    monkeypatch.setattr(vectors, "cosine_scores", lambda m, q: calls.append(1) or real(m, q))
    query = [rng.random() for _ in range(8)]
    allowed = set(range(0, 2000, 97))  # 21 ids: the first windows hold too few of them
    windows = []

    def passes(ids):
        windows.append(len(ids))
        return allowed & set(ids)

    hits = prefiltered_search(index, query, 10, passes, lambda: sorted(allowed))
    assert len(windows) >= 2 and len(calls) == 1
    assert hits == index.search(query, 10, sorted(allowed))  # the exact top 10 of the allowed
    assert len(calls) == 2  # the exact search above
    index.upsert([5000], [query])
    assert index.search(query, 1)[0][0] == 5000 and len(calls) == 3


def test_a_known_small_allowed_set_is_searched_without_the_walk():
    import random

    from kbcli.stores.common import FEW_ALLOWED, prefiltered_search

    rng = random.Random(4)
    index = NumpyVectorIndex()
    index.upsert(list(range(800)), [[rng.random() for _ in range(8)] for _ in range(800)])
    query = [rng.random() for _ in range(8)]
    small = list(range(0, 800, 2 * FEW_ALLOWED))  # 50 ids: 1/16 of the index
    asked = []

    def passes(ids):
        asked.append(len(ids))
        return set(ids) & set(small)

    hits = prefiltered_search(index, query, 5, passes, lambda: small, known=small)
    assert asked == [] and hits == index.search(query, 5, small)
    broad = list(range(0, 800, 2))  # half the index: the walk is cheaper
    hits = prefiltered_search(index, query, 5, lambda ids: set(ids) & set(broad), lambda: broad,
                              known=broad)  # fmt: skip
    assert hits == index.search(query, 5, broad)
    prefiltered_search(index, query, 5, passes, lambda: small, known=list(range(0, 800, 2)))
    assert asked  # a large known set still walks
