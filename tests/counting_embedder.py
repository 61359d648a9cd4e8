"""An embedder that counts the passages it embeds (ingest/test_sync.py, embedders/test_cheap.py)."""

from __future__ import annotations

from kbcli.embedders import SimpleEmbedder


class CountingEmbedder(SimpleEmbedder):
    """The simple embedder, counting how many passages it was asked to embed (queries, such
    as the relevance floor's probes after an ingest, are not counted). Not ``cheap``: it
    stands for a model, whose vectors are cached and filled in after the writes."""

    cheap = False

    def __init__(self, dim: int = 64) -> None:
        super().__init__(dim)
        self.embedded = 0

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return super()._embed_batch(texts)

    def embed_query(self, text: str) -> list[float]:
        return SimpleEmbedder._embed_batch(self, [text])[0]
