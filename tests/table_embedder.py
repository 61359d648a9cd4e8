"""Test helpers: an embedder with a fixed text -> vector table, and a store filled through it."""

from __future__ import annotations

from kbcli import Document, InMemoryStore, SQLiteStore


class TableEmbedder:
    """A fixed text -> vector table, so the dense route's ranking is known in advance."""

    provider, model, weak = "table", "t", False

    def __init__(self, table, keyword_sure_margin=None):
        self.table = table
        if keyword_sure_margin is not None:  # the per-query weight, as e5 and static declare
            self.keyword_sure_margin = keyword_sure_margin

    def embed_documents(self, texts):
        return [self.table.get(t, [0.0, 0.0, 1.0]) for t in texts]

    def embed_query(self, text):
        return self.table.get(text, [0.0, 0.0, 1.0])


def table_store(kind: str, tmp_path, texts: dict[str, str], embedder: TableEmbedder):
    """An in-memory or SQLite store holding ``texts`` (id -> text) embedded by ``embedder``."""
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "kb.db")
    store.add(
        [Document(i, t) for i, t in texts.items()], embedder.embed_documents(list(texts.values()))
    )
    return store
