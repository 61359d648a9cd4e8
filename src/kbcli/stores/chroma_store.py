"""ChromaStore: an SQLiteStore whose dense search runs on a Chroma collection (``kbcli[chroma]``).

The catalog, keyword index, file ledger and the vectors (the truth) stay in an SQLite file
beside the Chroma folder; the collection is a derived vector index in cosine space (so
``1 - distance`` is the cosine), with ids = the catalog's rowids as strings and each chunk's
scalar metadata copied so Chroma ``where`` filters work. It is brought up to date from the
``vectors`` table whenever its recorded generation differs (by difference; rebuilt when the
embedder changed or an earlier sync was interrupted). Filters compile to ``where``
(:func:`compile_where`); what ``where`` cannot express (``$exists``, ``null``, string ranges,
fractions and numbers beyond 2**53) runs as an exact scan of the allowed chunks' vectors, so
a filter never returns fewer than k.

Chroma's local mode is not multi-process safe: kb serialises its own syncs with a lock file,
but run one writer at a time and do not point other Chroma clients at the folder.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..analysis import Analyzer
from ..crashpoints import crash_point
from ..errors import FilterError, require
from ..filters import validate_filter
from ..types import SearchResult
from .common import lock_file
from .derived import RefreshAfterIngest
from .sqlite import SQLiteStore, catalog
from .sqlite import vectors as sqlite_vectors
from .sqlite.connection import DEFAULT_BUSY_TIMEOUT

STATE_MAGIC = b"KBCHROMA"
SYNC_BATCH = 5000  # rows per Chroma upsert (its maximum batch size is 5461)


def _chromadb() -> Any:
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    return require("chromadb", extra="chroma", feature="The chroma store")


# --- filters ---------------------------------------------------------------------------------


def compile_where(filter: dict[str, Any] | None) -> dict[str, Any] | None:
    """A Chroma ``where`` equivalent to the kbcli ``filter`` (see :mod:`kbcli.filters`).

    Covers ``$eq $ne $in $nin $gt $gte $lt $lte`` on strings, numbers and booleans and
    ``$and``/``$or``; raises :class:`FilterError` for what Chroma cannot express (``$exists``,
    ``$prefix``, ``null`` operands, ranges over strings, numbers Chroma does not compare
    exactly (fractions, beyond 2**53), keys it cannot store), so a caller
    never runs a filter that means something else.
    """
    filter = validate_filter(filter)
    if not filter:
        return None
    return _conjunction([_clause(key, value) for key, value in filter.items()])


def _conjunction(parts: list[dict[str, Any]], op: str = "$and") -> dict[str, Any]:
    return parts[0] if len(parts) == 1 else {op: parts}


def _clause(key: str, value: Any) -> dict[str, Any]:
    if key in ("$and", "$or"):
        subs = [_conjunction([_clause(k, v) for k, v in sub.items()]) for sub in value]
        return _conjunction(subs, key)
    ops = value if isinstance(value, dict) else {"$eq": value}
    return _conjunction([_operator(key, op, operand) for op, operand in ops.items()])


def _operator(key: str, op: str, operand: Any) -> dict[str, Any]:
    if not _storable_key(key):
        raise FilterError(f"Chroma cannot store or filter on the key {key[:40]!r}")
    if op == "$exists":
        raise FilterError(f"Chroma cannot filter on whether {key!r} exists")
    if op == "$prefix":
        raise FilterError(f"Chroma cannot filter on a prefix of {key!r}")
    items = operand if op in ("$in", "$nin") else [operand]
    for item in items:
        if item is None:
            raise FilterError(f"Chroma cannot compare {key!r} with null")
    if op in ("$gt", "$gte", "$lt", "$lte") and isinstance(operand, str):
        raise FilterError(f"Chroma cannot order strings ({op} on {key!r})")
    if not all(_exact_in_chroma(item) for item in items):
        raise FilterError(f"Chroma cannot compare {key!r} exactly with {operand!r}")
    if op in ("$in", "$nin"):
        # Chroma wants one type per list: split by type ($in: any group, $nin: every group)
        groups: dict[type, list[Any]] = {}
        for item in items:
            groups.setdefault(type(item), []).append(item)
        parts = [{key: {op: group}} for group in groups.values()]
        return _conjunction(parts, "$or" if op == "$in" else "$and")
    return {key: {op: operand}}


def _exact_in_chroma(value: Any) -> bool:
    """Chroma converts a number to the type of the value it meets: 0.5 equals 0 and 1e300
    equals 2**63 - 1 against whole numbers, and integers beyond 2**53 round against floats.
    Whole numbers up to 2**53 (int or float) compare exactly."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    return float(value).is_integer() and abs(value) <= 2**53


def chroma_metadata(metadata: dict[str, Any]) -> dict[str, Any] | None:
    """The scalar part of a chunk's metadata (what Chroma can store and ``where`` can test);
    None when nothing is left (Chroma refuses empty metadata)."""
    out = {
        k: v
        for k, v in metadata.items()
        if isinstance(v, (str, int, float, bool)) and _storable_key(k)
    }
    return out or None


def _storable_key(key: str) -> bool:
    """Chroma refuses empty keys and keys starting with ``#`` or ``$`` (its own names); such
    keys stay in the catalog, and a filter on them runs as an exact scan over it."""
    return bool(key) and not key.startswith(("#", "$"))


# --- the collection as a vector index ---------------------------------------------------------


class ChromaVectorIndex:
    """A :class:`~kbcli.protocols.VectorIndex` on a Chroma collection in cosine space.

    Ids are integers (stored as strings); ``allowed`` restricts the query to those ids
    (Chroma's ``ids`` pre-filter); a ``where`` may be given instead. Chroma's HNSW is
    approximate, so ``exact`` is False.
    """

    exact = False

    def __init__(self, collection: Any):
        self.collection = collection

    def upsert(
        self,
        ids: Sequence[int],
        vectors: Sequence[Sequence[float]],
        metadatas: Sequence[dict[str, Any] | None] | None = None,
    ) -> None:
        """Insert or replace the vectors (and copied metadata) of ``ids``."""
        import numpy as np

        last = {int(i): n for n, i in enumerate(ids)}
        matrix = np.asarray(vectors, dtype=np.float32)
        items = list(last.items())
        for start in range(0, len(items), SYNC_BATCH):
            part = items[start : start + SYNC_BATCH]
            rows = [n for _, n in part]
            self.collection.upsert(
                ids=[str(i) for i, _ in part],
                embeddings=matrix[rows],
                metadatas=[metadatas[n] for n in rows] if metadatas is not None else None,
            )

    def remove(self, ids: Sequence[int]) -> None:
        """Remove the vectors of ``ids`` (unknown ids are ignored)."""
        wanted = [str(int(i)) for i in ids]
        for start in range(0, len(wanted), SYNC_BATCH):
            self.collection.delete(ids=wanted[start : start + SYNC_BATCH])

    def __len__(self) -> int:
        return int(self.collection.count())

    def search(
        self,
        query: Sequence[float],
        k: int,
        allowed: Sequence[int] | None = None,
        *,
        where: dict[str, Any] | None = None,
    ) -> list[tuple[int, float]]:
        """``(id, cosine)`` of the ``k`` nearest vectors among ``allowed`` / ``where``."""
        if k <= 0:
            return []
        total = len(self)
        if total == 0:
            return []
        ids = None
        if allowed is not None:
            wanted = sorted({str(int(i)) for i in allowed})
            # Chroma refuses ids it does not hold: keep those it has
            ids = self.collection.get(ids=wanted, include=[])["ids"] if wanted else []
            if not ids:
                return []
        found = self.collection.query(
            query_embeddings=[[float(x) for x in query]],
            n_results=min(total, k + 8),
            ids=ids,
            where=where,
            include=["distances"],
        )
        hits = [(int(i), 1.0 - float(d)) for i, d in zip(found["ids"][0], found["distances"][0])]
        hits.sort(key=lambda h: (-h[1], h[0]))
        return hits[:k]


class ChromaCollection:
    """The Chroma collection of one database's vectors, synced from the ``vectors`` table.

    A state file in the Chroma folder records the generation tag, the embedder and the
    stamps of the vectors the collection holds; it is marked dirty before the collection is
    changed, so an interrupted sync is redone from scratch rather than trusted.
    """

    def __init__(self, path: Path, name: str):
        self.path = path
        self.name = name
        self.state_path = path / f"{name}.kbcli-sync"
        self._client: Any = None
        self._index: ChromaVectorIndex | None = None
        self._tag: str | None = None
        self.rebuilds = 0

    def _collection(self, reset: bool = False) -> Any:
        if self._client is None:
            chromadb = _chromadb()
            from chromadb.config import Settings

            self.path.mkdir(parents=True, exist_ok=True)
            self._client = chromadb.PersistentClient(
                path=str(self.path), settings=Settings(anonymized_telemetry=False)
            )
        if reset:
            try:
                self._client.delete_collection(self.name)
            except Exception:  # noqa: BLE001 - chroma raises its own types for "not found"
                pass
        return self._client.get_or_create_collection(
            self.name, embedding_function=None, metadata={"hnsw:space": "cosine"}
        )

    def index(self, conn: sqlite3.Connection) -> ChromaVectorIndex:
        """The collection as of ``conn``'s snapshot (synced first when it is stale)."""
        tag = _collection_tag(conn)
        if self._index is not None and self._tag == tag:
            return self._index
        with lock_file(self.path / f"{self.name}.kbcli-lock", 60.0, str(self.path)):
            state = self._load()
            if state is not None and state[0] == tag and not state[3]:
                self._index = ChromaVectorIndex(self._collection())
            else:
                self._sync(conn, tag, state)
        self._tag = tag
        assert self._index is not None
        return self._index

    def _sync(self, conn: sqlite3.Connection, tag: str, state: Any) -> None:
        embedder = _embedder_key(conn)
        current = sqlite_vectors.stamps(conn)
        rebuild = state is None or state[3] or state[2] != embedder
        held: dict[int, int] = {} if rebuild else state[1]
        self._save(state[0] if state else "", held, state[2] if state else "", dirty=True)
        index = ChromaVectorIndex(self._collection(reset=rebuild))
        if rebuild:
            self.rebuilds += 1
        gone = [r for r, s in held.items() if current.get(r) != s]
        new = [r for r, s in current.items() if held.get(r) != s]
        index.remove(gone)
        for start in range(0, len(new), SYNC_BATCH):
            part = new[start : start + SYNC_BATCH]
            ids, matrix = sqlite_vectors.read_vectors(conn, part)
            metas = catalog.metadata_by_rowid(conn, [int(i) for i in ids])
            index.upsert(
                [int(i) for i in ids],
                matrix,
                [chroma_metadata(metas.get(int(i), {})) for i in ids],
            )
            crash_point("vector-index-sync")
        self._save(tag, current, embedder, dirty=False)
        self._index = index

    def _save(self, tag: str, held: dict[int, int], embedder: str, *, dirty: bool) -> None:
        import numpy as np

        rows = np.asarray(sorted(held.items()), dtype="<i8").reshape(-1, 2)
        header = json.dumps(
            {"tag": tag, "embedder": embedder, "dirty": dirty, "n": len(rows)}
        ).encode()
        self.path.mkdir(parents=True, exist_ok=True)
        sqlite_vectors.write_atomic(
            self.state_path,
            [STATE_MAGIC, len(header).to_bytes(8, "little"), header, rows.tobytes()],
        )

    def _load(self) -> tuple[str, dict[int, int], str, bool] | None:
        import numpy as np

        try:
            data = self.state_path.read_bytes()
            if not data.startswith(STATE_MAGIC):
                return None
            size = int.from_bytes(data[8:16], "little")
            header = json.loads(data[16 : 16 + size])
            body = data[16 + size :]
            if len(body) != 16 * int(header["n"]):
                return None
            pairs = np.frombuffer(body, dtype="<i8").reshape(-1, 2)
            held = {int(r): int(s) for r, s in pairs}
            return str(header["tag"]), held, str(header["embedder"]), bool(header["dirty"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def verify(self, conn: sqlite3.Connection) -> str | None:
        """Why the collection of the current generation disagrees with the ``vectors`` table
        (state file, stamps, count), or None (agrees, missing, or stale)."""
        if not self.state_path.exists():
            return None
        state = self._load()
        if state is None:
            return f"{self.state_path.name} is damaged (the collection is rebuilt on use)"
        tag, held, _, dirty = state
        if dirty or tag != _collection_tag(conn):
            return None
        current = sqlite_vectors.stamps(conn)
        if held != current:
            wrong = len(set(held.items()) ^ set(current.items()))
            return f"the Chroma collection disagrees with the catalog on {wrong} vectors"
        count = len(ChromaVectorIndex(self._collection()))
        if count != len(current):
            return f"the Chroma collection holds {count} vectors, the catalog {len(current)}"
        return None

    def discard(self) -> None:
        """Delete the collection and its state file; rebuilt on next use."""
        with lock_file(self.path / f"{self.name}.kbcli-lock", 60.0, str(self.path)):
            self._collection(reset=True)
            self.state_path.unlink(missing_ok=True)
        self._index = None
        self._tag = None

    def close(self) -> None:
        """Drop the client (Chroma keeps its own files consistent)."""
        self._index = None
        self._tag = None
        self._client = None


def _collection_tag(conn: sqlite3.Connection) -> str:
    """Names what the collection must hold: the vectors' generation and the metadata epoch."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'metadata_epoch'").fetchone()
    tag = sqlite_vectors.generation_tag(conn)
    return f"{tag}|metadata:{row[0]}" if row else tag


def _embedder_key(conn: sqlite3.Connection) -> str:
    """What the whole collection depends on besides each vector: the embedder, and the epoch
    of the chunks' metadata (changed when an upgrade rewrites it in place, e.g. adds titles),
    since the collection holds a copy of it."""
    meta = dict(
        conn.execute("SELECT key, value FROM meta WHERE key IN ('embedder', 'metadata_epoch')")
    )
    key = meta.get("embedder", "")
    return f"{key}|metadata:{meta['metadata_epoch']}" if "metadata_epoch" in meta else key


class ChromaStore(RefreshAfterIngest, SQLiteStore):
    """SQLite catalog, keyword index and file ledger; dense search on a Chroma collection.

    ``path``: the Chroma folder; ``collection``: the collection's name. ``db``: the SQLite file
    beside it (default ``<path>/kbcli.db``). Not multi-process safe (Chroma's local mode).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ".chroma",
        collection: str = "jianmu",
        *,
        db: str | os.PathLike[str] | None = None,
        analyzer: Analyzer | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        create: bool = True,
    ):
        _chromadb()
        self.chroma_path = Path(path).expanduser()
        self.collection = collection
        db_path = Path(db).expanduser() if db is not None else self.chroma_path / "kbcli.db"
        super().__init__(db_path, analyzer=analyzer, busy_timeout=busy_timeout, create=create)

    def _open_vectors(self) -> ChromaCollection:
        return ChromaCollection(self.chroma_path, self.collection)

    def search(
        self, query_vec: list[float], k: int = 5, filter: dict[str, Any] | None = None
    ) -> list[SearchResult]:
        """Cosine similarity (``1 - distance``) from the Chroma collection among the chunks
        passing ``filter``: compiled to ``where``, else an exact scan of the allowed chunks."""
        filter = validate_filter(filter)
        if not len(query_vec):
            return super().search(query_vec, k, filter)
        with self._db.read() as conn:
            index = self._matrix.index(conn)
            if filter is None:
                hits = index.search(query_vec, k)
            else:
                try:
                    hits = index.search(query_vec, k, where=compile_where(filter))
                except FilterError:
                    hits = _exact_scan(
                        conn, query_vec, k, self._allowed.get(conn, filter)
                    )
            docs = catalog.documents_by_rowid(conn, [i for i, _ in hits])
        return [SearchResult(docs[i], score) for i, score in hits if i in docs]

    def stats(self) -> dict[str, Any]:
        """As :meth:`SQLiteStore.stats`, plus the Chroma folder and collection."""
        out = super().stats()
        out["vector_index"] = {
            "backend": "chroma",
            "path": str(self.chroma_path),
            "collection": self.collection,
        }
        return out


def _exact_scan(
    conn: sqlite3.Connection, query: Sequence[float], k: int, allowed: Sequence[int]
) -> list[tuple[int, float]]:
    """Cosine top ``k`` over the stored vectors of ``allowed`` (the truth, not the index)."""
    from ..vectors import as_unit_matrix, top_k_cosine

    if not allowed:
        return []
    ids, matrix = sqlite_vectors.read_vectors(conn, allowed)
    if not len(ids):
        return []
    hits = top_k_cosine(as_unit_matrix(matrix.copy()), query, k, None)
    return [(int(ids[i]), score) for i, score in hits]
