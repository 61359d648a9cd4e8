"""The contract suites against InMemoryStore (no persistence: it keeps nothing on disk)."""

from __future__ import annotations

import pytest

from kbcli import InMemoryStore
from kbcli.testing import (  # no PersistenceContract: nothing is kept on disk
    DocumentCatalogContract,
    EmbeddingCacheContract,
    FileLedgerContract,
    FilterDifferentialContract,
    FreshnessReadsContract,
    KeywordIndexContract,
    RoutesContract,
    VectorStoreContract,
)


@pytest.fixture
def store():
    return InMemoryStore()


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
