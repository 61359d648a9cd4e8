"""Contract test suites for kbcli stores, one mixin class per capability.

A backend's test module defines the fixtures and subclasses the mixins it supports::

    import pytest
    from kbcli.testing import DocumentCatalogContract, KeywordIndexContract, PersistenceContract

    @pytest.fixture
    def store(tmp_path):            # an empty store
        s = MyStore(tmp_path / "db")
        yield s
        s.close()

    @pytest.fixture
    def reopen(store):              # persistence only: close, return a store on the same data
        return lambda: (store.close(), MyStore(store.path))[1]

    class TestCatalog(DocumentCatalogContract): ...
    class TestKeyword(KeywordIndexContract): ...
    class TestPersistence(PersistenceContract): ...

A standalone vector index (:class:`~kbcli.protocols.VectorIndex`) runs
:class:`VectorIndexContract` with a ``vector_index`` fixture (an empty index) instead.
A store that cannot persist leaves out :class:`PersistenceContract`; a test is overridden only
where a backend legitimately differs, saying why. The mixins need pytest (this package is for
tests: ``import kbcli`` never imports it).
"""

from __future__ import annotations

from kbcli.testing._common import TableEmbedder, reopener
from kbcli.testing.cache import EmbeddingCacheContract
from kbcli.testing.catalog import DocumentCatalogContract
from kbcli.testing.filters import FilterDifferentialContract
from kbcli.testing.keyword import KeywordIndexContract
from kbcli.testing.ledger import FileLedgerContract, FreshnessReadsContract
from kbcli.testing.persistence import PersistenceContract
from kbcli.testing.routes import RoutesContract
from kbcli.testing.vector_store import VectorStoreContract
from kbcli.testing.vectors import VectorIndexContract

__all__ = [
    "DocumentCatalogContract",
    "EmbeddingCacheContract",
    "FileLedgerContract",
    "FilterDifferentialContract",
    "FreshnessReadsContract",
    "KeywordIndexContract",
    "PersistenceContract",
    "RoutesContract",
    "TableEmbedder",
    "VectorIndexContract",
    "VectorStoreContract",
    "reopener",
]
