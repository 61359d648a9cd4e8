"""The contracts of kbcli: any object with these methods plugs in (see docstrings).

The seven reference protocols (embedder, vector store, retriever, reranker, document loader,
text normalizer, text chunker) keep the reference shapes; the section loader and chunker and
the chat model are the richer plugins kb also accepts. What else a store can do (the storage
capabilities: :class:`DocumentCatalog`, :class:`KeywordIndex`, :class:`VectorIndex`,
:class:`FileLedger`, :class:`EmbeddingCache`, :class:`VectorWriter`, :class:`Doctor`...) and
:func:`supports`, which asks it, live in :mod:`kbcli.stores.capabilities` and are importable
from here too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, runtime_checkable

from kbcli.stores.capabilities import (
    Capability,
    Doctor,
    DocumentCatalog,
    DocumentReader,
    DocumentWriter,
    EmbedderRecord,
    EmbeddingCache,
    FileLedger,
    FreshnessReads,
    IndexMetadata,
    KeywordIndex,
    VectorIndex,
    VectorWriter,
    protocol_members,
    supports,
)

if TYPE_CHECKING:  # annotations only
    from kbcli.types import Document, SearchOptions, SearchResult, Section

__all__ = [
    "Capability",
    "ChatCompletion",
    "ChatModelProtocol",
    "Doctor",
    "DocumentCatalog",
    "DocumentLoaderProtocol",
    "DocumentReader",
    "DocumentWriter",
    "EmbedderProtocol",
    "EmbedderRecord",
    "EmbeddingCache",
    "FileLedger",
    "FreshnessReads",
    "IndexMetadata",
    "KeywordIndex",
    "RerankerProtocol",
    "RetrieverProtocol",
    "SectionChunkerProtocol",
    "SectionLoaderProtocol",
    "TextChunkerProtocol",
    "TextNormalizerProtocol",
    "VectorIndex",
    "VectorStoreProtocol",
    "VectorWriter",
    "missing_methods",
    "protocol_members",
    "protocol_methods",
    "supports",
]


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


@runtime_checkable
class SectionLoaderProtocol(Protocol):
    """A loader that keeps structure: sections (a PDF page, a heading's body) with metadata."""

    def load_sections(self, path: str | Path) -> list[Section]:
        """The file's text as sections, in order."""
        ...


@runtime_checkable
class SectionChunkerProtocol(Protocol):
    """A chunker that chunks sections, keeping their metadata and adding character offsets.

    ``normalize_first``: True when the pipeline should normalise text before chunking (the
    reference order); False when the chunker reads structure (headings, blank lines) from the
    text as loaded and each chunk is normalised afterwards.
    """

    normalize_first: bool

    def chunk_sections(self, sections: list[Section]) -> list[Section]:
        """The chunks of ``sections`` in order."""
        ...


class ChatCompletion(Protocol):
    """What a chat model's answer carries (:class:`kbcli.providers.chat.Completion` is one)."""

    @property
    def text(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def finish_reason(self) -> str | None: ...


@runtime_checkable
class ChatModelProtocol(Protocol):
    """Writes ``kb ask``'s answers (``rag.answer.provider``; :mod:`kbcli.providers.chat`)."""

    def complete(
        self,
        messages: list[dict[str, str]],
        *,
        max_tokens: int = 800,
        temperature: float = 0.0,
        on_text: Callable[[str], None] | None = None,
    ) -> ChatCompletion:
        """The answer to ``messages`` (``[{role, content}]``) as a
        :class:`kbcli.providers.chat.Completion`
        (``text``, ``model``, ``finish_reason``); with ``on_text``, each piece of the text is
        passed to it as it arrives. Raises :class:`~kbcli.errors.AnswerError` when it fails."""
        ...


def protocol_methods(protocol: type) -> list[str]:
    """The public methods ``protocol`` declares, its own and inherited (not its properties:
    an implementation may set those on the instance)."""
    names: set[str] = set()
    for base in protocol.__mro__:
        if base not in (object, Protocol, Generic):
            names.update(
                name for name, value in vars(base).items()
                if not name.startswith("_") and callable(value)
            )  # fmt: skip
    return sorted(names)


def missing_methods(cls: type, protocol: type) -> list[str]:
    """The methods of ``protocol`` that the class ``cls`` lacks, looked up on the class:
    nothing is instantiated or called (``isinstance`` on Python 3.11 evaluates an instance's
    properties, which for a server-backed store runs queries)."""
    return [name for name in protocol_methods(protocol) if not callable(getattr(cls, name, None))]
