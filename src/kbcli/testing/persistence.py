"""Persistence: everything a store holds is there again after closing and reopening it.

Needs a ``store`` fixture (an empty store with every capability it persists) and a ``reopen``
fixture: a callable that closes the store (the one it returned last, at first the ``store``
fixture's) and returns a new one on the same data. A store that
cannot persist does not inherit this mixin; see :mod:`kbcli.testing`.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kbcli.testing._common import CATALOG, IDS, INFO, VECTORS, Boom, FullStore, fill, ids
from kbcli.testing.ledger import chunks, record, vectors
from kbcli.types import Document


class PersistenceContract:
    """Documents, vectors, keyword index, meta, embedder, file records and cache survive."""

    def test_documents_survive(self, store: FullStore, reopen: Callable[[], FullStore]) -> None:
        fill(store)
        before = store.get(IDS)
        again = reopen()
        after = again.get(IDS)
        assert [(d.id, d.text, d.metadata, d.created_at) for d in after] == [
            (d.id, d.text, d.metadata, d.created_at) for d in before
        ]
        assert ids(again.iter_documents()) == IDS
        assert again.count() == 5
        assert again.sources() == [("a.md", 2), ("b.md", 2)]

    def test_insertion_order_survives(
        self, store: FullStore, reopen: Callable[[], FullStore]
    ) -> None:
        fill(store)
        store.add([Document("a1", "alpha again", {"source": "a.md"})], [[0.5, 0.5, 0.0]])
        again = reopen()
        assert ids(again.iter_documents()) == ["a2", "b1", "b2", "loose", "a1"]

    def test_vectors_survive(self, store: FullStore, reopen: Callable[[], FullStore]) -> None:
        fill(store)
        again = reopen()
        got = again.get(IDS, with_embeddings=True)
        assert [d.embedding for d in got] == [VECTORS[i] for i in IDS]
        assert ids(again.search([0.0, 0.25, 1.0], k=1)) == ["loose"]

    def test_keyword_index_survives(
        self, store: FullStore, reopen: Callable[[], FullStore]
    ) -> None:
        fill(store)
        before = [(h.document.id, h.score) for h in store.keyword_search("alpha one", k=5)]
        again = reopen()
        after = [(h.document.id, h.score) for h in again.keyword_search("alpha one", k=5)]
        assert [i for i, _ in after] == [i for i, _ in before] and before
        assert [s for _, s in after] == pytest.approx([s for _, s in before])

    def test_deletes_survive(self, store: FullStore, reopen: Callable[[], FullStore]) -> None:
        fill(store)
        store.remove(["a1"])
        store.delete_source("b.md")
        again = reopen()
        assert ids(again.list_all()) == ["a2", "loose"]
        assert ids(again.keyword_search("beta", k=5)) == []
        assert "b1" not in ids(again.search(VECTORS["b1"], k=5))

    def test_meta_and_embedder_survive(
        self, store: FullStore, reopen: Callable[[], FullStore]
    ) -> None:
        docs = [Document(d, t, dict(m)) for d, t, m, _ in CATALOG]
        store.add(docs, [VECTORS[d.id] for d in docs], embedder=INFO)
        store.set_meta("last_ingest", "2026-01-01T00:00:00+00:00")
        again = reopen()
        assert again.get_meta("last_ingest") == "2026-01-01T00:00:00+00:00"
        info = again.embedder_info
        assert info is not None
        assert (info.provider, info.model, info.dimension) == (INFO.provider, INFO.model, 3)

    def test_file_records_and_embedding_cache_survive(
        self, store: FullStore, reopen: Callable[[], FullStore]
    ) -> None:
        docs = chunks("/d/a.md", "x", "y")
        store.replace_file(record("/d/a.md", 1), docs, vectors(2), embedder=INFO)
        again = reopen()
        assert again.file_records() == {"/d/a.md": record("/d/a.md", 1)}
        assert again.cached_embeddings(INFO, [docs[1].text]) == {docs[1].text: vectors(2)[1]}

    def test_a_rolled_back_transaction_leaves_nothing_behind(
        self, store: FullStore, reopen: Callable[[], FullStore]
    ) -> None:
        fill(store)
        with pytest.raises(Boom):
            with store.transaction():
                store.add([Document("new", "new text", {})])
                store.remove(["a1"])
                raise Boom
        again = reopen()
        assert ids(again.list_all()) == IDS

    def test_reopened_store_keeps_working(
        self, store: FullStore, reopen: Callable[[], FullStore]
    ) -> None:
        fill(store)
        again = reopen()
        again.add([Document("c1", "gamma one", {"source": "c.md"})], [[0.5, 0.5, 0.5]])
        assert again.count() == 6
        assert ids(again.keyword_search("gamma", k=5)) == ["c1"]
        assert ids(reopen().iter_documents(source="c.md")) == ["c1"]
