"""The contract suites against FaissStore (SQLite catalog, FAISS vector index) and the
VectorIndex suite against FaissVectorIndex, exact (Flat) and approximate (HNSW, IVF)."""

from __future__ import annotations

import pytest

from extras import need

need("faiss")

from kbcli.stores.faiss.store import FaissStore, FaissVectorIndex  # noqa: E402
from kbcli.testing import (  # noqa: E402
    DocumentCatalogContract,
    EmbeddingCacheContract,
    FileLedgerContract,
    FilterDifferentialContract,
    FreshnessReadsContract,
    KeywordIndexContract,
    PersistenceContract,
    RoutesContract,
    VectorIndexContract,
    VectorStoreContract,
    reopener,
)


@pytest.fixture
def store(tmp_path):
    opened = FaissStore(path=tmp_path / "kb.db", busy_timeout=0.05)
    yield opened
    opened.close()


@pytest.fixture
def reopen(store):
    """Close the store last returned (at first the fixture's) and open it again."""
    yield from reopener(store, lambda old: FaissStore(path=old.path, busy_timeout=0.05))


@pytest.fixture(params=["Flat", "HNSW16", "IVF2,Flat"])
def vector_index(request):
    return FaissVectorIndex(index_factory=request.param)


class TestFaissVectorIndex(VectorIndexContract):
    pass


class TestVectorStore(VectorStoreContract):
    pass


class TestCatalog(DocumentCatalogContract):
    pass


class TestKeyword(KeywordIndexContract):
    pass


class TestFileLedger(FileLedgerContract):
    pass


class TestFreshnessReads(FreshnessReadsContract):
    pass


class TestFilterDifferential(FilterDifferentialContract):
    pass


class TestEmbeddingCache(EmbeddingCacheContract):
    pass


class TestRoutes(RoutesContract):
    pass


class TestPersistence(PersistenceContract):
    pass
