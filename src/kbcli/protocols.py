"""The seven contracts of kbcli: any object with these methods plugs in (see docstrings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .types import Document, SearchOptions, SearchResult


@runtime_checkable
class EmbedderProtocol(Protocol):
    """Turns text into vectors. All vectors of one embedder have the same length."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed many texts, returning one vector per text in the same order."""
        ...

    def embed_query(self, text: str) -> list[float]:
        """Embed a search query (some models embed queries differently from passages)."""
        ...


@runtime_checkable
class VectorStoreProtocol(Protocol):
    """Keeps documents and their vectors.

    ``add`` with an id that already exists replaces that document everywhere (text, metadata,
    vector, keyword index). ``search`` applies ``filter`` before scoring, so it returns the best
    ``k`` documents among those that pass it; scores are cosine similarities, higher first.
    """

    def add(self, docs: list[Document], embeddings: list[list[float]] | None = None) -> list[str]:
        """Store documents (with ``embeddings[i]`` for ``docs[i]`` when given); return their ids."""
        ...

    def search(
        self, query_vec: list[float], k: int = 5, filter: dict[str, Any] | None = None
    ) -> list[SearchResult]:
        """The ``k`` documents most similar to ``query_vec`` among those passing ``filter``."""
        ...

    def delete(self, ids: list[str]) -> bool:
        """Delete documents by id; True when at least one existed."""
        ...

    def list_all(self) -> list[Document]:
        """Every stored document, oldest first."""
        ...


@runtime_checkable
class RetrieverProtocol(Protocol):
    """Finds the documents that answer a text query."""

    def search(
        self, query: str, k: int = 5, options: SearchOptions | None = None
    ) -> list[SearchResult]:
        """Return up to ``k`` results, best first (``options.k`` is ignored in favour of ``k``)."""
        ...


@runtime_checkable
class RerankerProtocol(Protocol):
    """Reorders a candidate list for a query; may rescore, must not invent documents."""

    def rerank(self, query: str, results: list[SearchResult]) -> list[SearchResult]:
        """Return ``results`` reordered (and possibly rescored), best first."""
        ...


@runtime_checkable
class DocumentLoaderProtocol(Protocol):
    """Reads a file into text. Raises :class:`kbcli.errors.LoaderError` for files it cannot read."""

    def load(self, path: str | Path) -> str:
        """Return the text of the file at ``path``."""
        ...


@runtime_checkable
class TextNormalizerProtocol(Protocol):
    """Cleans text before chunking (whitespace, control characters...)."""

    def normalize(self, text: str) -> str:
        """Return the cleaned text."""
        ...


@runtime_checkable
class TextChunkerProtocol(Protocol):
    """Splits text into chunks for indexing. Never returns empty chunks; always terminates."""

    def chunk(self, text: str) -> list[str]:
        """Return the chunks of ``text`` in order."""
        ...
