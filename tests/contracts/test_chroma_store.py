"""The contract suites against ChromaStore (SQLite catalog, Chroma collection as the vector
index) and the VectorIndex suite against ChromaVectorIndex."""

from __future__ import annotations

import uuid

import pytest

from extras import need

need("chromadb")

from kbcli.stores.chroma.store import ChromaStore, ChromaVectorIndex  # noqa: E402
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
    opened = ChromaStore(tmp_path / "chroma", busy_timeout=0.05)
    yield opened
    opened.close()


@pytest.fixture
def reopen(store):
    """Close the store last returned (at first the fixture's) and open it again."""
    yield from reopener(store, lambda old: ChromaStore(old.chroma_path, busy_timeout=0.05))


@pytest.fixture(scope="module")
def _client():
    import chromadb
    from chromadb.config import Settings

    return chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))


@pytest.fixture
def vector_index(_client):
    collection = _client.create_collection(
        f"c{uuid.uuid4().hex}", embedding_function=None, metadata={"hnsw:space": "cosine"}
    )
    return ChromaVectorIndex(collection)


class TestChromaVectorIndex(VectorIndexContract):
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
