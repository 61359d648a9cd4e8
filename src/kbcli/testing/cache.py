"""EmbeddingCache: vectors by (embedder, text), so unchanged text is never embedded twice.

Needs a ``store`` fixture (an empty store); see :mod:`kbcli.testing`.
"""

from __future__ import annotations

from ..embedders.base import EmbedderInfo
from ..protocols import EmbeddingCache, supports
from ._common import INFO, OTHER


class EmbeddingCacheContract:
    """Round trip, per-embedder keys, overwrite."""

    def test_is_an_embedding_cache(self, store):
        assert supports(store, EmbeddingCache)

    def test_empty_cache(self, store):
        assert store.cached_embeddings(INFO, ["alpha"]) == {}
        assert store.cached_embeddings(INFO, []) == {}

    def test_round_trip(self, store):
        store.cache_embeddings(INFO, {"alpha": [0.5, 0.25, 0.0], "beta": [0.0, 1.0, 0.75]})
        got = store.cached_embeddings(INFO, ["beta", "gamma", "alpha"])
        assert got == {"alpha": [0.5, 0.25, 0.0], "beta": [0.0, 1.0, 0.75]}

    def test_texts_are_exact_keys(self, store):
        store.cache_embeddings(INFO, {"alpha": [0.5, 0.25, 0.0]})
        assert store.cached_embeddings(INFO, ["Alpha", "alpha ", " alpha"]) == {}
        store.cache_embeddings(INFO, {"长文本 ✓": [1.0, 0.0, 0.0]})
        assert store.cached_embeddings(INFO, ["长文本 ✓"]) == {"长文本 ✓": [1.0, 0.0, 0.0]}

    def test_vectors_belong_to_one_embedder(self, store):
        store.cache_embeddings(INFO, {"alpha": [0.5, 0.25, 0.0]})
        store.cache_embeddings(OTHER, {"alpha": [0.0, 0.25, 0.5]})
        assert store.cached_embeddings(INFO, ["alpha"]) == {"alpha": [0.5, 0.25, 0.0]}
        assert store.cached_embeddings(OTHER, ["alpha"]) == {"alpha": [0.0, 0.25, 0.5]}
        elsewhere = EmbedderInfo("elsewhere", INFO.model, INFO.dimension)
        assert store.cached_embeddings(elsewhere, ["alpha"]) == {}

    def test_caching_again_overwrites(self, store):
        store.cache_embeddings(INFO, {"alpha": [0.5, 0.25, 0.0]})
        store.cache_embeddings(INFO, {"alpha": [1.0, 0.0, 0.0]})
        assert store.cached_embeddings(INFO, ["alpha"]) == {"alpha": [1.0, 0.0, 0.0]}
