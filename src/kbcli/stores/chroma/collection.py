"""The Chroma collection of one catalog's vectors: a derived vector index (``kbcli[chroma]``).

:class:`ChromaVectorIndex` is the :class:`~kbcli.stores.capabilities.VectorIndex` contract on a
cosine-space collection (ids = the catalog's rowids as strings, each chunk's scalar metadata
copied, :func:`~kbcli.stores.chroma.where.chroma_metadata`). :class:`ChromaCollection` keeps it
in step with the ``vectors`` table of an SQLite catalog: by difference when the vectors'
generation moved, rebuilt when the embedder changed, an earlier sync was interrupted (a state
file marked dirty first) or the collection disagrees with the catalog (count, sampled vectors,
a short answer); Chroma failing on its own files is turned into a rebuild, or one error naming
``kb doctor --repair``.

Chroma's local mode is not multi-process safe: kb serialises its own syncs with a lock file,
but run one writer at a time and do not point other Chroma clients at the folder.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import kbcli.stores.chroma.folder as chroma_folder
from kbcli.errors import StoreError, require
from kbcli.stores.chroma.where import chroma_metadata
from kbcli.stores.sqlite import catalog
from kbcli.stores.sqlite import vectors as sqlite_vectors
from kbcli.system.crashpoints import crash_point
from kbcli.system.locking import lock_file

# what _load reads of the state file: (tag, {id: stamp}, embedder, dirty)
State = tuple[str, dict[int, int], str, bool]
# Chroma's client and collections are typed Any: chromadb's annotations want invariant list
# types and optional results that the values kb passes and reads here do not match.

STATE_MAGIC = b"KBCHROMA"
SYNC_BATCH = 5000  # rows per Chroma upsert (its maximum batch size is 5461)
SEARCH_SAMPLE = 8  # vectors compared with the catalog once per generation, before searching
DOCTOR_SAMPLE = 256  # vectors compared by kb doctor


def _chromadb() -> ModuleType:
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    chromadb: ModuleType = require("chromadb", extra="chroma", feature="The chroma store")
    return chromadb


class ChromaVectorIndex:
    """A :class:`~kbcli.stores.capabilities.VectorIndex` on a Chroma collection in cosine space.

    Ids are integers (stored as strings); ``allowed`` restricts the query to those ids
    (Chroma's ``ids`` pre-filter); a ``where`` may be given instead. Chroma's HNSW is
    approximate, so ``exact`` is False.
    """

    exact = False

    def __init__(self, collection: Any) -> None:  # a chromadb Collection
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


class ChromaUnreadable(Exception):
    """Chroma failed on its own files (internal: rebuilt, or turned into a :class:`StoreError`
    naming ``kb doctor --repair``)."""


@contextmanager
def _chroma_calls() -> Iterator[None]:
    """Around calls into Chroma: whatever it raises while opening or reading its files means
    they are damaged (its Rust core raises many types); they are derived, so kb rebuilds them."""
    try:
        yield
    except ChromaUnreadable:
        raise
    except Exception as exc:  # noqa: BLE001 - see the docstring
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise ChromaUnreadable(text[:200]) from exc


class ChromaCollection:
    """The Chroma collection of one catalog's vectors, synced from its ``vectors`` table.

    A state file in the Chroma folder records the generation tag, the embedder, the catalog
    and the stamps of the vectors the collection holds; it is marked dirty before the
    collection is changed, so an interrupted sync is redone from scratch rather than trusted.
    A collection Chroma cannot read, or whose count or sampled vectors differ from the
    catalog's (:meth:`damage`), is rebuilt from the catalog; when even that fails (Chroma's
    own database is damaged) the error names ``kb doctor --repair``, which deletes Chroma's
    files in the folder (:func:`~kbcli.stores.chroma.folder.wipe_chroma_files`) first.
    """

    #: set by the store when its database is opened read-only: searches scan the catalog's
    #: vectors exactly and Chroma's files (which it cannot open without writing) are not used
    read_only = False

    def __init__(self, path: Path, name: str, catalog: Path | None = None):
        self.path = path
        self.name = name
        self.catalog = catalog
        self.state_path = chroma_folder.state_path(path, name)
        self._client: Any = None  # a chromadb ClientAPI, once opened
        self._index: ChromaVectorIndex | None = None
        self._tag: str | None = None
        self.rebuilds = 0

    def _lock(self) -> AbstractContextManager[None]:
        return lock_file(self.path / f"{self.name}.kbcli-lock", 60.0, str(self.path))

    def _collection(self, reset: bool = False) -> Any:
        with _chroma_calls():
            if self._client is None:
                self._client = _open_client(self.path)
            if reset and self.name in {c.name for c in self._client.list_collections()}:
                self._client.delete_collection(self.name)
            return self._client.get_or_create_collection(
                self.name, embedding_function=None, metadata={"hnsw:space": "cosine"}
            )

    def _readable(self) -> None:
        """Open the folder and list its collections, creating nothing (raises
        :class:`ChromaUnreadable`)."""
        with _chroma_calls():
            if self._client is None:
                self._client = _open_client(self.path)
            self._client.list_collections()

    def index(self, conn: sqlite3.Connection) -> ChromaVectorIndex:
        """The collection as of ``conn``'s snapshot: synced first when it is stale, rebuilt
        when it is damaged (:class:`StoreError` naming ``kb doctor --repair`` when it cannot
        be rebuilt)."""
        tag = _collection_tag(conn)
        if self._index is not None and self._tag == tag:
            return self._index
        with self._lock():
            try:
                state = self._load()
                trusted = state is not None and state[0] == tag and not state[3]
                rebuilt = False
                if trusted:
                    self._index = ChromaVectorIndex(self._collection())
                else:
                    rebuilt = self._sync(conn, tag, state)
                if not rebuilt and self.damage(conn, SEARCH_SAMPLE):
                    self._sync(conn, tag, None)
            except ChromaUnreadable:
                self._rebuild(conn, tag)
        self._tag = tag
        assert self._index is not None
        return self._index

    def rebuild(self, conn: sqlite3.Connection) -> None:
        """Rebuild the collection from the catalog now (after Chroma failed on it)."""
        with self._lock():
            self._rebuild(conn, _collection_tag(conn))
        self._tag = _collection_tag(conn)

    def _rebuild(self, conn: sqlite3.Connection, tag: str) -> None:
        self._index = None
        try:
            self._sync(conn, tag, None)
        except ChromaUnreadable as exc:
            self._index = None
            raise self.unreadable(exc) from None

    def unreadable(self, exc: Exception) -> StoreError:
        """The one-line error of a collection that could not be read nor rebuilt."""
        return StoreError(
            f"The Chroma collection {self.name!r} in {self.path} cannot be read ({exc}): run "
            "'kb doctor --repair' to rebuild it from the catalog"
        )

    def _sync(self, conn: sqlite3.Connection, tag: str, state: State | None) -> bool:
        """Bring the collection to ``tag`` by difference from ``state``, or rebuild it (no
        usable state, another embedder); True when rebuilt."""
        embedder = _embedder_key(conn)
        current = sqlite_vectors.stamps(conn)
        rebuild = state is None or state[3] or state[2] != embedder
        held: dict[int, int] = {} if rebuild or state is None else state[1]
        self._save(state[0] if state else "", held, state[2] if state else "", dirty=True)
        index = ChromaVectorIndex(self._collection(reset=rebuild))
        if rebuild:
            self.rebuilds += 1
        gone = [r for r, s in held.items() if current.get(r) != s]
        new = [r for r, s in current.items() if held.get(r) != s]
        with _chroma_calls():
            index.remove(gone)
        for start in range(0, len(new), SYNC_BATCH):
            part = new[start : start + SYNC_BATCH]
            ids, matrix = sqlite_vectors.read_vectors(conn, part)
            metas = catalog.metadata_by_rowid(conn, [int(i) for i in ids])
            with _chroma_calls():
                index.upsert(
                    [int(i) for i in ids],
                    matrix,
                    [chroma_metadata(metas.get(int(i), {})) for i in ids],
                )
            crash_point("vector-index-sync")
        self._save(tag, current, embedder, dirty=False)
        self._index = index
        return rebuild

    def damage(self, conn: sqlite3.Connection, sample: int) -> str | None:
        """Why the collection disagrees with the catalog's vectors, checked by count, by
        ``sample`` vectors spread over the rowids (ids and values) and by one query that must
        come back whole; None when it agrees. Raises :class:`ChromaUnreadable`."""
        import numpy as np

        wanted = conn.execute(
            "SELECT count(*) FROM vectors v JOIN chunks c ON c.doc = v.doc"
        ).fetchone()[0]
        collection = self._collection()
        with _chroma_calls():
            count = int(collection.count())
        if count != wanted:
            return f"the Chroma collection holds {count} vectors, the catalog {wanted}"
        if not wanted:
            return None
        ids, matrix = sqlite_vectors.read_vectors(conn, _spread_rowids(conn, sample))
        with _chroma_calls():
            got = collection.get(ids=[str(int(i)) for i in ids], include=["embeddings"])
            found = collection.query(
                query_embeddings=[matrix[0]], n_results=min(wanted, 10), include=[]
            )
        by_id = dict(zip(got["ids"], got["embeddings"]))
        missing = sum(str(int(i)) not in by_id for i in ids)
        if missing:
            return f"the Chroma collection lacks {missing} of {len(ids)} sampled vectors"
        wrong = sum(
            not np.allclose(np.asarray(by_id[str(int(i))], dtype=np.float32), row, atol=1e-5)
            for i, row in zip(ids, matrix)
        )
        if wrong:
            return (
                f"the Chroma collection holds other values for {wrong} of {len(ids)} sampled "
                "vectors"
            )
        if len(found["ids"][0]) < min(wanted, 10):
            return (
                f"a query of the Chroma collection gave {len(found['ids'][0])} of "
                f"{min(wanted, 10)} hits"
            )
        return None

    def _save(self, tag: str, held: dict[int, int], embedder: str, *, dirty: bool) -> None:
        import numpy as np

        rows = np.asarray(sorted(held.items()), dtype="<i8").reshape(-1, 2)
        header = json.dumps(
            {
                "tag": tag,
                "embedder": embedder,
                "dirty": dirty,
                "n": len(rows),
                "catalog": str(self.catalog) if self.catalog else None,
            }
        ).encode()
        self.path.mkdir(parents=True, exist_ok=True)
        sqlite_vectors.write_atomic(
            self.state_path,
            [STATE_MAGIC, len(header).to_bytes(8, "little"), header, rows.tobytes()],
        )

    def header(self) -> dict[str, Any] | None:
        """The state file's header (tag, embedder, catalog ...), None when missing or damaged."""
        try:
            with open(self.state_path, "rb") as fh:
                head = fh.read(16)
                if not head.startswith(STATE_MAGIC) or len(head) != 16:
                    return None
                header = json.loads(fh.read(int.from_bytes(head[8:16], "little")))
            return header if isinstance(header, dict) else None
        except (OSError, ValueError):
            return None

    def _load(self) -> State | None:
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
        (state file, stamps, count, sampled vectors, a short query, or Chroma failing on its
        files), or None (agrees, missing, or stale)."""
        if not (self.path / "chroma.sqlite3").exists():
            return None  # nothing synced yet, or Chroma's files gone: rebuilt on use
        try:
            state = self._load()
            if state is None or state[3] or state[0] != _collection_tag(conn):
                self._readable()  # rebuilt on use, but Chroma must be able to open its folder
                if state is None and self.state_path.exists():
                    return f"{self.state_path.name} is damaged (the collection is rebuilt on use)"
                return None
            held = state[1]
            current = sqlite_vectors.stamps(conn)
            if held != current:
                wrong = len(set(held.items()) ^ set(current.items()))
                return f"the Chroma collection disagrees with the catalog on {wrong} vectors"
            return self.damage(conn, DOCTOR_SAMPLE)
        except ChromaUnreadable as exc:
            return f"Chroma cannot read the collection {self.name!r} in {self.path} ({exc})"

    def discard(self) -> str | None:
        """Delete the collection and its state file; rebuilt on next use. When Chroma cannot
        even drop it, delete Chroma's files in the folder (every collection there is then
        rebuilt from its catalog on its next use) and say so."""
        note = None
        with self._lock():
            try:
                self._collection(reset=True)
            except ChromaUnreadable:
                self.close()
                gone = chroma_folder.wipe_chroma_files(self.path)
                note = (
                    f"deleted Chroma's unreadable files in {self.path} ({', '.join(gone)}) and "
                    "rebuilt the collection from the catalog"
                )
            self.state_path.unlink(missing_ok=True)
        self._index = None
        self._tag = None
        return note

    def close(self) -> None:
        """Release the client (Chroma keeps its own files consistent)."""
        self._index = None
        self._tag = None
        client, self._client = self._client, None
        close = getattr(client, "close", None)  # chromadb 1.5.x; older clients have none
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - releasing a damaged client must not fail close
                pass


def _open_client(path: Path) -> Any:
    chromadb = _chromadb()
    from chromadb.config import Settings

    path.mkdir(parents=True, exist_ok=True)
    try:
        return chromadb.PersistentClient(
            path=str(path), settings=Settings(anonymized_telemetry=False)
        )
    except Exception:
        # Chroma keeps the System of a folder it failed to start, and the next client gets
        # that broken one: drop it, so that the next open (after a repair) starts afresh
        from chromadb.api.shared_system_client import SharedSystemClient

        getattr(SharedSystemClient, "_identifier_to_system", {}).pop(str(path), None)
        raise


def _spread_rowids(conn: sqlite3.Connection, n: int) -> list[int]:
    """Up to ``n`` rowids of stored vectors spread from the lowest to the highest (one index
    seek each)."""
    low, high = conn.execute(
        "SELECT min(v.doc), max(v.doc) FROM vectors v JOIN chunks c ON c.doc = v.doc"
    ).fetchone()
    if low is None:
        return []
    picks = {low, high}
    step = max(1, (high - low) // max(1, n - 1))
    for mark in range(low, high, step):
        row = conn.execute(
            "SELECT v.doc FROM vectors v JOIN chunks c ON c.doc = v.doc WHERE v.doc >= ? "
            "ORDER BY v.doc LIMIT 1",
            (mark,),
        ).fetchone()
        if row is not None:
            picks.add(row[0])
        if len(picks) >= n:
            break
    return sorted(picks)


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
