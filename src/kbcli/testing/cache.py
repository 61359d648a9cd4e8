"""EmbeddingCache: vectors by (embedder, text), so unchanged text is never embedded twice.

The index's own vectors are cache hits; a chunk's vector is kept when the chunk leaves the
index (not for an embedder that is not worth caching); what is kept is bounded.

Needs a ``store`` fixture (an empty store); see :mod:`kbcli.testing`.
"""

from __future__ import annotations

from kbcli.embedders.base import EmbedderInfo
from kbcli.protocols import EmbeddingCache, supports
from kbcli.stores.common import KEEP_AT_LEAST
from kbcli.testing._common import INFO, OTHER, CacheStore
from kbcli.types import Document


class EmbeddingCacheContract:
    """Round trip, per-embedder keys, overwrite; the index's own vectors, kept ones, bound."""

    def test_is_an_embedding_cache(self, store: CacheStore) -> None:
        assert supports(store, EmbeddingCache)

    def test_empty_cache(self, store: CacheStore) -> None:
        assert store.cached_embeddings(INFO, ["alpha"]) == {}
        assert store.cached_embeddings(INFO, []) == {}

    def test_round_trip(self, store: CacheStore) -> None:
        store.cache_embeddings(INFO, {"alpha": [0.5, 0.25, 0.0], "beta": [0.0, 1.0, 0.75]})
        got = store.cached_embeddings(INFO, ["beta", "gamma", "alpha"])
        assert got == {"alpha": [0.5, 0.25, 0.0], "beta": [0.0, 1.0, 0.75]}

    def test_texts_are_exact_keys(self, store: CacheStore) -> None:
        store.cache_embeddings(INFO, {"alpha": [0.5, 0.25, 0.0]})
        assert store.cached_embeddings(INFO, ["Alpha", "alpha ", " alpha"]) == {}
        store.cache_embeddings(INFO, {"长文本 ✓": [1.0, 0.0, 0.0]})
        assert store.cached_embeddings(INFO, ["长文本 ✓"]) == {"长文本 ✓": [1.0, 0.0, 0.0]}

    def test_vectors_belong_to_one_embedder(self, store: CacheStore) -> None:
        store.cache_embeddings(INFO, {"alpha": [0.5, 0.25, 0.0]})
        store.cache_embeddings(OTHER, {"alpha": [0.0, 0.25, 0.5]})
        assert store.cached_embeddings(INFO, ["alpha"]) == {"alpha": [0.5, 0.25, 0.0]}
        assert store.cached_embeddings(OTHER, ["alpha"]) == {"alpha": [0.0, 0.25, 0.5]}
        elsewhere = EmbedderInfo("elsewhere", INFO.model, INFO.dimension)
        assert store.cached_embeddings(elsewhere, ["alpha"]) == {}

    def test_caching_again_overwrites(self, store: CacheStore) -> None:
        store.cache_embeddings(INFO, {"alpha": [0.5, 0.25, 0.0]})
        store.cache_embeddings(INFO, {"alpha": [1.0, 0.0, 0.0]})
        assert store.cached_embeddings(INFO, ["alpha"]) == {"alpha": [1.0, 0.0, 0.0]}

    def test_a_stored_chunks_vector_is_a_hit_for_its_embedder_only(self, store: CacheStore) -> None:
        store.add([Document("a1", "alpha text", {"source": "a.md"})], [[0.5, 0.25, 1.0]],
                  embedder=INFO)  # fmt: skip
        assert store.cached_embeddings(INFO, ["alpha text", "beta"]) == {
            "alpha text": [0.5, 0.25, 1.0]
        }
        assert store.cached_embeddings(OTHER, ["alpha text"]) == {}

    def test_the_vectors_of_chunks_that_leave_are_kept(self, store: CacheStore) -> None:
        store.add(
            [Document("a1", "alpha text", {"source": "a.md"}),
             Document("b1", "beta text", {"source": "b.md"})],
            [[0.5, 0.25, 1.0], [1.0, 0.0, 0.5]],
            embedder=INFO,
        )  # fmt: skip
        store.delete_source("a.md")
        store.remove(["b1"])
        assert store.count() == 0
        assert store.cached_embeddings(INFO, ["alpha text", "beta text"]) == {
            "alpha text": [0.5, 0.25, 1.0],
            "beta text": [1.0, 0.0, 0.5],
        }

    def test_nothing_is_kept_for_an_embedder_cheaper_to_run_again(self, store: CacheStore) -> None:
        cheap = EmbedderInfo(INFO.provider, INFO.model, INFO.dimension, cache=False)
        store.add([Document("a1", "alpha text", {"source": "a.md"})], [[0.5, 0.25, 1.0]],
                  embedder=cheap)  # fmt: skip
        store.delete_source("a.md")
        assert store.cached_embeddings(INFO, ["alpha text"]) == {}

    def test_the_oldest_kept_vectors_go_first_beyond_the_bound(self, store: CacheStore) -> None:
        n = KEEP_AT_LEAST + 5
        store.cache_embeddings(INFO, {f"text {i}": [float(i), 0.0, 1.0] for i in range(n)})
        got = store.cached_embeddings(INFO, [f"text {i}" for i in range(n)])
        assert len(got) == KEEP_AT_LEAST
        assert "text 4" not in got and got["text 5"] == [5.0, 0.0, 1.0]
        assert got[f"text {n - 1}"] == [float(n - 1), 0.0, 1.0]
