"""The contract suites against SQLiteStore."""

from __future__ import annotations

import pytest

from kbcli import SQLiteStore
from kbcli.testing import (
    DocumentCatalogContract,
    EmbeddingCacheContract,
    FileLedgerContract,
    KeywordIndexContract,
    PersistenceContract,
    RoutesContract,
    VectorStoreContract,
)


@pytest.fixture
def store(tmp_path):
    opened = SQLiteStore(tmp_path / "kb.db", busy_timeout=0.05)
    yield opened
    opened.close()


@pytest.fixture
def reopen(store):
    """Close the store last returned (at first the fixture's) and open the file again."""
    current = [store]
    yield lambda: _swap(current)
    current[-1].close()


def _swap(current: list[SQLiteStore]) -> SQLiteStore:
    current[-1].close()
    current.append(SQLiteStore(current[-1].path, busy_timeout=0.05))
    return current[-1]


class TestVectorStore(VectorStoreContract):
    pass


class TestCatalog(DocumentCatalogContract):
    pass


class TestKeyword(KeywordIndexContract):
    pass


class TestFileLedger(FileLedgerContract):
    pass


class TestEmbeddingCache(EmbeddingCacheContract):
    pass


class TestRoutes(RoutesContract):
    pass


class TestPersistence(PersistenceContract):
    pass
