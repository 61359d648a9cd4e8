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
