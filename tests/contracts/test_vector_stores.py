"""Run the vector-store contract against every built-in store."""

import pytest

from kbcli import InMemoryStore, SQLiteStore

from .vector_store import VectorStoreContract


class TestInMemoryStore(VectorStoreContract):
    @pytest.fixture
    def store(self):
        return InMemoryStore()


class TestSQLiteStore(VectorStoreContract):
    @pytest.fixture
    def store(self, tmp_path):
        return SQLiteStore(tmp_path / "kb.db")
