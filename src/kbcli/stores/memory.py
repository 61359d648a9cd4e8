"""InMemoryStore: documents and vectors in a dict, for tests, notebooks and small agents."""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

from ..filters import matches, validate_filter
from ..types import Document, SearchResult


class InMemoryStore:
    """Keeps documents in insertion order; beyond ``max_size`` the oldest are evicted (FIFO).

    Adding an id that exists replaces that document and makes it the newest. An empty query
    vector returns the newest ``k`` documents (that pass the filter) with score 1.0.
    """

    def __init__(self, max_size: int | None = None):
        if max_size is not None and max_size < 1:
            raise ValueError(f"max_size must be at least 1 or None, got {max_size}")
        self.max_size = max_size
        self._docs: OrderedDict[str, Document] = OrderedDict()
        self.version = 0  # bumped on every change; lets retrievers cache derived indexes
        self._matrix: tuple[int, list[str], Any] | None = None

    def add(self, docs: list[Document], embeddings: list[list[float]] | None = None) -> list[str]:
        """Store copies of ``docs`` (vector: ``embeddings[i]`` or ``doc.embedding``)."""
        if embeddings is not None and len(embeddings) != len(docs):
            raise ValueError(f"{len(docs)} documents but {len(embeddings)} embeddings")
        ids = []
        for i, doc in enumerate(docs):
            stored = copy.copy(doc)
            stored.metadata = dict(doc.metadata)
            if embeddings is not None:
                stored.embedding = list(embeddings[i])
            self._docs.pop(stored.id, None)
            self._docs[stored.id] = stored
            ids.append(stored.id)
        if self.max_size is not None:
            while len(self._docs) > self.max_size:
                self._docs.popitem(last=False)
        self.version += 1
        return ids

    def search(
        self, query_vec: list[float], k: int = 5, filter: dict[str, Any] | None = None
    ) -> list[SearchResult]:
        """Cosine similarity against every stored vector that passes ``filter``."""
        filter = validate_filter(filter)
        if not query_vec:
            newest = [d for d in reversed(self._docs.values()) if matches(d.metadata, filter)]
            return [SearchResult(d, 1.0) for d in newest[:k]]
        from ..vectors import top_k_cosine

        ids, matrix = self._unit_matrix()
        if not ids:
            return []
        mask = None
        if filter:
            import numpy as np

            mask = np.fromiter(
                (matches(self._docs[i].metadata, filter) for i in ids), dtype=bool, count=len(ids)
            )
        hits = top_k_cosine(matrix, query_vec, k, mask)
        return [SearchResult(self._docs[ids[i]], score) for i, score in hits]

    def _unit_matrix(self) -> tuple[list[str], Any]:
        if self._matrix is None or self._matrix[0] != self.version:
            from ..vectors import as_unit_matrix

            ids = [d.id for d in self._docs.values() if d.embedding]
            vectors = [self._docs[i].embedding for i in ids]
            if vectors and len({len(v) for v in vectors}) > 1:
                raise ValueError("Stored vectors have different lengths: use one embedder")
            self._matrix = (self.version, ids, as_unit_matrix(vectors) if ids else None)
        return self._matrix[1], self._matrix[2]

    def delete(self, ids: list[str]) -> bool:
        """Remove documents by id; True when at least one existed."""
        found = False
        for doc_id in ids:
            if self._docs.pop(doc_id, None) is not None:
                found = True
        if found:
            self.version += 1
        return found

    def delete_where(self, filter: dict[str, Any]) -> int:
        """Remove every document whose metadata passes ``filter``; returns how many."""
        filter = validate_filter(filter)
        doomed = [d.id for d in self._docs.values() if matches(d.metadata, filter)]
        self.delete(doomed)
        return len(doomed)

    def get(self, ids: list[str]) -> list[Document]:
        """The stored documents among ``ids``, in the order asked."""
        return [self._docs[i] for i in ids if i in self._docs]

    def list_all(self) -> list[Document]:
        """Every document, oldest first."""
        return list(self._docs.values())

    def __len__(self) -> int:
        return len(self._docs)
