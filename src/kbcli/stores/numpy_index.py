"""NumpyVectorIndex: exact cosine search over a float32 matrix (the default vector index)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kbcli.errors import IndexMismatchError
from kbcli.text import vector_math  # called through the module: tests count its scorings

if TYPE_CHECKING:  # numpy is imported when the index is built, not at start-up
    import numpy as np
    from numpy.typing import NDArray

    from kbcli.text.vector_math import UnitMatrix


class NumpyVectorIndex:
    """Exact (brute-force) cosine search; rows are kept L2-normalised, ids sorted.

    Built from ``ids`` and a unit-row ``matrix`` (which may be a read-only memory map), or empty
    and filled with :meth:`upsert`. Changes are collected and folded into new arrays at the next
    search, so many small writes cost one rebuild. :meth:`ranking` scores the matrix once for a
    search that widens its window (see :func:`~kbcli.stores.common.prefiltered_search`).
    """

    exact = True

    def __init__(
        self, ids: NDArray[np.int64] | None = None, matrix: UnitMatrix | None = None
    ) -> None:
        import numpy as np

        self._np = np
        self._ids = np.zeros(0, dtype=np.int64) if ids is None else ids
        self._matrix = np.zeros((0, 0), dtype=np.float32) if matrix is None else matrix
        self._pending: dict[int, NDArray[np.float32] | None] = {}

    @property
    def dimension(self) -> int | None:
        """The vectors' length (None while empty)."""
        self._fold()
        return int(self._matrix.shape[1]) if self._matrix.shape[0] else None

    def upsert(self, ids: Sequence[int], vectors: Sequence[Sequence[float]]) -> None:
        """Insert or replace the vectors of ``ids``."""
        if not len(ids):
            return
        unit = vector_math.as_unit_matrix(vectors)
        for i, row in zip(ids, unit):
            self._pending[int(i)] = row

    def remove(self, ids: Sequence[int]) -> None:
        """Remove the vectors of ``ids``; unknown ids are ignored."""
        for i in ids:
            self._pending[int(i)] = None

    def __len__(self) -> int:
        self._fold()
        return int(self._ids.shape[0])

    def search(
        self, query: Sequence[float], k: int, allowed: Sequence[int] | None = None
    ) -> list[tuple[int, float]]:
        """``(id, cosine)`` of the ``k`` nearest rows among ``allowed``, best first."""
        self._fold()
        if self._ids.shape[0] == 0 or k <= 0:
            return []
        mask = None
        if allowed is not None:
            wanted = self._np.asarray(allowed, dtype=self._np.int64)
            mask = self._np.isin(self._ids, wanted)
        hits = vector_math.top_k_scores(vector_math.cosine_scores(self._matrix, query), k, mask)
        return [(int(self._ids[i]), score) for i, score in hits]

    def ranking(self, query: Sequence[float]) -> Callable[[int], list[tuple[int, float]]]:
        """``top(n)``: the ``n`` nearest ``(id, cosine)`` for ``query``, best first, from one
        scoring of the matrix (the snapshot of this call) however often it is asked."""
        self._fold()
        ids = self._ids
        scores = vector_math.cosine_scores(self._matrix, query) if ids.shape[0] else None

        def top(n: int) -> list[tuple[int, float]]:
            if scores is None or n <= 0:
                return []
            return [(int(ids[i]), score) for i, score in vector_math.top_k_scores(scores, n)]

        return top

    def _fold(self) -> None:
        if not self._pending:
            return
        np = self._np
        rows = {int(i): r for i, r in zip(self._ids, self._matrix)}
        for i, row in self._pending.items():
            if row is None:
                rows.pop(i, None)
            else:
                rows[i] = row
        self._pending = {}
        if len({r.shape[0] for r in rows.values()}) > 1:
            raise IndexMismatchError("Stored vectors have different lengths: use one embedder")
        order = sorted(rows)
        self._ids = np.asarray(order, dtype=np.int64)
        self._matrix = (
            np.vstack([rows[i] for i in order]).astype(np.float32, copy=False)
            if order
            else np.zeros((0, 0), dtype=np.float32)
        )
