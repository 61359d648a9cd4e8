"""Embedders: the built-in simple one here; providers are imported only when used."""

from __future__ import annotations

from .base import BaseEmbedder, EmbedderInfo, embedder_info
from .simple import SimpleEmbedder, cosine_similarity, simple_embedding

__all__ = [
    "BaseEmbedder",
    "EmbedderInfo",
    "SimpleEmbedder",
    "cosine_similarity",
    "embedder_info",
    "simple_embedding",
]
