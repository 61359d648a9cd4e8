"""Shared corpus pieces and helpers of the contract suites."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

from kbcli.embedders.base import EmbedderInfo
from kbcli.protocols import (
    DocumentCatalog,
    DocumentWriter,
    EmbeddingCache,
    FileLedger,
    FreshnessReads,
    KeywordIndex,
    VectorStoreProtocol,
    VectorWriter,
)
from kbcli.types import Document, SearchResult


class KeywordStore(DocumentCatalog, KeywordIndex, Protocol):
    """A store the keyword suite runs on: a catalog with a keyword index."""


class LedgerStore(DocumentCatalog, FileLedger, EmbeddingCache, Protocol):
    """A store the ledger suite runs on: a catalog with a file ledger (and an embedding cache,
    which ``replace_file`` fills)."""


class CacheStore(DocumentCatalog, EmbeddingCache, Protocol):
    """A store the embedding-cache suite runs on: a catalog with an embedding cache."""


class SearchStore(DocumentCatalog, VectorStoreProtocol, Protocol):
    """A store the filter and route suites run on: a catalog that searches by vector."""


class FreshnessStore(LedgerStore, FreshnessReads, VectorWriter, Protocol):
    """A store the freshness suite runs on: a ledger that answers the freshness reads and
    gives chunks their vectors alone."""


class Closable(Protocol):
    """Anything :func:`reopener` can close: a store, an index."""

    def close(self) -> None: ...


S = TypeVar("S", bound=Closable)


class FullStore(SearchStore, KeywordIndex, FileLedger, EmbeddingCache, Protocol):
    """A store the persistence suite runs on: every capability it persists."""


# Vectors use values exact in float32, so a stored vector compares equal to the one given.
INFO = EmbedderInfo("contract", "fixed-3", 3)
OTHER = EmbedderInfo("contract", "other-3", 3)

CATALOG: list[tuple[str, str, dict[str, Any], list[float]]] = [
    ("a1", "alpha one", {"source": "a.md", "n": 1, "lang": "en"}, [1.0, 0.0, 0.0]),
    ("a2", "alpha two", {"source": "a.md", "n": 2, "lang": "de"}, [0.75, 0.25, 0.0]),
    ("b1", "beta one", {"source": "b.md", "n": 3, "lang": "en"}, [0.0, 1.0, 0.0]),
    ("b2", "beta two", {"source": "b.md", "n": 4, "lang": "de"}, [0.0, 0.75, 0.25]),
    ("loose", "no source here", {"n": 5}, [0.0, 0.0, 1.0]),
]
VECTORS = {doc_id: vec for doc_id, _, _, vec in CATALOG}
IDS = [doc_id for doc_id, _, _, _ in CATALOG]


def make_docs(rows: list[tuple[str, str, dict[str, Any], Any]] = CATALOG) -> list[Document]:
    """Fresh documents (no embedding) for ``rows`` of (id, text, metadata, vector)."""
    return [Document(doc_id, text, dict(meta)) for doc_id, text, meta, _ in rows]


def fill(
    store: DocumentWriter, rows: list[tuple[str, str, dict[str, Any], Any]] = CATALOG
) -> list[str]:
    """Add ``rows`` with their vectors (no embedder recorded); returns the ids."""
    return store.add(make_docs(rows), [list(vec) for _, _, _, vec in rows])


def ids(docs: Iterable[Document | SearchResult]) -> list[str]:
    """The ids of documents or search results, in order."""
    return [(d.document if isinstance(d, SearchResult) else d).id for d in docs]


class Boom(Exception):
    """Raised inside a transaction to make it roll back."""


class TableEmbedder:
    """A deterministic embedder for the suites: known texts map to given vectors, any other
    text to a bag of its words hashed into ``dim`` numbers (stable across processes)."""

    provider = "contract"
    languages = None

    def __init__(self, table: dict[str, list[float]] | None = None, dim: int = 3):
        self.table = dict(table or {})
        self.dim = dim
        self.dimension = dim
        self.model = f"table-{dim}"

    def _embed(self, text: str) -> list[float]:
        if text in self.table:
            return list(self.table[text])
        vec = [0.0] * self.dim
        for word in text.lower().split():
            vec[sum(map(ord, word)) % self.dim] += 1.0
        return vec

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text."""
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """The vector of one query."""
        return self._embed(text)


def reopener(store: S, open_again: Callable[[S], S]) -> Iterator[Callable[[], S]]:
    """The body of a ``reopen`` fixture: yields a callable that closes the store it last
    returned (at first ``store``) and returns ``open_again(closed_store)``; the last one is
    closed at teardown. Use as ``yield from reopener(store, lambda old: MyStore(old.path))``."""
    current = [store]

    def swap() -> S:
        current[-1].close()
        current.append(open_again(current[-1]))
        return current[-1]

    yield swap
    current[-1].close()
