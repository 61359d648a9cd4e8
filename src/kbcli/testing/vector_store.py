"""The reference VectorStoreProtocol: add, dense search, delete, list_all.

Needs a ``store`` fixture (an empty store); see :mod:`kbcli.testing`.
"""

from __future__ import annotations

from typing import Any

import pytest

from kbcli.errors import FilterError
from kbcli.protocols import VectorStoreProtocol, supports
from kbcli.types import Document

VECS = {
    "north": [0.0, 1.0, 0.0],
    "east": [1.0, 0.0, 0.0],
    "north-east": [0.7071, 0.7071, 0.0],
    "up": [0.0, 0.0, 1.0],
}


class VectorStoreContract:
    """Behaviour every vector store must have."""

    def fill(
        self, store: VectorStoreProtocol, meta: dict[str, dict[str, Any]] | None = None
    ) -> list[str]:
        docs = [
            Document(name, f"text of {name}", dict((meta or {}).get(name, {"name": name})))
            for name in VECS
        ]
        return store.add(docs, [VECS[d.id] for d in docs])

    def test_is_a_vector_store(self, store: VectorStoreProtocol) -> None:
        assert supports(store, VectorStoreProtocol)

    def test_add_returns_ids_in_order(self, store: VectorStoreProtocol) -> None:
        assert self.fill(store) == list(VECS)

    def test_search_ranks_by_cosine(self, store: VectorStoreProtocol) -> None:
        self.fill(store)
        hits = store.search([0.1, 1.0, 0.0], k=3)
        assert [h.document.id for h in hits] == ["north", "north-east", "east"]
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True) and -1.0 <= scores[-1] <= 1.0

    def test_search_returns_documents_with_text_and_metadata(
        self, store: VectorStoreProtocol
    ) -> None:
        self.fill(store)
        top = store.search(VECS["up"], k=1)[0]
        assert (top.document.text, top.document.metadata) == ("text of up", {"name": "up"})
        assert top.score == pytest.approx(1.0, abs=1e-4)

    def test_k_larger_than_the_store(self, store: VectorStoreProtocol) -> None:
        self.fill(store)
        assert len(store.search([1.0, 1.0, 1.0], k=50)) == 4

    def test_filter_is_applied_before_ranking(self, store: VectorStoreProtocol) -> None:
        meta = {n: {"side": "left" if n in ("north", "up") else "right"} for n in VECS}
        self.fill(store, meta)
        hits = store.search(VECS["east"], k=2, filter={"side": "left"})
        assert {h.document.id for h in hits} == {"north", "up"}  # 2 results, not fewer

    def test_filter_operators(self, store: VectorStoreProtocol) -> None:
        meta = {n: {"rank": i} for i, n in enumerate(VECS)}
        self.fill(store, meta)
        hits = store.search(VECS["east"], k=10, filter={"rank": {"$gte": 2}})
        assert {h.document.id for h in hits} == {"north-east", "up"}
        hits = store.search(VECS["east"], k=10, filter={"$or": [{"rank": 0}, {"rank": 3}]})
        assert {h.document.id for h in hits} == {"north", "up"}

    def test_bad_filter_is_a_clear_error(self, store: VectorStoreProtocol) -> None:
        self.fill(store)
        with pytest.raises(FilterError):
            store.search(VECS["east"], k=1, filter={"rank": {"$like": 1}})

    def test_same_id_replaces_everywhere(self, store: VectorStoreProtocol) -> None:
        self.fill(store)
        store.add([Document("north", "moved", {"v": 2})], [VECS["east"]])
        assert len(store.list_all()) == 4
        top = store.search(VECS["east"], k=2)
        assert {h.document.id for h in top} == {"north", "east"}
        assert [d for d in store.list_all() if d.id == "north"][0].text == "moved"

    def test_delete(self, store: VectorStoreProtocol) -> None:
        self.fill(store)
        assert store.delete(["north", "missing"]) is True
        assert store.delete(["north"]) is False
        assert "north" not in {h.document.id for h in store.search(VECS["north"], k=10)}
        assert [d.id for d in store.list_all()] == ["east", "north-east", "up"]

    def test_list_all_oldest_first(self, store: VectorStoreProtocol) -> None:
        self.fill(store)
        assert [d.id for d in store.list_all()] == list(VECS)

    def test_empty_store(self, store: VectorStoreProtocol) -> None:
        assert store.search([1.0, 0.0, 0.0], k=3) == []
        assert store.list_all() == []

    def test_empty_query_vector_returns_the_newest(self, store: VectorStoreProtocol) -> None:
        self.fill(store)
        hits = store.search([], k=2)
        assert [h.document.id for h in hits] == ["up", "north-east"]
        assert [h.score for h in hits] == [1.0, 1.0]

    def test_empty_query_vector_keeps_the_filter(self, store: VectorStoreProtocol) -> None:
        meta = {n: {"side": "left" if n in ("north", "up") else "right"} for n in VECS}
        self.fill(store, meta)
        hits = store.search([], k=5, filter={"side": "right"})
        assert [h.document.id for h in hits] == ["north-east", "east"]
        assert all(h.score == 1.0 for h in hits)

    def test_empty_query_vector_sees_a_replaced_document_as_newest(
        self, store: VectorStoreProtocol
    ) -> None:
        self.fill(store)
        store.add([Document("north", "moved", {"v": 2})], [VECS["north"]])
        assert [h.document.id for h in store.search([], k=1)] == ["north"]
