"""Shared behaviour for embedders: batching over one ``_embed_batch``, an identity
(:class:`EmbedderInfo`) and what an embedder declares about itself
(:class:`EmbedderCapabilities`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, runtime_checkable


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


@dataclass(frozen=True)
class EmbedderCapabilities:
    """What an embedder declares about itself; search and ingest read only this.

    ``cheap``: embedding a text costs less than reading its vector back from the embedding
    cache (the built-in character hash); such vectors are never cached, and ``kb ingest``
    embeds them as it prepares each file instead of filling them in after the writes.
    ``weak``: the vectors capture spelling rather than meaning; hybrid search goes keyword
    first. ``languages``: the language codes the model was trained for, or None (any, or
    unknown); hybrid search does not trust the dense route for a query in a script none of them
    uses. ``alpha``: the hybrid dense weight the embedder asks for unless the user chooses one
    (None: the configured one). ``keyword_sure_margin``: the keyword route's lead at which
    hybrid search has moved the weight to keywords, query by query (None: a fixed weight).

    The defaults are what an embedder that declares nothing gets: costly, strong, any
    language, the configured weight.
    """

    cheap: bool = False
    weak: bool = False
    languages: frozenset[str] | None = None
    alpha: float | None = None
    keyword_sure_margin: float | None = None


@runtime_checkable
class DeclaresCapabilities(Protocol):
    """An embedder that says what it is: every built-in one (:class:`BaseEmbedder`'s
    subclasses, the lazily resolved one)."""

    @property
    def capabilities(self) -> EmbedderCapabilities:
        """What the embedder declares about itself."""
        ...


class QueryEmbedder(Protocol):
    """What :func:`embed_queries` needs of an embedder (part of
    :class:`~kbcli.protocols.EmbedderProtocol`)."""

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        ...


@runtime_checkable
class QueryBatcher(Protocol):
    """An embedder that embeds several queries in fewer calls than one per query."""

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """One vector per query, in order."""
        ...


class BaseEmbedder:
    """Implements ``embed_documents`` in batches of ``batch_size`` on top of ``_embed_batch``.

    Subclasses set ``provider`` and ``model`` and implement ``_embed_batch(texts)``; they may
    override ``embed_query`` when queries are embedded differently from passages. They declare
    what they are with the class attributes ``cheap``, ``weak``, ``languages``, ``alpha`` and
    ``keyword_sure_margin`` (see :class:`EmbedderCapabilities`; an instance may set its own),
    which :attr:`capabilities` returns as one record.
    """

    provider: str = "custom"
    model: str = "custom"
    batch_size: int = 64
    dimension: int | None = None
    cheap: bool = False
    weak: bool = False
    languages: frozenset[str] | None = None
    alpha: float | None = None
    keyword_sure_margin: float | None = None

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

    @property
    def capabilities(self) -> EmbedderCapabilities:
        """What this embedder declares about itself, as one record."""
        return EmbedderCapabilities(
            cheap=self.cheap,
            weak=self.weak,
            languages=self.languages,
            alpha=self.alpha,
            keyword_sure_margin=self.keyword_sure_margin,
        )


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


def capabilities_of(embedder: object) -> EmbedderCapabilities:
    """What ``embedder`` declares about itself: its ``capabilities`` record.

    An embedder written against :class:`~kbcli.protocols.EmbedderProtocol` alone has no
    record: it gets :class:`EmbedderCapabilities`' defaults, except for the fields it sets as
    attributes of the same names (as kb has always read them): ``cheap`` only when it is
    ``True``, ``alpha`` and ``keyword_sure_margin`` only when they are numbers."""
    if isinstance(embedder, DeclaresCapabilities):
        return embedder.capabilities
    found: dict[str, Any] = {
        f.name: getattr(embedder, f.name, f.default) for f in fields(EmbedderCapabilities)
    }
    languages, alpha, sure = found["languages"], found["alpha"], found["keyword_sure_margin"]
    return EmbedderCapabilities(
        cheap=found["cheap"] is True,
        weak=bool(found["weak"]),
        languages=None if languages is None else frozenset(languages),
        alpha=float(alpha) if isinstance(alpha, (int, float)) else None,
        keyword_sure_margin=float(sure) if isinstance(sure, (int, float)) else None,
    )


def embed_queries(embedder: QueryEmbedder, texts: Sequence[str]) -> list[Sequence[float]]:
    """Query vectors for ``texts`` in as few calls as ``embedder`` allows: its
    ``embed_queries`` (batched) where it has one, else its ``embed_query`` per text."""
    if isinstance(embedder, QueryBatcher):
        return list(embedder.embed_queries(list(texts)))
    return [embedder.embed_query(t) for t in texts]


def is_cheap(embedder: object) -> bool:
    """Whether ``embedder`` declares itself cheaper to run than its cache (``cheap``)."""
    return capabilities_of(embedder).cheap
