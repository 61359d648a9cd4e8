"""Rerankers: the second search stage, rescoring a recalled candidate pool for one query.

A reranker is any object with ``rerank(query, results) -> results`` (see
:class:`~kbcli.protocols.RerankerProtocol`). The built-in ones return the same documents,
best first, with ``score`` set to the reranker's relevance in [0, 1]:

* :class:`PassthroughReranker` keeps the recall order and scores (the reference default);
* :class:`~kbcli.search.rerank.cross_encoder.CrossEncoderReranker`, a local cross-encoder on
  onnxruntime (``kbcli[local]``) or sentence-transformers (``kbcli[local-st]``);
* :class:`~kbcli.search.rerank.api.APIReranker`, the common ``POST …/rerank`` REST protocol
  (Cohere, Jina, SiliconFlow, Infinity, vLLM, TEI);
* :class:`~kbcli.search.rerank.llm.LLMReranker`, an OpenAI-compatible chat model judging passages.

Only this module is imported with kbcli's search; the others (and their model runtimes) load
when a search first reranks. :func:`build_reranker` turns ``rag.rerank`` into one of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbcli.config.registry import load_reranker_class
from kbcli.config.schema import Config
from kbcli.protocols import RerankerProtocol
from kbcli.search.rerank.base import PassthroughReranker, rescored, sigmoid
from kbcli.system.exports import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from kbcli.search.rerank.api import APIReranker
    from kbcli.search.rerank.cross_encoder import CrossEncoderReranker
    from kbcli.search.rerank.llm import LLMReranker

_LAZY = {
    "APIReranker": "api",
    "CrossEncoderReranker": "cross_encoder",
    "LLMReranker": "llm",
}

__all__ = [
    "APIReranker",
    "CrossEncoderReranker",
    "LLMReranker",
    "PassthroughReranker",
    "build_reranker",
    "rescored",
    "sigmoid",
]


def build_reranker(config: Config) -> RerankerProtocol | None:
    """The reranker ``rag.rerank`` describes (None when ``provider`` is ``none``).

    Building is cheap: no model is loaded and nothing heavy is imported until the first
    ``rerank`` call. A registered class is built with its ``from_config(settings)``; a user's
    ``"package.module:Class"`` likewise when it has one, else with no arguments.
    """
    settings = config.rag.rerank
    if settings.provider == "none":
        return None
    cls = load_reranker_class(settings.provider)
    from_config = getattr(cls, "from_config", None)
    reranker: RerankerProtocol = from_config(settings) if callable(from_config) else cls()
    return reranker


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
