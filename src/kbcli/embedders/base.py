"""Shared behaviour for embedders: batching over one ``_embed_batch`` and an identity."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EmbedderInfo:
    """What an index records about the embedder that built it. ``cache`` (not part of the
    identity): whether its vectors are worth keeping in the embedding cache; False for an
    embedder that computes a vector faster than a store reads one back."""

    provider: str
    model: str
    dimension: int | None
    cache: bool = field(default=True, compare=False)

    def describe(self) -> str:
        dim = f", {self.dimension} dimensions" if self.dimension else ""
        return f"{self.provider}/{self.model}{dim}"


class BaseEmbedder:
    """Implements ``embed_documents`` in batches of ``batch_size`` on top of ``_embed_batch``.

    Subclasses set ``provider`` and ``model`` and implement ``_embed_batch(texts)``; they may
    override ``embed_query`` when queries are embedded differently from passages.
    ``languages``: the language codes the model was trained for, or None (any, or unknown);
    hybrid search does not trust the dense route for a query in a script none of them uses.
    ``cheap``: embedding a text costs less than reading its vector back from the embedding
    cache (the built-in character hash); such vectors are never cached, and ``kb ingest``
    embeds them as it prepares each file instead of filling them in after the writes.
    """

    provider: str = "custom"
    model: str = "custom"
    batch_size: int = 64
    dimension: int | None = None
    languages: frozenset[str] | None = None
    cheap: bool = False

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed ``texts`` in order, ``batch_size`` at a time."""
        out: list[list[float]] = []
        for start in range(0, len(texts), max(1, self.batch_size)):
            batch = texts[start : start + self.batch_size]
            vectors = self._embed_batch(batch)
            if len(vectors) != len(batch):
                raise RuntimeError(
                    f"{self.provider} returned {len(vectors)} vectors for {len(batch)} texts"
                )
            out.extend(vectors)
        if out and self.dimension is None:
            self.dimension = len(out[0])
        return out

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        return self.embed_documents([text])[0]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Embed several queries in as few calls as the model allows: in batches, as
        passages are, when the subclass embeds a query as a passage (no ``embed_query`` of its
        own); else one ``embed_query`` per text (a subclass may batch them itself)."""
        if type(self).embed_query is BaseEmbedder.embed_query:
            return self.embed_documents(list(texts))
        return [self.embed_query(t) for t in texts]

    @property
    def info(self) -> EmbedderInfo:
        """Provider, model and (once known) dimension of this embedder."""
        return EmbedderInfo(self.provider, self.model, self.dimension, cache=not self.cheap)


def embedder_info(embedder: object) -> EmbedderInfo:
    """The identity of any embedder, including user classes that only follow the protocol."""
    info = getattr(embedder, "info", None)
    if isinstance(info, EmbedderInfo):
        return info
    cls = type(embedder)
    return EmbedderInfo(
        provider=str(getattr(embedder, "provider", f"{cls.__module__}.{cls.__qualname__}")),
        model=str(getattr(embedder, "model", cls.__qualname__)),
        dimension=getattr(embedder, "dimension", None),
        cache=not is_cheap(embedder),
    )


def embed_queries(embedder: Any, texts: Sequence[str]) -> list[Sequence[float]]:
    """Query vectors for ``texts`` in as few calls as ``embedder`` allows: its
    ``embed_queries`` (batched) where it has one, else its ``embed_query`` per text."""
    many = getattr(embedder, "embed_queries", None)
    if callable(many):
        return list(many(list(texts)))
    return [embedder.embed_query(t) for t in texts]


def is_cheap(embedder: object) -> bool:
    """Whether ``embedder`` declares itself cheaper to run than its cache (``cheap``)."""
    return getattr(embedder, "cheap", False) is True
