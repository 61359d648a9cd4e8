"""DocumentCatalog: documents, their metadata and the index's own metadata.

Needs a ``store`` fixture (an empty store); see :mod:`kbcli.testing`.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kbcli.embedders.base import EmbedderInfo
from kbcli.errors import FilterError, IndexMismatchError, KBError
from kbcli.protocols import (
    DocumentCatalog,
    DocumentReader,
    DocumentWriter,
    EmbedderRecord,
    IndexMetadata,
    supports,
)
from kbcli.testing._common import CATALOG, IDS, INFO, OTHER, VECTORS, Boom, fill, ids, make_docs
from kbcli.types import Document


class DocumentCatalogContract:
    """Reads, deletes, counts, transactions and index metadata of a document catalog."""

    def test_is_a_document_catalog(self, store: DocumentCatalog) -> None:
        assert supports(store, DocumentCatalog)

    def test_is_each_document_capability(self, store: DocumentCatalog) -> None:
        """DocumentCatalog is the union of the narrow capabilities callers ask for."""
        for capability in (DocumentReader, DocumentWriter, IndexMetadata, EmbedderRecord):
            assert supports(store, capability), capability.__name__

    def test_empty_catalog(self, store: DocumentCatalog) -> None:
        assert store.count() == 0
        assert store.list_all() == []
        assert list(store.iter_documents()) == []
        assert store.sources() == []
        assert store.get(["a1"]) == []

    # --- get ---------------------------------------------------------------------------------

    def test_get_keeps_the_order_asked_and_skips_unknown_ids(self, store: DocumentCatalog) -> None:
        fill(store)
        got = store.get(["b1", "missing", "a1"])
        assert ids(got) == ["b1", "a1"]
        assert (got[0].text, got[0].metadata) == ("beta one", CATALOG[2][2])

    def test_get_nothing(self, store: DocumentCatalog) -> None:
        fill(store)
        assert store.get([]) == []

    def test_get_with_embeddings_returns_the_stored_vectors(self, store: DocumentCatalog) -> None:
        fill(store)
        got = store.get(["loose", "a2"], with_embeddings=True)
        assert ids(got) == ["loose", "a2"]
        assert [d.embedding for d in got] == [VECTORS["loose"], VECTORS["a2"]]

    def test_get_with_embeddings_gives_none_for_a_document_without_vector(
        self, store: DocumentCatalog
    ) -> None:
        fill(store)
        store.add([Document("bare", "no vector at all", {})])
        got = store.get(["bare", "a1"], with_embeddings=True)
        assert [d.embedding for d in got] == [None, VECTORS["a1"]]

    def test_get_without_embeddings_returns_text_and_metadata(self, store: DocumentCatalog) -> None:
        fill(store)
        (doc,) = store.get(["a2"])
        assert (doc.id, doc.text, doc.metadata) == ("a2", "alpha two", CATALOG[1][2])

    # --- iterate, list, count ----------------------------------------------------------------

    def test_iter_documents_oldest_first(self, store: DocumentCatalog) -> None:
        fill(store)
        assert ids(store.iter_documents()) == IDS

    def test_iter_documents_by_filter(self, store: DocumentCatalog) -> None:
        fill(store)
        assert ids(store.iter_documents({"lang": "de"})) == ["a2", "b2"]
        assert ids(store.iter_documents({"n": {"$gte": 3}})) == ["b1", "b2", "loose"]

    def test_iter_documents_by_source(self, store: DocumentCatalog) -> None:
        fill(store)
        assert ids(store.iter_documents(source="b.md")) == ["b1", "b2"]
        assert ids(store.iter_documents(source="nowhere.md")) == []

    def test_iter_documents_limit(self, store: DocumentCatalog) -> None:
        fill(store)
        assert ids(store.iter_documents(limit=2)) == ["a1", "a2"]
        assert ids(store.iter_documents(limit=50)) == IDS

    def test_iter_documents_filter_source_and_limit_together(self, store: DocumentCatalog) -> None:
        fill(store)
        found = store.iter_documents({"lang": "en"}, source="b.md", limit=5)
        assert ids(found) == ["b1"]
        assert ids(store.iter_documents({"n": {"$lt": 5}}, source="a.md", limit=1)) == ["a1"]

    def test_iter_documents_with_embeddings(self, store: DocumentCatalog) -> None:
        fill(store)
        found = list(store.iter_documents(source="a.md", with_embeddings=True))
        assert [d.embedding for d in found] == [VECTORS["a1"], VECTORS["a2"]]

    def test_iter_documents_bad_filter_is_a_clear_error(self, store: DocumentCatalog) -> None:
        fill(store)
        with pytest.raises(FilterError):
            list(store.iter_documents({"n": {"$like": 1}}))

    def test_list_all_returns_embeddings(self, store: DocumentCatalog) -> None:
        fill(store)
        store.add([Document("bare", "no vector at all", {})])
        docs = store.list_all()
        assert ids(docs) == [*IDS, "bare"]
        assert [d.embedding for d in docs] == [*(VECTORS[i] for i in IDS), None]

    def test_re_adding_an_id_replaces_it_and_makes_it_newest(self, store: DocumentCatalog) -> None:
        fill(store)
        store.add([Document("a1", "alpha again", {"source": "a.md", "n": 9})], [[0.5, 0.5, 0.0]])
        assert ids(store.list_all()) == ["a2", "b1", "b2", "loose", "a1"]
        (doc,) = store.get(["a1"], with_embeddings=True)
        assert (doc.text, doc.metadata["n"], doc.embedding) == ("alpha again", 9, [0.5, 0.5, 0.0])
        assert store.count() == 5

    def test_add_returns_the_ids_in_order(self, store: DocumentCatalog) -> None:
        assert fill(store) == IDS

    def test_add_takes_the_vector_from_the_document(self, store: DocumentCatalog) -> None:
        store.add([Document("own", "carries its vector", {}, embedding=[0.25, 0.5, 0.0])])
        assert store.get(["own"], with_embeddings=True)[0].embedding == [0.25, 0.5, 0.0]

    def test_count(self, store: DocumentCatalog) -> None:
        fill(store)
        assert store.count() == 5
        assert store.count({"lang": "en"}) == 2
        assert store.count({"source": "a.md", "n": 2}) == 1
        assert store.count({"lang": {"$exists": False}}) == 1
        assert store.count({"lang": "fr"}) == 0

    def test_sources_sorted_with_counts(self, store: DocumentCatalog) -> None:
        store.add(make_docs(list(reversed(CATALOG))))
        assert store.sources() == [("a.md", 2), ("b.md", 2)]

    # --- deletes -----------------------------------------------------------------------------

    def test_remove_returns_how_many_existed(self, store: DocumentCatalog) -> None:
        fill(store)
        assert store.remove(["a1", "missing", "b2"]) == 2
        assert store.remove(["a1"]) == 0
        assert ids(store.list_all()) == ["a2", "b1", "loose"]

    def test_delete_returns_whether_one_existed(self, store: DocumentCatalog) -> None:
        fill(store)
        assert store.delete(["missing", "b1"]) is True
        assert store.delete(["b1"]) is False
        assert store.count() == 4

    def test_delete_source(self, store: DocumentCatalog) -> None:
        fill(store)
        assert store.delete_source("a.md") == 2
        assert store.delete_source("a.md") == 0
        assert ids(store.list_all()) == ["b1", "b2", "loose"]
        assert store.sources() == [("b.md", 2)]
        assert store.get(["a1", "a2"]) == []

    def test_delete_where(self, store: DocumentCatalog) -> None:
        fill(store)
        assert store.delete_where({"lang": "de"}) == 2
        assert ids(store.list_all()) == ["a1", "b1", "loose"]
        assert store.delete_where({"lang": "de"}) == 0

    def test_delete_where_bad_filter_deletes_nothing(self, store: DocumentCatalog) -> None:
        fill(store)
        with pytest.raises(FilterError):
            store.delete_where({"$nor": [{"lang": "de"}]})
        assert store.count() == 5

    # --- index metadata and version -----------------------------------------------------------

    def test_meta_get_and_set(self, store: DocumentCatalog) -> None:
        assert store.get_meta("last_ingest") is None
        store.set_meta("last_ingest", "2026-01-01T00:00:00+00:00")
        store.set_meta("other", "x")
        store.set_meta("other", "y")
        assert store.get_meta("last_ingest") == "2026-01-01T00:00:00+00:00"
        assert store.get_meta("other") == "y"

    @pytest.mark.parametrize(
        "write",
        [
            lambda s: s.add([Document("new", "new text", {})]),
            lambda s: s.remove(["a1"]),
            lambda s: s.delete(["b1"]),
            lambda s: s.delete_source("a.md"),
            lambda s: s.delete_where({"lang": "en"}),
            lambda s: s.replace_source("b.md", [Document("b9", "beta", {"source": "b.md"})]),
            lambda s: s.set_meta("key", "value"),
        ],
        ids=["add", "remove", "delete", "delete_source", "delete_where", "replace", "set_meta"],
    )
    def test_version_changes_after_every_write(
        self, store: DocumentCatalog, write: Callable[[DocumentCatalog], object]
    ) -> None:
        fill(store)
        before = store.version
        write(store)
        assert store.version != before

    # --- transactions ------------------------------------------------------------------------

    def test_transaction_commits_everything(self, store: DocumentCatalog) -> None:
        fill(store)
        with store.transaction():
            store.add([Document("new", "new text", {"source": "c.md"})])
            store.remove(["a1"])
            store.set_meta("key", "value")
        assert ids(store.list_all()) == ["a2", "b1", "b2", "loose", "new"]
        assert store.get_meta("key") == "value"

    def test_an_exception_inside_a_transaction_rolls_back_everything(
        self, store: DocumentCatalog
    ) -> None:
        fill(store)
        store.set_meta("key", "old")
        with pytest.raises(Boom):
            with store.transaction():
                store.add([Document("new", "new text", {"source": "c.md"})], [[0.5, 0.5, 0.5]])
                store.remove(["a1"])
                store.delete_source("b.md")
                store.delete_where({"n": 5})
                store.set_meta("key", "new")
                raise Boom
        assert ids(store.list_all()) == IDS
        assert [d.embedding for d in store.get(IDS, with_embeddings=True)] == [
            VECTORS[i] for i in IDS
        ]
        assert store.count() == 5
        assert store.sources() == [("a.md", 2), ("b.md", 2)]
        assert store.get_meta("key") == "old"
        assert store.get(["new"]) == []

    def test_nested_transactions_join_the_outer_one(self, store: DocumentCatalog) -> None:
        fill(store)
        with pytest.raises(Boom):
            with store.transaction():
                with store.transaction():
                    store.remove(["a1"])
                    store.set_meta("key", "inner")
                # The inner block ended cleanly, but nothing is committed before the outer one.
                store.add([Document("new", "new text", {})])
                raise Boom
        assert ids(store.list_all()) == IDS
        assert store.get_meta("key") is None

    def test_an_exception_in_a_nested_transaction_rolls_back_the_outer_one(
        self, store: DocumentCatalog
    ) -> None:
        fill(store)
        with pytest.raises(Boom):
            with store.transaction():
                store.remove(["b1"])
                with store.transaction():
                    store.remove(["a1"])
                    raise Boom
        assert ids(store.list_all()) == IDS

    def test_a_transaction_sees_its_own_writes(self, store: DocumentCatalog) -> None:
        fill(store)
        with store.transaction():
            store.remove(["a1"])
            assert store.get(["a1"]) == []
            assert store.count() == 4

    # --- replace_source ----------------------------------------------------------------------

    def test_replace_source_swaps_one_source(self, store: DocumentCatalog) -> None:
        fill(store)
        new = [
            Document("a7", "alpha seven", {"source": "a.md", "n": 7}),
            Document("a8", "alpha eight", {"source": "a.md", "n": 8}),
            Document("a9", "alpha nine", {"source": "a.md", "n": 9}),
        ]
        vecs = [[0.5, 0.0, 0.5], [0.25, 0.0, 0.75], [0.0, 0.5, 0.5]]
        assert store.replace_source("a.md", new, vecs) == ["a7", "a8", "a9"]
        assert ids(store.iter_documents(source="a.md")) == ["a7", "a8", "a9"]
        assert ids(store.iter_documents(source="b.md")) == ["b1", "b2"]
        assert store.get(["a1", "a2"]) == []
        assert store.sources() == [("a.md", 3), ("b.md", 2)]
        assert [d.embedding for d in store.get(["a8"], with_embeddings=True)] == [vecs[1]]

    def test_replace_source_with_nothing_empties_it(self, store: DocumentCatalog) -> None:
        fill(store)
        assert store.replace_source("a.md", []) == []
        assert store.sources() == [("b.md", 2)]
        assert store.count() == 3

    def test_replace_source_is_atomic(self, store: DocumentCatalog) -> None:
        fill(store)
        new = [Document("a7", "x", {"source": "a.md"}), Document("a8", "y", {"source": "a.md"})]
        with pytest.raises((ValueError, KBError)):
            store.replace_source("a.md", new, [[0.5, 0.5, 0.0]])  # one vector for two docs
        assert ids(store.iter_documents(source="a.md")) == ["a1", "a2"]
        assert store.count() == 5

    def test_replace_source_rolls_back_with_its_transaction(self, store: DocumentCatalog) -> None:
        fill(store)
        with pytest.raises(Boom):
            with store.transaction():
                store.replace_source("a.md", [Document("a7", "x", {"source": "a.md"})])
                raise Boom
        assert ids(store.iter_documents(source="a.md")) == ["a1", "a2"]

    # --- embedder ----------------------------------------------------------------------------

    def test_no_embedder_before_the_first_vector(self, store: DocumentCatalog) -> None:
        assert store.embedder_info is None
        store.add(make_docs(), embedder=INFO)  # no vectors yet
        assert store.embedder_info is None
        store.check_embedder(OTHER)  # nothing recorded: anything goes

    def test_embedder_is_recorded_with_the_first_vectors(self, store: DocumentCatalog) -> None:
        store.add(make_docs(), [VECTORS[i] for i in IDS], embedder=INFO)
        info = store.embedder_info
        assert info is not None
        assert (info.provider, info.model, info.dimension) == ("contract", "fixed-3", 3)

    def test_check_embedder(self, store: DocumentCatalog) -> None:
        store.add(make_docs(), [VECTORS[i] for i in IDS], embedder=INFO)
        store.check_embedder(INFO)
        store.check_embedder(EmbedderInfo("contract", "fixed-3", None))  # dimension unknown
        with pytest.raises(IndexMismatchError):
            store.check_embedder(OTHER)
        with pytest.raises(IndexMismatchError):
            store.check_embedder(EmbedderInfo("elsewhere", "fixed-3", 3))
        with pytest.raises(IndexMismatchError):
            store.check_embedder(EmbedderInfo("contract", "fixed-3", 4))

    def test_adding_with_another_embedder_is_refused(self, store: DocumentCatalog) -> None:
        store.add(make_docs(), [VECTORS[i] for i in IDS], embedder=INFO)
        with pytest.raises(IndexMismatchError):
            store.add([Document("x", "other", {})], [[0.5, 0.5, 0.0]], embedder=OTHER)
        assert store.get(["x"]) == []
        assert store.embedder_info is not None and store.embedder_info.model == INFO.model

    # --- reembed -----------------------------------------------------------------------------

    def test_reembed_switches_vectors_and_embedder(self, store: DocumentCatalog) -> None:
        store.add(make_docs(), [VECTORS[i] for i in IDS], embedder=INFO)
        batches: list[list[str]] = []
        progress: list[tuple[int, int]] = []

        def embed(texts: list[str]) -> list[list[float]]:
            batches.append(list(texts))
            return [[0.0, 0.5, float(len(t))] for t in texts]

        assert store.reembed(embed, OTHER, batch_size=2, progress=lambda *a: progress.append(a))
        assert sorted(t for batch in batches for t in batch) == sorted(t for _, t, _, _ in CATALOG)
        assert all(len(batch) <= 2 for batch in batches)
        assert progress[-1] == (5, 5)
        assert store.embedder_info is not None and store.embedder_info.model == OTHER.model
        store.check_embedder(OTHER)
        with pytest.raises(IndexMismatchError):
            store.check_embedder(INFO)
        docs = store.get(IDS, with_embeddings=True)
        assert [d.embedding for d in docs] == [[0.0, 0.5, float(len(d.text))] for d in docs]

    def test_reembed_returns_how_many(self, store: DocumentCatalog) -> None:
        fill(store)
        assert store.reembed(lambda texts: [[0.5, 0.5, 0.0] for _ in texts], OTHER) == 5

    # --- stats -------------------------------------------------------------------------------

    def test_stats_counts(self, store: DocumentCatalog) -> None:
        fill(store)
        store.add([Document("bare", "no vector at all", {"source": "c.md"})])
        stats = store.stats()
        assert (stats["chunks"], stats["sources"], stats["vectors"]) == (6, 3, 5)
