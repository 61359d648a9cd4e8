"""The contract suites against SQLiteStore."""

from __future__ import annotations

import pytest

from kbcli import SQLiteStore
from kbcli.testing import DocumentCatalogContract, KeywordIndexContract, VectorStoreContract


@pytest.fixture
def store(tmp_path):
    opened = SQLiteStore(tmp_path / "kb.db", busy_timeout=0.05)
    yield opened
    opened.close()


class TestVectorStore(VectorStoreContract):
    pass


class TestCatalog(DocumentCatalogContract):
    pass


class TestKeyword(KeywordIndexContract):
    pass
