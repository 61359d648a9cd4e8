"""The contract suites against SQLiteStore."""

from __future__ import annotations

import pytest

from kbcli import SQLiteStore
from kbcli.testing import (
    DocumentCatalogContract,
    EmbeddingCacheContract,
    FileLedgerContract,
    FilterDifferentialContract,
    FreshnessReadsContract,
    KeywordIndexContract,
    PersistenceContract,
    RoutesContract,
    VectorStoreContract,
    reopener,
)


@pytest.fixture
def store(tmp_path):
    opened = SQLiteStore(tmp_path / "kb.db", busy_timeout=0.05)
    yield opened
    opened.close()


@pytest.fixture
def reopen(store):
    """Close the store last returned (at first the fixture's) and open it again."""
    yield from reopener(store, lambda old: SQLiteStore(old.path, busy_timeout=0.05))


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
