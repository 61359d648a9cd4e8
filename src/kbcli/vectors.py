"""Vectorised cosine scoring with numpy (imported only when a dense search runs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import IndexMismatchError


def as_unit_matrix(vectors: Sequence[Sequence[float]] | Any, dim: int | None = None) -> Any:
    """float32 matrix whose rows are L2-normalised (zero rows stay zero)."""
    import numpy as np

    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix.reshape(0 if matrix.size == 0 else 1, -1 if matrix.size else dim or 0)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


def cosine_scores(unit_matrix: Any, query: Sequence[float]) -> Any:
    """Cosine of ``query`` against every row of ``unit_matrix`` (rows already unit length)."""
    import numpy as np

    q = np.asarray(query, dtype=np.float32)
    if q.shape[0] != unit_matrix.shape[1]:
        raise IndexMismatchError(
            f"Query vector has {q.shape[0]} dimensions but the index has {unit_matrix.shape[1]}: "
            "search with the embedder that built the index, or rebuild it (kb ingest --rebuild)"
        )
    norm = float(np.linalg.norm(q))
    if norm == 0.0:
        return np.zeros(unit_matrix.shape[0], dtype=np.float32)
    return unit_matrix @ (q / norm)


def top_k_scores(scores: Any, k: int, mask: Any = None) -> list[tuple[int, float]]:
    """Indices and values of the ``k`` largest ``scores`` (within ``mask``), best first;
    ties keep index order."""
    import numpy as np

    candidates = np.arange(scores.shape[0])
    if mask is not None:
        candidates = candidates[mask]
        scores = scores[mask]
    if scores.shape[0] == 0 or k <= 0:
        return []
    k = min(k, scores.shape[0])
    part = np.argpartition(-scores, k - 1)[:k] if k < scores.shape[0] else np.arange(k)
    order = part[np.lexsort((candidates[part], -scores[part]))]
    return [(int(candidates[i]), float(scores[i])) for i in order]


def top_k_cosine(
    unit_matrix: Any, query: Sequence[float], k: int, mask: Any = None
) -> list[tuple[int, float]]:
    """Indices and cosine scores of the ``k`` rows most similar to ``query``, best first.

    ``mask`` (boolean array) limits the candidates before ranking (pre-filter).
    """
    if unit_matrix.shape[0] == 0:
        return []
    return top_k_scores(cosine_scores(unit_matrix, query), k, mask)
