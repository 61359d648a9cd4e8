import pytest

from kbcli import Document, InMemoryStore


def test_fifo_eviction_and_upsert_moves_to_newest():
    store = InMemoryStore(max_size=2)
    store.add([Document("a", "1"), Document("b", "2")])
    store.add([Document("a", "1 again")])  # replaced: now newest
    store.add([Document("c", "3")])  # evicts the oldest, "b"
    assert [d.id for d in store.list_all()] == ["a", "c"]
    assert store.list_all()[0].text == "1 again"


def test_empty_query_vector_returns_newest_with_score_one():
    store = InMemoryStore()
    store.add([Document(str(i), f"t{i}", {"even": i % 2 == 0}) for i in range(6)])
    hits = store.search([], k=2)
    assert [(h.document.id, h.score) for h in hits] == [("5", 1.0), ("4", 1.0)]
    assert [h.document.id for h in store.search([], k=2, filter={"even": True})] == ["4", "2"]


def test_cosine_search_with_prefilter():
    store = InMemoryStore()
    store.add(
        [Document("x", "x", {"g": 1}), Document("y", "y", {"g": 2}), Document("z", "z", {"g": 2})],
        [[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]],
    )
    assert [h.document.id for h in store.search([1.0, 0.0], k=1)] == ["x"]
    hits = store.search([1.0, 0.0], k=5, filter={"g": 2})
    assert [h.document.id for h in hits] == ["z", "y"]
    assert hits[0].score == pytest.approx(0.6)


def test_delete_and_stored_copies_are_independent():
    store = InMemoryStore()
    doc = Document("a", "t", {"k": 1})
    store.add([doc])
    doc.metadata["k"] = 2
    assert store.get(["a"])[0].metadata == {"k": 1}
    assert store.delete(["a", "missing"]) is True
    assert store.delete(["a"]) is False
    assert len(store) == 0
    with pytest.raises(ValueError):
        InMemoryStore(max_size=0)


def test_a_failed_transaction_undoes_a_reembed_inside_it():
    """The documents' vectors come back with the rest of the state (they used to be changed in
    place, so a rollback kept the new embedder's vectors under the old embedder)."""
    from kbcli.embedders.base import EmbedderInfo

    store = InMemoryStore()
    store.add([Document("a", "t")], [[1.0, 0.0]], embedder=EmbedderInfo("p", "old", 2))
    held = store.get(["a"], with_embeddings=True)[0]
    with pytest.raises(RuntimeError), store.transaction():
        store.reembed(lambda texts: [[0.0, 1.0] for _ in texts], EmbedderInfo("p", "new", 2))
        raise RuntimeError("fails after the re-embedding")
    assert store.get(["a"], with_embeddings=True)[0].embedding == [1.0, 0.0]
    assert held.embedding == [1.0, 0.0]  # a document handed out before is not changed either
    assert store.embedder_info.model == "old"
    assert [h.document.id for h in store.search([1.0, 0.0], k=1)] == ["a"]
    assert store.search([1.0, 0.0], k=1)[0].score == pytest.approx(1.0)
