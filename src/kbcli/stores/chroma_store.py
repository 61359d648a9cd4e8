"""ChromaStore: an SQLiteStore whose dense search runs on a Chroma collection (``kbcli[chroma]``).

The catalog, keyword index, file ledger and the vectors (the truth) stay in an SQLite file of
the collection's own (:mod:`~kbcli.stores.chroma_folder`: ``<folder>/<collection>.kbcli.db``,
or the ``db`` given); the collection is a derived vector index in cosine space (so
``1 - distance`` is the cosine), with ids = the catalog's rowids as strings and each chunk's
scalar metadata copied so Chroma ``where`` filters work. It is brought up to date from the
``vectors`` table whenever its recorded generation differs (by difference; rebuilt when the
embedder changed or an earlier sync was interrupted). Filters compile to ``where``
(:func:`compile_where`); what ``where`` cannot express (``$exists``, ``null``, string ranges,
fractions and numbers beyond 2**53) runs as an exact scan of the allowed chunks' vectors, so
a filter never returns fewer than k. A collection Chroma cannot read, or that disagrees with
the catalog (count, sampled vectors, a short answer), is rebuilt from the catalog; a search
never returns fewer hits than the catalog holds.

Chroma's local mode is not multi-process safe: kb serialises its own syncs with a lock file,
but run one writer at a time and do not point other Chroma clients at the folder.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..analysis import Analyzer
from ..crashpoints import crash_point
from ..errors import FilterError, IndexMismatchError, StoreError, require
from ..filters import validate_filter
from ..types import SearchResult
from . import chroma_folder
from .common import lock_file, scratch_folder
from .derived import RefreshAfterIngest
from .sqlite import SQLiteStore, catalog
from .sqlite import vectors as sqlite_vectors
from .sqlite.connection import DEFAULT_BUSY_TIMEOUT

STATE_MAGIC = b"KBCHROMA"
SYNC_BATCH = 5000  # rows per Chroma upsert (its maximum batch size is 5461)
COLLECTION_KEY = "chroma_collection"  # meta: the collection a catalog feeds
SEARCH_SAMPLE = 8  # vectors compared with the catalog once per generation, before searching
DOCTOR_SAMPLE = 256  # vectors compared by kb doctor


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
    where = _conjunction([_clause(key, value) for key, value in filter.items()])
    if _conditions(where) > MAX_WHERE_CONDITIONS:
        raise FilterError(f"Chroma cannot run more than {MAX_WHERE_CONDITIONS} conditions")
    return where


# Chroma turns each condition of a ``where`` into an SQLite expression of its own and refuses a
# tree deeper than SQLite's 1,000 (an $or of 1,000 values): bigger filters are scanned exactly.
MAX_WHERE_CONDITIONS = 500


def _conditions(where: dict[str, Any]) -> int:
    """How many ``{key: {op: operand}}`` conditions a compiled ``where`` holds."""
    return sum(
        sum(_conditions(sub) for sub in value) if key in ("$and", "$or") else 1
        for key, value in where.items()
    )


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
    files in the folder (:func:`~kbcli.stores.chroma_folder.wipe_chroma_files`) first.
    """

    def __init__(self, path: Path, name: str, catalog: Path | None = None):
        self.path = path
        self.name = name
        self.catalog = catalog
        self.state_path = chroma_folder.state_path(path, name)
        self._client: Any = None
        self._index: ChromaVectorIndex | None = None
        self._tag: str | None = None
        self.rebuilds = 0

    def _lock(self) -> Any:
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

    def _sync(self, conn: sqlite3.Connection, tag: str, state: Any) -> bool:
        """Bring the collection to ``tag`` by difference from ``state``, or rebuild it (no
        usable state, another embedder); True when rebuilt."""
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


def _index_id(db: str) -> str | None:
    """The ``index_id`` of the kb database at ``db``, None when it is not one (any more)."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'index_id'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return row[0] if row else None


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


class ChromaStore(RefreshAfterIngest, SQLiteStore):
    """SQLite catalog, keyword index and file ledger; dense search on a Chroma collection.

    ``path``: the Chroma folder; ``collection``: the collection's name, a namespace of its
    own: without ``db`` its catalog is ``<path>/<collection>.kbcli.db`` (see
    :mod:`~kbcli.stores.chroma_folder`; a folder of an older kbcli, with one ``kbcli.db`` for
    every collection, is split on first open). ``db``: the catalog elsewhere (``kb`` passes
    ``paths.knowledge_db``). A catalog feeds one collection and a collection is fed by one
    catalog: opening either with another is refused (:class:`IndexMismatchError`). Without
    ``path`` the store is private to this object: a temporary folder deleted on
    :meth:`close` (see :class:`SQLiteStore`). Not multi-process safe (Chroma's local mode).
    """

    _matrix: ChromaCollection

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        collection: str = "jianmu",
        *,
        db: str | os.PathLike[str] | None = None,
        analyzer: Analyzer | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        create: bool = True,
    ):
        _chromadb()
        self.collection = chroma_folder.check_collection_name(collection)
        if path is None:
            folder, self._scratch = scratch_folder(self)
            path = folder
        self.chroma_path = Path(path).expanduser()
        if db is None:
            chroma_folder.adopt_shared_catalog(self.chroma_path, collection)
            db_path = chroma_folder.catalog_path(self.chroma_path, collection)
        else:
            db_path = Path(db).expanduser()
        super().__init__(db_path, analyzer=analyzer, busy_timeout=busy_timeout, create=create)
        try:
            self._claim()
        except BaseException:
            SQLiteStore.close(self)
            raise

    def _open_vectors(self) -> ChromaCollection:
        return ChromaCollection(self.chroma_path, self.collection, self.path)

    def _claim(self) -> None:
        """Record this collection in the catalog, refusing a catalog of another collection or a
        collection synced from another catalog that still exists."""
        recorded = self.get_meta(COLLECTION_KEY)
        if recorded is not None and recorded != self.collection:
            raise IndexMismatchError(
                f"{self.path} is the catalog of the Chroma collection {recorded!r}, not "
                f"{self.collection!r}: use collection {recorded!r} (store.collection), or "
                f"give {self.collection!r} a database of its own (another --db)"
            )
        header = self._matrix.header() or {}
        owner, theirs = header.get("catalog"), str(header.get("tag", "")).split(":")[0]
        # another index (not a copy of this one) that still exists synced the collection
        if owner and theirs != self.get_meta("index_id") and _index_id(owner) == theirs:
            raise IndexMismatchError(
                f"The Chroma collection {self.collection!r} in {self.chroma_path} is built "
                f"from {owner}, not {self.path}: open that catalog (--db), or use another "
                "collection name"
            )
        if recorded is None:
            self.set_meta(COLLECTION_KEY, self.collection)

    def search(
        self, query_vec: list[float], k: int = 5, filter: dict[str, Any] | None = None
    ) -> list[SearchResult]:
        """Cosine similarity (``1 - distance``) from the Chroma collection among the chunks
        passing ``filter``: compiled to ``where``, else an exact scan of the allowed chunks.
        A collection Chroma cannot read is rebuilt; an answer shorter than the catalog's
        (a damaged collection, or HNSW coming back short) is replaced by an exact scan of the
        stored vectors, and a damaged collection rebuilt."""
        filter = validate_filter(filter)
        if not len(query_vec):
            return super().search(query_vec, k, filter)
        with self._db.read() as conn:
            hits, from_chroma = self._chroma_search(conn, query_vec, k, filter)
            if len(hits) < k and from_chroma:
                allowed = None if filter is None else self._allowed.get(conn, filter)
                exact = _exact_scan(conn, query_vec, k, allowed)
                if len(exact) > len(hits):
                    self._recheck(conn)
                    hits = exact
            docs = catalog.documents_by_rowid(conn, [i for i, _ in hits])
        return [SearchResult(docs[i], score) for i, score in hits if i in docs]

    def _chroma_search(
        self, conn: sqlite3.Connection, query_vec: list[float], k: int, filter: Any
    ) -> tuple[list[tuple[int, float]], bool]:
        """The hits and whether they came from Chroma (False: a filter ``where`` cannot
        express, scanned exactly)."""
        try:
            where = None if filter is None else compile_where(filter)
        except FilterError:
            return _exact_scan(conn, query_vec, k, self._allowed.get(conn, filter)), False
        for attempt in (1, 2):
            index = self._matrix.index(conn)
            try:
                with _chroma_calls():
                    return index.search(query_vec, k, where=where), True
            except ChromaUnreadable as exc:
                if attempt == 2:
                    raise self._matrix.unreadable(exc) from None
                self._matrix.rebuild(conn)
        raise AssertionError("unreachable")

    def _recheck(self, conn: sqlite3.Connection) -> None:
        """After a short answer: rebuild the collection when it disagrees with the catalog."""
        try:
            damaged = self._matrix.damage(conn, SEARCH_SAMPLE)
        except ChromaUnreadable:
            damaged = "unreadable"
        if damaged:
            self._matrix.rebuild(conn)

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
    conn: sqlite3.Connection, query: Sequence[float], k: int, allowed: Sequence[int] | None
) -> list[tuple[int, float]]:
    """Cosine top ``k`` over the stored vectors of ``allowed`` (None: every chunk's), from
    the catalog (the truth, not the index)."""
    from ..vectors import as_unit_matrix, top_k_cosine

    if allowed is not None and not len(allowed):
        return []
    if allowed is None:
        allowed = sorted(sqlite_vectors.stamps(conn))
        if not allowed:
            return []
    ids, matrix = sqlite_vectors.read_vectors(conn, allowed)
    if not len(ids):
        return []
    hits = top_k_cosine(as_unit_matrix(matrix.copy()), query, k, None)
    return [(int(ids[i]), score) for i, score in hits]
