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
