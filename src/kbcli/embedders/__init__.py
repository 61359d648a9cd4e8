"""Embedders: the built-in simple one here; providers are imported only when used.

``OpenAIEmbedder``, ``GeminiEmbedder`` and ``LocalEmbedder`` are attributes of this package,
loaded on first access, so ``import kbcli.embedders`` imports no SDK, numpy or onnxruntime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kbcli.embedders.base import BaseEmbedder, EmbedderInfo, embedder_info
from kbcli.embedders.simple import SimpleEmbedder, cosine_similarity, simple_embedding

if TYPE_CHECKING:  # pragma: no cover
    from kbcli.embedders.gemini import GeminiEmbedder
    from kbcli.embedders.local import LocalEmbedder
    from kbcli.embedders.openai import OpenAIEmbedder
    from kbcli.embedders.resolve import choose_embedder, resolve_embedder

_LAZY = {
    "OpenAIEmbedder": ".openai",
    "GeminiEmbedder": ".gemini",
    "LocalEmbedder": ".local",
    "choose_embedder": ".resolve",
    "resolve_embedder": ".resolve",
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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
