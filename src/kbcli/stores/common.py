"""Pieces every store shares: text hashes, vector packing, the embedder check, the writer lock
file, the private folder of a store built without a path and pre-filtered vector search on top
of any :class:`~kbcli.stores.capabilities.VectorIndex`."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import weakref
from array import array
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from kbcli.embedders.base import EmbedderInfo
from kbcli.errors import IndexMismatchError
from kbcli.stores.capabilities import VectorIndex
from kbcli.text.bm25 import Scored
from kbcli.types import Document, FileRecord, SearchResult

# Candidates checked against a filter per step of a filtered dense search before falling back to
# computing the allowed set (see prefiltered_search).
FILTER_WINDOW_MIN = 64
FILTER_WINDOW_MAX = 4096
# A known allowed set of at most 1/FEW_ALLOWED of the index is searched directly, without the walk.
FEW_ALLOWED = 8


def text_hash(text: str) -> str:
    """Stable hash of a chunk's text (key of the embedding cache)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def pack_vector(vec: Iterable[float]) -> bytes:
    """float32 bytes of ``vec`` (a float32 ``array`` is copied as it is, not converted)."""
    if isinstance(vec, array) and vec.typecode == "f":
        return vec.tobytes()
    return array("f", vec).tobytes()


def unpack_vector(blob: bytes) -> list[float]:
    """The floats of :func:`pack_vector`'s bytes."""
    out = array("f")
    out.frombytes(blob)
    return out.tolist()


#: the columns of a file record, in :func:`file_row` order
FILE_COLUMNS = "path, size, mtime_ns, sha256, settings, chunk_ids, indexed_at"


def file_row(record: FileRecord) -> tuple[Any, ...]:
    """A file record as the ledger's row (:data:`FILE_COLUMNS`; chunk ids as JSON)."""
    chunk_ids = json.dumps(record.chunk_ids)
    return (record.path, record.size, record.mtime_ns, record.sha256, record.settings,
            chunk_ids, record.indexed_at)  # fmt: skip


def file_record(row: Sequence[Any]) -> FileRecord:
    """The file record of a ledger row (chunk ids as JSON text, or a list already decoded)."""
    chunk_ids = row[5] if isinstance(row[5], list) else json.loads(row[5])
    return FileRecord(row[0], row[1], row[2], row[3], row[4], chunk_ids, row[6])


# The embedding cache keeps the vectors of chunks that left the index (and those given to
# cache_embeddings) up to as many as the index holds vectors, and at least this many: a small
# index still gets a file back after a delete and a restore without embedding it again.
KEEP_AT_LEAST = 1024


def cache_key(info: EmbedderInfo) -> str:
    """What the embedding cache files an embedder's vectors under."""
    return f"{info.provider}/{info.model}"


def outdated(where: str, recorded: str, current: str) -> IndexMismatchError:
    """The error of a keyword index built with another analyzer or field set, for a process
    that cannot re-tokenise it now (a reader, or the database is locked or read-only)."""
    return IndexMismatchError(
        f"The keyword index {where} was built with [{recorded}], not the current [{current}]: "
        "the next 'kb ingest' or 'kb add' re-tokenises it automatically, or run "
        "'kb doctor --repair' now (no re-embedding)"
    )


def check_embedder(recorded: EmbedderInfo | None, info: EmbedderInfo, where: str) -> None:
    """Raise :class:`IndexMismatchError` when ``info`` is not the ``recorded`` embedder.

    Provider and model must match; dimensions only count when both are known."""
    if recorded is None:
        return
    same = recorded.provider == info.provider and recorded.model == info.model
    if same and info.dimension and recorded.dimension and info.dimension != recorded.dimension:
        same = False
    if not same:
        raise IndexMismatchError(
            f"The index at {where} was built with {recorded.describe()} but the "
            f"configured embedder is {info.describe()}: set rag.embedding back, or "
            "re-embed everything with 'kb ingest --rebuild'"
        )


def vector_dimensions(vectors: Iterable[Sequence[float] | None]) -> int | None:
    """The one length of the given vectors (None when there are none); raises on a mix."""
    dims = {len(v) for v in vectors if v is not None}
    if len(dims) > 1:
        raise IndexMismatchError(f"Vectors of different lengths in one batch: {sorted(dims)}")
    return dims.pop() if dims else None


def scratch_folder(owner: object) -> tuple[Path, Callable[[], Any]]:
    """A new private temporary folder for ``owner``, a store built without a path, and the
    callable that deletes it (the store's ``close``). It is also deleted when ``owner`` is
    garbage-collected or the interpreter exits, so a script that never closes its store leaves
    nothing behind (only a killed process leaves it, in the system's temporary folder)."""
    folder = Path(tempfile.mkdtemp(prefix="kbcli-"))
    return folder, weakref.finalize(owner, shutil.rmtree, str(folder), ignore_errors=True)


def few_allowed(known: Sequence[int] | None, total: int) -> bool:
    """Whether a known allowed set is small enough (at most 1/:data:`FEW_ALLOWED` of an index
    of ``total`` vectors) to be searched directly instead of walking the ranking first."""
    return known is not None and len(known) * FEW_ALLOWED <= total


def prefiltered_search(
    index: VectorIndex,
    query: Sequence[float],
    k: int,
    passes: Callable[[list[int]], set[int]],
    allowed_ids: Callable[[], Sequence[int]],
    known: Sequence[int] | None = None,
) -> list[tuple[int, float]]:
    """Exact top ``k`` among the ids a filter allows, without always computing the allowed set.

    Walks the index's ranking best-first in growing windows, asking ``passes(ids)`` which of a
    window's ids the filter allows, so a filter most documents pass costs a few metadata lookups;
    a selective filter falls back to ``allowed_ids()`` and a search restricted to them. Either
    way the result is the top ``k`` of the allowed set, never a post-filtered top ``k``.
    ``known``: the allowed set when the caller already holds it; a small one (at most
    1/:data:`FEW_ALLOWED` of the index) is searched directly, skipping the walk.
    """
    total = len(index)
    if few_allowed(known, total):
        return index.search(query, k, known)
    checked = 0
    kept: list[tuple[int, float]] = []
    window = max(4 * k, FILTER_WINDOW_MIN)
    # An index that can score once and be asked for longer prefixes (the exact numpy index)
    # saves a full scan per wider window.
    ranking = getattr(index, "ranking", None)
    top = ranking(query) if ranking is not None else lambda n: index.search(query, n)
    while checked < total and window <= FILTER_WINDOW_MAX:
        ranked = top(min(total, checked + window))
        fresh = ranked[checked:]
        ok = passes([i for i, _ in fresh])
        kept.extend(hit for hit in fresh if hit[0] in ok)
        checked += len(fresh)
        if len(kept) >= k or not fresh:
            return kept[:k]
        window *= 4
    if checked >= total:
        return kept[:k]
    return index.search(query, k, allowed_ids())


def dense_search(
    index: VectorIndex,
    query: Sequence[float],
    k: int,
    filter: dict[str, Any] | None,
    passes: Callable[[list[int]], set[int]],
    allowed_ids: Callable[[], Sequence[int]],
    known: Callable[[], Sequence[int] | None] = lambda: None,
) -> list[tuple[int, float]]:
    """The exact top ``k`` of ``index`` among the ids ``filter`` allows (all without one), by
    :func:`prefiltered_search`; ``known()`` gives the allowed set when it is already held."""
    if len(index) == 0:
        return []
    if not filter:
        return index.search(query, k)
    return prefiltered_search(index, query, k, passes, allowed_ids, known=known())


def keyword_hit(doc: Document, scored: Scored, source_weight: float) -> SearchResult:
    """A keyword search hit whose ``explain`` holds both parts of its BM25 score."""
    explain = {"bm25_chunk": scored.chunk, "bm25_source": scored.source,
               "source_weight": source_weight}  # fmt: skip
    return SearchResult(doc, float(scored.score), explain)


def newest_first(docs: Iterable[Any], k: int) -> list[Any]:
    """The last ``k`` of ``docs`` (oldest first), newest first."""
    out = list(docs)[-k:] if k > 0 else []
    out.reverse()
    return out
