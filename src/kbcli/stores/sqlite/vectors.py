"""Vectors in SQLite, the embedder they came from, and the memory-mapped matrix cache.

The ``vectors`` table is the truth. Dense search runs on a :class:`NumpyVectorIndex` over one
float32 matrix of unit rows. A cache file beside the database (``<db>.vectors-cache``) holds that
matrix for the current ``vector_generation``: a new process (each ``kb search``) maps it with
``numpy.memmap`` instead of reading every row, and pages of it are shared between processes. A
cache miss streams the rows into a new cache file in batches (written temp -> fsync -> rename),
so building it never holds more than one batch besides the mapped file. Any write that changes
vectors bumps the generation and makes the file stale; deleting it is always safe.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kbcli.embedders.base import EmbedderInfo
from kbcli.errors import IndexMismatchError
from kbcli.stores.capabilities import VectorIndex
from kbcli.stores.common import check_embedder, dense_search, pack_vector
from kbcli.stores.numpy_index import NumpyVectorIndex
from kbcli.stores.parts import Filter, Hit, Vector
from kbcli.stores.sqlite import catalog
from kbcli.system.crashpoints import crash_point
from kbcli.text.vector_math import as_unit_matrix

if TYPE_CHECKING:  # numpy is imported when a dense search runs
    from kbcli.text.vector_math import Rows, UnitMatrix

    Arrays = tuple[Rows, UnitMatrix]  # a NumpyVectorIndex's ids and rows

CACHE_MAGIC = b"KBVECS2\n"
HEADER_SIZE = 256  # magic + JSON header, padded: the arrays start aligned
STREAM_BATCH = 8192  # rows read per step when building the cache


def recorded_embedder(conn: sqlite3.Connection) -> EmbedderInfo | None:
    """The embedder recorded with the index's vectors."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
    if row is None:
        return None
    data = json.loads(row[0])
    return EmbedderInfo(
        data["provider"], data["model"], data.get("dimension"), cache=data.get("cache", True)
    )


def record_embedder(conn: sqlite3.Connection, info: EmbedderInfo, dim: int, where: Path) -> None:
    """Record ``info`` with the first vectors; later vectors must come from the same model.
    Whether its vectors are worth caching (``info.cache``) is recorded too, and kept current
    (an index of an older kbcli records none)."""
    recorded = recorded_embedder(conn)
    if recorded is not None and (recorded.provider, recorded.model) != (
        info.provider,
        info.model,
    ):
        check_embedder(recorded, EmbedderInfo(info.provider, info.model, dim), str(where))
    if recorded is None or recorded.cache != info.cache:
        value = {"provider": info.provider, "model": info.model, "dimension": dim}
        if recorded is not None and recorded.dimension:
            value["dimension"] = recorded.dimension
        if not info.cache:
            value["cache"] = False
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('embedder', ?)", (json.dumps(value),))


def dimension(conn: sqlite3.Connection) -> int | None:
    """The length of the stored vectors (None while there are none)."""
    row = conn.execute("SELECT length(vec) FROM vectors LIMIT 1").fetchone()
    return row[0] // 4 if row else None


def check_dimension(conn: sqlite3.Connection, dim: int, where: Path) -> None:
    """Refuse vectors of another length than the stored ones."""
    index_dim = dimension(conn)
    if index_dim is not None and index_dim != dim:
        raise IndexMismatchError(
            f"New vectors have {dim} dimensions but the index at {where} has "
            f"{index_dim}: use the embedder that built it or 'kb ingest --rebuild'"
        )


def upsert(conn: sqlite3.Connection, rows: Sequence[tuple[int, Sequence[float]]]) -> None:
    """Store vectors by rowid."""
    if rows:
        conn.executemany(
            "INSERT OR REPLACE INTO vectors VALUES (?, ?)",
            ((doc, pack_vector(vec)) for doc, vec in rows),
        )
        bump(conn)


def remove(conn: sqlite3.Connection, docs: Sequence[int]) -> None:
    """Delete vectors by rowid."""
    if docs:
        conn.executemany("DELETE FROM vectors WHERE doc = ?", ((d,) for d in docs))
        bump(conn)


def bump(conn: sqlite3.Connection) -> None:
    """Mark every derived vector structure stale."""
    conn.execute("UPDATE stats SET vector_generation = vector_generation + 1 WHERE id = 1")


def generation_tag(conn: sqlite3.Connection) -> str:
    """Names the current vectors of this index: index id and vector generation."""
    generation = conn.execute("SELECT vector_generation FROM stats WHERE id = 1").fetchone()[0]
    row = conn.execute("SELECT value FROM meta WHERE key = 'index_id'").fetchone()
    return f"{row[0] if row else ''}:{generation}"


class DerivedVectors(Protocol):
    """What :class:`~kbcli.stores.sqlite.SQLiteStore` runs dense search on: a vector index
    derived from the ``vectors`` table, current as of a connection's snapshot (keyed by
    :func:`generation_tag`). ``path`` is its file (safe to delete); ``close`` releases it.
    ``read_only`` is set by the store when its database is opened read-only: the index is then
    built in memory (or searched without it) and nothing is written."""

    path: Path
    read_only: bool

    def index(self, conn: sqlite3.Connection) -> VectorIndex:
        """The index of the vectors as of ``conn``'s snapshot (loaded, updated or rebuilt)."""
        ...

    def close(self) -> None:
        """Release what the index holds (files, clients)."""
        ...

    def verify(self, conn: sqlite3.Connection) -> str | None:
        """Why the index on disk disagrees with the ``vectors`` table as of ``conn`` (one
        line), or None when it agrees, is missing or is stale (an older generation, rebuilt
        by the next search)."""
        ...

    def discard(self) -> str | None:
        """Delete the index on disk and forget the one in memory (rebuilt on next use); a
        note for ``kb doctor --repair`` when more had to go than the index itself."""
        ...


def stamps(conn: sqlite3.Connection) -> dict[int, int]:
    """Which chunk's vector each rowid holds: a stamp of the chunk's id and creation time.

    Rowids are reused after the newest chunks are deleted, so an index that is brought up to
    date by difference compares stamps, not only rowids."""
    import zlib

    rows = conn.execute(
        "SELECT v.doc, c.id, c.created_at FROM vectors v JOIN chunks c ON c.doc = v.doc"
    )
    return {doc: zlib.crc32(f"{cid}\0{created}".encode()) for doc, cid, created in rows}


def read_vectors(conn: sqlite3.Connection, rowids: Sequence[int]) -> tuple[Any, Any]:
    """``(ids, matrix)`` of the stored vectors of ``rowids`` (all when empty), sorted by id."""
    import numpy as np

    dim = dimension(conn) or 0
    if rowids:
        wanted = sorted(set(int(r) for r in rowids))
        found: list[tuple[int, bytes]] = []
        for start in range(0, len(wanted), 900):
            part = wanted[start : start + 900]
            marks = ",".join("?" * len(part))
            found.extend(conn.execute(f"SELECT doc, vec FROM vectors WHERE doc IN ({marks})", part))
        found.sort()
    else:
        return _read_all_vectors(conn, dim)
    ids = np.fromiter((d for d, _ in found), np.int64, len(found))
    if not found:
        return ids, np.zeros((0, dim), np.float32)
    matrix = np.frombuffer(b"".join(v for _, v in found), np.float32).reshape(-1, dim)
    return ids, matrix


def _read_all_vectors(conn: sqlite3.Connection, dim: int) -> tuple[Any, Any]:
    """Every stored vector, copied straight into one matrix: at 1M x 384 the rows as a list of
    blobs joined into one would hold the 1.5 GB twice more at once."""
    import numpy as np

    count = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
    ids = np.empty(count, np.int64)
    matrix = np.empty((count, dim), np.float32)
    if not count:
        return ids, matrix
    out, width, n = matrix.data.cast("B"), 4 * dim, 0
    for n, (doc, blob) in enumerate(conn.execute("SELECT doc, vec FROM vectors ORDER BY doc")):
        if len(blob) != width:
            raise IndexMismatchError(
                f"Stored vectors have different lengths (chunk {doc}): use one embedder, "
                "or 'kb ingest --rebuild'"
            )
        ids[n] = doc
        out[n * width : (n + 1) * width] = blob
    return ids, matrix


def write_atomic(path: Path, chunks: Sequence[Any]) -> bool:
    """Write ``chunks`` to ``path`` as temp file -> fsync -> rename -> fsync(folder), so a
    reader (or a crash) only ever sees the old file or the whole new one. A chunk is bytes (or
    any buffer), or a callable handed the file's ``write`` to stream a large part itself.
    False when the folder is not writable (a derived file then lives in memory only)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            for chunk in chunks:
                if callable(chunk):
                    chunk(fh.write)
                else:
                    fh.write(chunk)
                crash_point("derived-file-write")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    fsync_dir(path.parent)
    return True


class MatrixCache:
    """The unit-row matrix of one database's vectors, mapped from its cache file."""

    #: set by the store when its database is opened read-only: the matrix is kept in memory
    read_only = False

    def __init__(self, db_path: Path):
        self.path = Path(f"{db_path}.vectors-cache")
        self._index: tuple[str, NumpyVectorIndex] | None = None

    def index(self, conn: sqlite3.Connection) -> NumpyVectorIndex:
        """The index of the vectors as of ``conn``'s snapshot (mapped, built or reused)."""
        tag = generation_tag(conn)
        if self._index is None or self._index[0] != tag:
            arrays = self._map(tag)
            if arrays is None:
                arrays = self._build(conn, tag)
            self._index = (tag, NumpyVectorIndex(*arrays))
        return self._index[1]

    def close(self) -> None:
        """Drop the mapped matrix."""
        self._index = None

    def known_count(self, conn: sqlite3.Connection) -> int | None:
        """How many vectors ``conn``'s snapshot holds, when the matrix of its generation is
        mapped or its file's header names that generation (None: count them). A header read
        instead of ``count(*)`` over every vector row (40 ms at 100k chunks on a busy
        machine: what ``kb search --json``'s watermark would pay each time)."""
        tag = generation_tag(conn)
        if self._index is not None and self._index[0] == tag:
            return len(self._index[1])
        try:
            with open(self.path, "rb") as fh:
                head = fh.read(HEADER_SIZE)
            if not head.startswith(CACHE_MAGIC):
                return None
            header = json.loads(head[len(CACHE_MAGIC) :].rstrip(b"\0 \n"))
            if not isinstance(header, dict) or header.get("tag") != tag:
                return None
            return int(header["n"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def verify(self, conn: sqlite3.Connection) -> str | None:
        """Why the cache file of the current generation disagrees with the ``vectors`` table
        (ids or unit rows), or None (agrees, missing, or stale: rebuilt by the next search)."""
        import numpy as np

        if not self.path.exists():
            return None
        try:
            with open(self.path, "rb") as fh:
                head = fh.read(HEADER_SIZE)
            header = json.loads(head[len(CACHE_MAGIC) :].rstrip(b"\0 \n"))
            if not head.startswith(CACHE_MAGIC) or not isinstance(header, dict):
                raise ValueError
        except (OSError, ValueError):
            return f"{self.path.name} has no readable header (ignored by search)"
        tag = generation_tag(conn)
        if header.get("tag") != tag:
            return None
        arrays = self._map(tag)
        if arrays is None:
            return f"{self.path.name} is damaged or cut short (ignored by search)"
        ids, matrix = arrays
        want_ids, want = read_vectors(conn, [])
        if ids.shape != want_ids.shape or not bool((np.asarray(ids) == want_ids).all()):
            return f"{self.path.name} holds {len(ids)} vector ids, the catalog {len(want_ids)}"
        if len(want) and not np.allclose(
            np.asarray(matrix), as_unit_matrix(want.copy()), atol=1e-5, equal_nan=False
        ):
            return f"{self.path.name} holds vectors that differ from the catalog's"
        return None

    def discard(self) -> None:
        """Delete the cache file (and temp files of killed writers); rebuilt on next use."""
        self._index = None
        self.path.unlink(missing_ok=True)
        remove_dead_temp_files(self.path)

    def _map(self, tag: str) -> Arrays | None:
        import numpy as np

        try:
            with open(self.path, "rb") as fh:
                head = fh.read(HEADER_SIZE)
            if not head.startswith(CACHE_MAGIC):
                return None
            header = json.loads(head[len(CACHE_MAGIC) :].rstrip(b"\0 \n"))
            if header.get("tag") != tag:
                return None
            n, dim = int(header["n"]), int(header["dim"])
            if n == 0:
                return np.zeros(0, np.int64), np.zeros((0, dim), np.float32)
            if self.path.stat().st_size != HEADER_SIZE + 8 * n + 4 * n * dim:
                return None
            ids = np.memmap(self.path, np.int64, "r", HEADER_SIZE, (n,))
            matrix = np.memmap(self.path, np.float32, "r", HEADER_SIZE + 8 * n, (n, dim))
            return ids, matrix
        except (OSError, ValueError, KeyError):
            return None

    def _build(self, conn: sqlite3.Connection, tag: str) -> Arrays:
        """Stream the vectors into a new cache file and map it; in memory if it cannot be
        written (a read-only folder costs only speed)."""
        import numpy as np

        n = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
        dim = dimension(conn) or 0
        ids = np.fromiter(
            (r[0] for r in conn.execute("SELECT doc FROM vectors ORDER BY doc")), np.int64, n
        )
        if self.read_only:
            return self._build_in_memory(conn, ids, dim)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            fh = open(tmp, "wb")
        except OSError:
            fh = None
        matrix = None if fh is not None else np.empty((n, dim), np.float32)
        try:
            if fh is not None:
                header = json.dumps({"tag": tag, "n": n, "dim": dim}).encode()
                fh.write((CACHE_MAGIC + header).ljust(HEADER_SIZE, b" "))
                fh.write(ids.astype("<i8").tobytes())
            rows = conn.execute("SELECT vec FROM vectors ORDER BY doc")
            done = 0
            while batch := rows.fetchmany(STREAM_BATCH):
                block = as_unit_matrix(
                    np.frombuffer(b"".join(r[0] for r in batch), np.float32).reshape(-1, dim).copy()
                )
                if fh is not None:
                    fh.write(block.astype("<f4", copy=False).tobytes())
                    crash_point("vector-cache-write")
                else:
                    assert matrix is not None  # no file: the matrix is built in memory
                    matrix[done : done + len(batch)] = block
                done += len(batch)
            if fh is not None:
                fh.flush()
                os.fsync(fh.fileno())
                fh.close()
                fh = None
                os.replace(tmp, self.path)
                fsync_dir(self.path.parent)
        except OSError:
            tmp.unlink(missing_ok=True)
            if matrix is None:  # the write failed half-way: fall back to memory
                return self._build_in_memory(conn, ids, dim)
        finally:
            if fh is not None:
                fh.close()
        if matrix is not None:
            return ids, matrix
        mapped = self._map(tag)
        return mapped if mapped is not None else self._build_in_memory(conn, ids, dim)

    @staticmethod
    def _build_in_memory(conn: sqlite3.Connection, ids: Rows, dim: int) -> Arrays:
        import numpy as np

        matrix = np.empty((ids.shape[0], dim), np.float32)
        done = 0
        rows = conn.execute("SELECT vec FROM vectors ORDER BY doc")
        while batch := rows.fetchmany(STREAM_BATCH):
            raw = np.frombuffer(b"".join(r[0] for r in batch), np.float32).reshape(-1, dim).copy()
            matrix[done : done + len(batch)] = as_unit_matrix(raw)
            done += len(batch)
        return ids, matrix


def remove_dead_temp_files(path: Path) -> list[Path]:
    """Delete ``<path>.<pid>.tmp`` files of writers that were killed (their pid no longer
    runs); returns those deleted."""
    gone = []
    for tmp in path.parent.glob(f"{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 1 : -len(".tmp")]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
            gone.append(tmp)
        except OSError:
            pass
    return gone


def fsync_dir(folder: Path) -> None:
    """fsync a folder so a rename in it survives a power loss (best effort)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class TableVectors:
    """The vectors part (:class:`~kbcli.stores.parts.Vectors`) of the SQLite stores: the
    ``vectors`` table (the truth), the embedder recorded with it, and dense search over the
    index ``derived`` from it (:class:`MatrixCache`; FAISS and Chroma bring their own, and
    their own search). ``allowed`` keeps the rowids of the last filters (shared with the
    keyword tables)."""

    def __init__(self, path: Path, derived: DerivedVectors, allowed: catalog.AllowedRowids):
        self.path = path
        self.derived = derived
        self.allowed = allowed

    def check(self, conn: sqlite3.Connection, dim: int, rows: int) -> None:
        """Refuse vectors of another length than the stored ones."""
        check_dimension(conn, dim, self.path)

    def record_embedder(self, conn: sqlite3.Connection, info: EmbedderInfo, dim: int) -> None:
        """Record ``info`` with the first vectors; later vectors must come from the same model."""
        record_embedder(conn, info, dim, self.path)

    def recorded_embedder(self, conn: sqlite3.Connection) -> EmbedderInfo | None:
        """The embedder recorded with the index's vectors."""
        return recorded_embedder(conn)

    def upsert(self, conn: sqlite3.Connection, rows: list[tuple[int, Sequence[float]]]) -> None:
        """Store vectors by rowid."""
        upsert(conn, rows)

    def remove(self, conn: sqlite3.Connection, docs: list[int]) -> None:
        """Delete vectors by rowid."""
        remove(conn, docs)

    def finish(self, conn: sqlite3.Connection) -> None:
        """Nothing to do at the end of a write."""

    def count(self, conn: sqlite3.Connection, *, cached: bool = False) -> int:
        """How many vectors are stored: counted, or with ``cached`` read from the matrix
        cache's header when it is of this generation (the watermark's read)."""
        if cached and isinstance(self.derived, MatrixCache):
            known = self.derived.known_count(conn)
            if known is not None:
                return known
        return int(conn.execute("SELECT count(*) FROM vectors").fetchone()[0])

    def search(self, conn: sqlite3.Connection, query: Vector, k: int, filter: Filter) -> list[Hit]:
        """Exact cosine over the mapped matrix; a filter walks the ranking in growing windows
        (:func:`~kbcli.stores.common.prefiltered_search`)."""
        return dense_search(
            self.derived.index(conn),
            query,
            k,
            filter,
            lambda ids: catalog.passing(conn, ids, filter) if filter else set(ids),
            # called only with a filter (dense_search)
            lambda: self.allowed.get(conn, filter or {}),
            lambda: self.allowed.peek(conn, filter or {}),
        )

    def refresh(self, conn: sqlite3.Connection) -> None:
        """Bring the derived index up to date now."""
        self.derived.index(conn)

    def figures(self, conn: sqlite3.Connection) -> dict[str, Any]:
        """Nothing beyond the common figures."""
        return {}

    def close(self) -> None:
        """Release the derived index."""
        self.derived.close()

    # --- re-embedding: a staging table, committed batch by batch (Store.reembed) -------------

    def stage(self, conn: sqlite3.Connection, target: str) -> None:
        """Create the staging table; empty it unless it holds vectors for ``target``."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS vectors_staging (doc INTEGER PRIMARY KEY, vec BLOB)"
        )
        row = conn.execute("SELECT value FROM meta WHERE key = 'reembed_target'").fetchone()
        if row is None or row[0] != target:
            conn.execute("DELETE FROM vectors_staging")
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('reembed_target', ?)", (target,))

    def unstaged(self, conn: sqlite3.Connection) -> tuple[list[tuple[int, str]], int]:
        """The chunks without a staged vector, and how many chunks there are."""
        todo = conn.execute(
            "SELECT doc, text FROM chunks WHERE doc NOT IN (SELECT doc FROM vectors_staging)"
            " ORDER BY doc"
        ).fetchall()
        return todo, conn.execute("SELECT count(*) FROM chunks").fetchone()[0]

    def put_staged(
        self, conn: sqlite3.Connection, rows: list[tuple[int, str]], vectors: list[list[float]]
    ) -> None:
        """Stage vectors of ``rows``."""
        conn.executemany(
            "INSERT OR REPLACE INTO vectors_staging VALUES (?, ?)",
            ((doc, pack_vector(v)) for (doc, _), v in zip(rows, vectors)),
        )

    def swap_staged(self, conn: sqlite3.Connection, info: EmbedderInfo) -> None:
        """The staged vectors replace the stored ones; ``info`` is recorded with them."""
        dims = {r[0] for r in conn.execute("SELECT DISTINCT length(vec) FROM vectors_staging")}
        conn.execute("DELETE FROM vectors")
        conn.execute(
            "INSERT INTO vectors SELECT doc, vec FROM vectors_staging"
            " WHERE doc IN (SELECT doc FROM chunks)"
        )
        conn.execute("DROP TABLE vectors_staging")
        bump(conn)
        conn.execute("DELETE FROM meta WHERE key IN ('reembed_target', 'embedder')")
        if dims:
            record_embedder(conn, info, dims.pop() // 4, self.path)
