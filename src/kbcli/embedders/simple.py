"""The built-in character-hash embedder: deterministic, offline, no dependencies.

It captures spelling, not meaning, so it is a weak dense route; kbcli weights it accordingly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kbcli.embedders.base import BaseEmbedder


def simple_embedding(text: str, dim: int = 64) -> list[float]:
    """Character-position hash: ``vec[ord(ch) % dim] += 1 / (1 + i * 0.01)``, L2-normalised."""
    vec = [0.0] * dim
    for i, ch in enumerate(text.lower()):
        vec[ord(ch) % dim] += 1.0 / (1.0 + i * 0.01)
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0.0:
        return vec
    return [v / norm for v in vec]


def cosine_similarity(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine of the angle between ``a`` and ``b``; 0.0 for empty or zero vectors."""
    if not a or not b:
        return 0.0
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return dot / (na * nb)


class SimpleEmbedder(BaseEmbedder):
    """Embeds with :func:`simple_embedding`; ``dim`` numbers per vector."""

    provider = "simple"
    weak = True  # spelling, not meaning: hybrid search must not let it outvote keywords
    cheap = True  # ~30 us a chunk: less than reading a cached vector back (and 400 B stored)

    def __init__(self, dim: int = 64):
        if dim < 1:
            raise ValueError(f"dim must be at least 1, got {dim}")
        self.dim = dim
        self.dimension = dim
        self.model = f"char-hash-{dim}"
        self.batch_size = 1024

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [_simple_embedding_fast(t, self.dim) for t in texts]


def _simple_embedding_fast(text: str, dim: int) -> list[float]:
    """:func:`simple_embedding` with the per-character loop in numpy: bit-identical results.

    ``bincount`` adds the weights in text order, as the loop does, and the normalisation is the
    same Python code, so vectors match the reference exactly; ingest runs ~10x faster.
    """
    import numpy as np

    codes = np.frombuffer(text.lower().encode("utf-32-le", "surrogatepass"), dtype="<u4")
    if codes.size == 0:
        return [0.0] * dim
    weights = 1.0 / (1.0 + np.arange(codes.size, dtype=np.float64) * 0.01)
    vec: list[float] = np.bincount(codes % dim, weights=weights, minlength=dim).tolist()
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0.0:
        return vec
    return [v / norm for v in vec]
