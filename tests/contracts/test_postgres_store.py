"""The contract suites against PostgresStore on the session's real PostgreSQL server."""

from __future__ import annotations

import pytest

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


def _open(dsn: str, table: str):
    from kbcli.stores.postgres import PostgresStore

    return PostgresStore(dsn, table, busy_timeout=10.0)


@pytest.fixture
def store(pg_dsn, pg_table):
    opened = _open(pg_dsn, pg_table)
    yield opened
    opened.close()


@pytest.fixture
def reopen(store, pg_dsn, pg_table):
    """Close the store last returned (at first the fixture's) and connect again."""
    yield from reopener(store, lambda old: _open(pg_dsn, pg_table))


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
