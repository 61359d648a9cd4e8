"""Vectorised cosine scoring with numpy (imported only when a dense search runs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kbcli.errors import IndexMismatchError

if TYPE_CHECKING:  # numpy is imported when a dense search runs, not at start-up
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

    UnitMatrix = NDArray[np.float32]  # float32 rows of length 1 (or 0)
    Scores = NDArray[np.float32]
    Mask = NDArray[np.bool_]
    Fingerprints = NDArray[np.uint64]
    Rows = NDArray[np.int64]  # row numbers or group numbers


def as_unit_matrix(vectors: ArrayLike, dim: int | None = None) -> UnitMatrix:
    """float32 matrix whose rows are L2-normalised (zero rows stay zero)."""
    import numpy as np

    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix.reshape(0 if matrix.size == 0 else 1, -1 if matrix.size else dim or 0)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


def cosine_scores(unit_matrix: UnitMatrix, query: Sequence[float]) -> Scores:
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


def top_k_scores(scores: Scores, k: int, mask: Mask | None = None) -> list[tuple[int, float]]:
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
    if k < scores.shape[0]:
        part = np.argpartition(-scores, k - 1)[:k]
        kth = scores[part].min()
        if np.count_nonzero(scores >= kth) > k:  # copies tie at the k-th place: lowest first
            above = np.flatnonzero(scores > kth)
            part = np.concatenate([above, np.flatnonzero(scores == kth)[: k - len(above)]])
    else:
        part = np.arange(k)
    order = part[np.lexsort((candidates[part], -scores[part]))]
    return [(int(candidates[i]), float(scores[i])) for i in order]


def top_k_cosine(
    unit_matrix: UnitMatrix, query: Sequence[float], k: int, mask: Mask | None = None
) -> list[tuple[int, float]]:
    """Indices and cosine scores of the ``k`` rows most similar to ``query``, best first.

    ``mask`` (boolean array) limits the candidates before ranking (pre-filter).
    """
    if unit_matrix.shape[0] == 0:
        return []
    return top_k_scores(cosine_scores(unit_matrix, query), k, mask)


FINGERPRINT_ROWS = 8192  # rows hashed per step (8192 x 384 dims of uint64: 25 MB)


def row_fingerprints(matrix: ArrayLike) -> Fingerprints:
    """A 64-bit hash (uint64) of each row's float32 bit pattern: equal rows hash equal.

    A weighted sum of the rows' 32-bit words modulo 2**64, in integer arithmetic, so a row
    hashes the same in any batch (a float dot product may round differently by position).
    Different rows may collide; :func:`distinct_rows` compares bits before grouping."""
    import numpy as np

    bits = np.ascontiguousarray(matrix, dtype=np.float32).view(np.uint32)
    if bits.ndim != 2:
        bits = bits.reshape(len(bits), -1)
    weights = np.random.default_rng(0x6B62).integers(
        1, 2**63, bits.shape[1], dtype=np.uint64
    ) | np.uint64(1)
    out = np.empty(bits.shape[0], np.uint64)
    for start in range(0, bits.shape[0], FINGERPRINT_ROWS):
        block = bits[start : start + FINGERPRINT_ROWS].astype(np.uint64)
        out[start : start + FINGERPRINT_ROWS] = (block * weights).sum(axis=1, dtype=np.uint64)
    return out


def distinct_rows(matrix: ArrayLike, fingerprints: Fingerprints) -> tuple[Rows, Rows]:
    """Bit-identical rows of ``matrix`` grouped: ``(groups, firsts)``, where ``groups[i]`` is
    row ``i``'s group, numbered from 0 in the order of each group's first row, and
    ``firsts[g]`` is that first row. ``fingerprints`` are the rows' :func:`row_fingerprints`;
    a row whose fingerprint matches but whose bits differ gets a group of its own."""
    import numpy as np

    if not len(fingerprints):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    _, first, inverse = np.unique(fingerprints, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1).astype(np.int64)
    bits = np.ascontiguousarray(matrix, dtype=np.float32).view(np.uint32)
    same = np.ones(len(inverse), bool)
    for start in range(0, len(inverse), FINGERPRINT_ROWS):
        part = slice(start, start + FINGERPRINT_ROWS)
        same[part] = (bits[part] == bits[first[inverse[part]]]).all(axis=1)
    if not same.all():
        odd = np.flatnonzero(~same)
        inverse[odd] = len(first) + np.arange(len(odd))
        first = np.concatenate([first, odd])
    rank = np.argsort(first, kind="stable")
    renumber = np.empty(len(first), np.int64)
    renumber[rank] = np.arange(len(first))
    return renumber[inverse], first[rank].astype(np.int64)
