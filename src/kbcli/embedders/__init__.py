"""Embedders: the built-in simple one here; providers are imported only when used.

``OpenAIEmbedder``, ``GeminiEmbedder`` and ``LocalEmbedder`` are attributes of this package,
loaded on first access, so ``import kbcli.embedders`` imports no SDK, numpy or onnxruntime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbcli.embedders.base import BaseEmbedder, EmbedderInfo, embedder_info
from kbcli.embedders.simple import SimpleEmbedder, cosine_similarity, simple_embedding
from kbcli.system.exports import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from kbcli.embedders.gemini import GeminiEmbedder
    from kbcli.embedders.local import LocalEmbedder
    from kbcli.embedders.openai import OpenAIEmbedder
    from kbcli.embedders.resolve import choose_embedder, resolve_embedder

_LAZY = {
    "OpenAIEmbedder": "openai",
    "GeminiEmbedder": "gemini",
    "LocalEmbedder": "local",
    "choose_embedder": "resolve",
    "resolve_embedder": "resolve",
}

__all__ = [
    "BaseEmbedder",
    "EmbedderInfo",
    "GeminiEmbedder",
    "LocalEmbedder",
    "OpenAIEmbedder",
    "SimpleEmbedder",
    "choose_embedder",
    "cosine_similarity",
    "embedder_info",
    "resolve_embedder",
    "simple_embedding",
]


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
