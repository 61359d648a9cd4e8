"""SQLiteStore: documents, float32 vectors and a BM25 inverted index in one SQLite file.

Layout (``PRAGMA user_version`` = :data:`SCHEMA_VERSION`, ``application_id`` = :data:`APP_ID`):

- ``chunks``: one row per document (chunk): id, text, metadata JSON, source, text hash, term
  count (BM25 document length), a packed forward index (term id, tf) used to undo postings
  exactly on delete, and ``src``, its row in ``sources``.
- ``sources``: one row per source (file) with its total length and chunk count; a chunk with
  no source is a source of its own. Keyword search adds each chunk's source-level BM25.
- ``vectors``: float32 BLOB per chunk.
- ``terms`` (term, df, sdf: chunk and source frequencies) and ``postings`` (term, src, doc, tf,
  dl) clustered by term then source: the inverted index, read at both levels. ``stats`` holds
  N, the total length, the number of sources and generation counters bumped by writes.
- ``files``: what ``kb ingest`` indexed from which file (used for incremental sync).
- ``embedding_cache``: vectors by (embedder, text hash), so unchanged text is never re-embedded.
- ``meta``: the embedder and analyzer the index was built with, last ingest time, and a random
  ``index_id`` that names this index (so a cache file can never be mistaken for another's).

Dense search reads all vectors as one float32 matrix. A cache file beside the database
(``<db>.vectors-cache``) holds that matrix for the current ``vector_generation``, so a new
process (each ``kb search``) maps it in milliseconds instead of reading every row; it is only a
cache: any write that changes vectors makes it stale, and deleting it is always safe.

Every write runs in one ``BEGIN IMMEDIATE`` transaction, so the statistics stay exact after any
mix of adds, upserts and deletes, and a crash leaves the file at the previous commit. Slow work
(tokenising) happens before the write lock is taken. Reads run in a deferred transaction so a
query sees one consistent snapshot while a writer works (WAL).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..analysis import KEYWORD_FIELDS, Analyzer, keyword_text
from ..embedders.base import EmbedderInfo
from ..errors import (
    DatabaseLockedError,
    IndexMismatchError,
    NotAKnowledgeBaseError,
    StoreError,
)
from ..filters import compile_sql, dumps_metadata, validate_filter
from ..scoring import MAX_SCORED_TERMS, SOURCE_WEIGHT, bm25_idf
from ..types import Document, FileRecord, SearchResult

SCHEMA_VERSION = 2
APP_ID = 0x4B42_4C49  # "KBLI"
DEFAULT_BUSY_TIMEOUT = 60.0

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE chunks (
    doc INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    text TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    source TEXT,
    text_hash TEXT NOT NULL,
    length INTEGER NOT NULL,
    terms BLOB NOT NULL,
    src INTEGER NOT NULL
);
CREATE INDEX chunks_source ON chunks (source);
CREATE TABLE sources (
    id INTEGER PRIMARY KEY,
    source TEXT UNIQUE,
    length INTEGER NOT NULL,
    chunks INTEGER NOT NULL
);
CREATE TABLE vectors (doc INTEGER PRIMARY KEY, vec BLOB NOT NULL);
CREATE TABLE terms (
    id INTEGER PRIMARY KEY,
    term TEXT NOT NULL UNIQUE,
    df INTEGER NOT NULL,
    sdf INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE postings (
    term INTEGER NOT NULL,
    src INTEGER NOT NULL,
    doc INTEGER NOT NULL,
    tf INTEGER NOT NULL,
    dl INTEGER NOT NULL,
    PRIMARY KEY (term, src, doc)
) WITHOUT ROWID;
CREATE TABLE stats (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n INTEGER NOT NULL,
    total_length INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    vector_generation INTEGER NOT NULL,
    sources INTEGER NOT NULL DEFAULT 0
);
INSERT INTO stats (id, n, total_length, generation, vector_generation) VALUES (1, 0, 0, 0, 0);
CREATE TABLE files (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    settings TEXT NOT NULL,
    chunk_ids TEXT NOT NULL,
    indexed_at TEXT NOT NULL
);
CREATE TABLE embedding_cache (
    embedder TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    vec BLOB NOT NULL,
    PRIMARY KEY (embedder, text_hash)
) WITHOUT ROWID;
"""


def _migrate_1_to_2(conn: sqlite3.Connection) -> None:
    """Schema 2 groups chunks by source for source-level BM25: a ``sources`` table, ``src`` on
    chunks and postings (postings re-clustered by term, source, chunk), ``terms.sdf``."""
    conn.execute(
        "CREATE TABLE sources (id INTEGER PRIMARY KEY, source TEXT UNIQUE,"
        " length INTEGER NOT NULL, chunks INTEGER NOT NULL)"
    )
    conn.execute(
        "INSERT INTO sources (source, length, chunks) SELECT source, sum(length), count(*)"
        " FROM chunks WHERE source IS NOT NULL GROUP BY source ORDER BY min(doc)"
    )
    conn.execute("ALTER TABLE chunks ADD COLUMN src INTEGER NOT NULL DEFAULT 0")
    conn.execute(
        "UPDATE chunks SET src = (SELECT id FROM sources s WHERE s.source = chunks.source)"
        " WHERE source IS NOT NULL"
    )
    # A chunk without a source is a source of its own.
    loose = conn.execute("SELECT doc, length FROM chunks WHERE source IS NULL ORDER BY doc")
    for doc, length in loose.fetchall():
        src = conn.execute(
            "INSERT INTO sources (source, length, chunks) VALUES (NULL, ?, 1)", (length,)
        ).lastrowid
        conn.execute("UPDATE chunks SET src = ? WHERE doc = ?", (src, doc))
    conn.execute(
        "CREATE TABLE postings_v2 (term INTEGER NOT NULL, src INTEGER NOT NULL,"
        " doc INTEGER NOT NULL, tf INTEGER NOT NULL, dl INTEGER NOT NULL,"
        " PRIMARY KEY (term, src, doc)) WITHOUT ROWID"
    )
    conn.execute(
        "INSERT INTO postings_v2 SELECT p.term, c.src, p.doc, p.tf, p.dl"
        " FROM postings p JOIN chunks c ON c.doc = p.doc"
    )
    conn.execute("DROP TABLE postings")
    conn.execute("ALTER TABLE postings_v2 RENAME TO postings")
    conn.execute("ALTER TABLE terms ADD COLUMN sdf INTEGER NOT NULL DEFAULT 0")
    conn.execute(
        "UPDATE terms SET sdf ="
        " (SELECT count(DISTINCT src) FROM postings p WHERE p.term = terms.id)"
    )
    conn.execute("ALTER TABLE stats ADD COLUMN sources INTEGER NOT NULL DEFAULT 0")
    conn.execute("UPDATE stats SET sources = (SELECT count(*) FROM sources)")


# Migrations from version N to N+1, run in one transaction when user_version says so.
_MIGRATIONS: dict[int, Any] = {1: _migrate_1_to_2}


def text_hash(text: str) -> str:
    """Stable hash of a chunk's text (key of the embedding cache)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _pack_vector(vec: Iterable[float]) -> bytes:
    return array("f", vec).tobytes()


def _unpack_vector(blob: bytes) -> list[float]:
    out = array("f")
    out.frombytes(blob)
    return out.tolist()


def _pack_terms(counts: dict[int, int]) -> bytes:
    flat = array("q")
    for term_id, tf in counts.items():
        flat.append(term_id)
        flat.append(tf)
    return flat.tobytes()


def _unpack_terms(blob: bytes) -> list[tuple[int, int]]:
    flat = array("q")
    flat.frombytes(blob)
    return list(zip(flat[0::2], flat[1::2]))


_CACHE_MAGIC = b"KBVECS1\n"


def _read_matrix_cache(path: Path, tag: str) -> tuple[Any, Any] | None:
    """(rowids, unit matrix) from the cache file when it was written for ``tag``, else None."""
    import numpy as np

    try:
        with open(path, "rb") as fh:
            if fh.read(len(_CACHE_MAGIC)) != _CACHE_MAGIC:
                return None
            header = json.loads(fh.readline())
            if header.get("tag") != tag:
                return None
            offset = fh.tell()
        n, dim = int(header["n"]), int(header["dim"])
        rowids = np.fromfile(path, dtype=np.int64, count=n, offset=offset)
        matrix = np.fromfile(path, dtype=np.float32, count=n * dim, offset=offset + 8 * n)
        if rowids.shape[0] != n or matrix.shape[0] != n * dim:
            return None
        return rowids, matrix.reshape(n, dim)
    except (OSError, ValueError, KeyError):
        return None


def _write_matrix_cache(path: Path, tag: str, rowids: Any, matrix: Any) -> None:
    """Write the cache atomically (temp file + rename); a failure only costs speed."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        header = json.dumps({"tag": tag, "n": int(rowids.shape[0]), "dim": int(matrix.shape[1])})
        with open(tmp, "wb") as fh:
            fh.write(_CACHE_MAGIC + header.encode() + b"\n")
            fh.write(rowids.astype("<i8").tobytes())
            fh.write(matrix.astype("<f4").tobytes())
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


class SQLiteStore:
    """A persistent store with an exact BM25 index and vectorised dense search.

    ``path`` defaults to ``paths.knowledge_db`` from the configuration; parent folders are
    created. ``analyzer`` tokenises text for the keyword index (default: :class:`Analyzer()`);
    the index records its signature and refuses to mix two analyzers. ``busy_timeout`` is how
    many seconds a writer waits for another writer before :class:`DatabaseLockedError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        analyzer: Analyzer | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        create: bool = True,
    ):
        if path is None:
            from ..config import get_config

            path = get_config().paths.knowledge_db
        self.path = Path(path).expanduser()
        self.analyzer = analyzer or Analyzer()
        self.busy_timeout = busy_timeout
        self._lock = threading.RLock()
        self._depth = 0
        self._matrix: tuple[int, Any, Any] | None = None
        self._conn = self._open(create)

    # --- opening, schema, transactions -------------------------------------------------------

    def _open(self, create: bool) -> sqlite3.Connection:
        exists = self.path.exists() and self.path.stat().st_size > 0
        if not exists and not create:
            raise StoreError(
                f"No knowledge base at {self.path}: run 'kb ingest PATH' first, or point --db "
                "at one"
            )
        if self.path.is_dir():
            raise NotAKnowledgeBaseError(f"{self.path} is a folder, not a kb database file")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"Cannot create the folder for {self.path}: {exc.strerror}") from None
        try:
            conn = sqlite3.connect(
                str(self.path),
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise StoreError(f"Cannot open {self.path}: {exc}") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            self._check_and_migrate(conn)
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.DatabaseError as exc:
            conn.close()
            if "readonly" in str(exc):
                raise StoreError(
                    f"Cannot write {self.path} ({exc}): kb needs write access to open it (a "
                    "one-time upgrade of its format, or its write-ahead log); check the "
                    "permissions of the file and its folder"
                ) from None
            if "locked" in str(exc) or "busy" in str(exc):
                raise DatabaseLockedError(
                    f"{self.path} stayed locked by another kb process for "
                    f"{self.busy_timeout:g} s: try again when it finishes"
                ) from None
            raise NotAKnowledgeBaseError(
                f"{self.path} is not a kb database ({exc}): choose another --db path"
            ) from None
        return conn

    def _check_and_migrate(self, conn: sqlite3.Connection) -> None:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if app_id == APP_ID and version == SCHEMA_VERSION:
            return
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if app_id != APP_ID and tables:
            raise NotAKnowledgeBaseError(
                f"{self.path} is an SQLite database of another program, not a kb database: "
                "choose another --db path"
            )
        if version > SCHEMA_VERSION:
            raise NotAKnowledgeBaseError(
                f"{self.path} was written by a newer kbcli (schema {version}, this one reads "
                f"{SCHEMA_VERSION}): upgrade kbcli"
            )
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-read under the write lock: another process may have created it meanwhile.
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            if app_id != APP_ID:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {APP_ID}")
                conn.execute("INSERT INTO meta VALUES ('index_id', ?)", (os.urandom(16).hex(),))
                version = SCHEMA_VERSION
            while version < SCHEMA_VERSION:
                _MIGRATIONS[version](conn)
                version += 1
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        """Close the connection (the store cannot be used afterwards)."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; nested calls join the outer one. Commits or rolls back whole."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self._conn
                finally:
                    self._depth -= 1
                return
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    raise DatabaseLockedError(
                        f"{self.path} is locked by another writer (waited "
                        f"{self.busy_timeout:g} s): try again when it finishes"
                    ) from None
                raise
            self._depth = 1
            try:
                yield self._conn
                self._conn.execute("UPDATE stats SET generation = generation + 1 WHERE id = 1")
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            finally:
                self._depth = 0

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for several SELECTs (joins an open write transaction)."""
        with self._lock:
            if self._depth:
                yield self._conn
                return
            self._conn.execute("BEGIN")
            try:
                yield self._conn
            finally:
                self._conn.execute("COMMIT")

    # --- meta: embedder and analyzer bookkeeping ---------------------------------------------

    @property
    def keyword_signature(self) -> str:
        """What the keyword index depends on: the analyzer and the indexed fields."""
        return f"{self.analyzer.signature};fields={KEYWORD_FIELDS}"

    def get_meta(self, key: str) -> str | None:
        """A value from the ``meta`` table."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        """Set a value in the ``meta`` table."""
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    @property
    def embedder_info(self) -> EmbedderInfo | None:
        """The embedder recorded for this index, if any vectors were stored."""
        raw = self.get_meta("embedder")
        if not raw:
            return None
        data = json.loads(raw)
        return EmbedderInfo(data["provider"], data["model"], data.get("dimension"))

    def check_embedder(self, info: EmbedderInfo) -> None:
        """Raise IndexMismatchError when the index was built with another embedder."""
        recorded = self.embedder_info
        if recorded is None:
            return
        same = recorded.provider == info.provider and recorded.model == info.model
        if same and info.dimension and recorded.dimension and info.dimension != recorded.dimension:
            same = False
        if not same:
            raise IndexMismatchError(
                f"The index at {self.path} was built with {recorded.describe()} but the "
                f"configured embedder is {info.describe()}: set rag.embedding back, or "
                "re-embed everything with 'kb ingest --rebuild'"
            )

    def _record_embedder(self, conn: sqlite3.Connection, info: EmbedderInfo, dim: int) -> None:
        row = conn.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
        if row is None:
            value = {"provider": info.provider, "model": info.model, "dimension": dim}
            conn.execute("INSERT INTO meta VALUES ('embedder', ?)", (json.dumps(value),))
            return
        recorded = json.loads(row[0])
        if (recorded["provider"], recorded["model"]) != (info.provider, info.model):
            self.check_embedder(EmbedderInfo(info.provider, info.model, dim))

    def _check_analyzer(self, conn: sqlite3.Connection, *, writing: bool) -> None:
        row = conn.execute("SELECT value FROM meta WHERE key = 'analyzer'").fetchone()
        signature = self.keyword_signature
        if row is None:
            if writing:
                conn.execute("INSERT INTO meta VALUES ('analyzer', ?)", (signature,))
            return
        if row[0] != signature:
            n = conn.execute("SELECT n FROM stats WHERE id = 1").fetchone()[0]
            if n == 0 and writing:
                conn.execute("UPDATE meta SET value = ? WHERE key = 'analyzer'", (signature,))
                return
            raise IndexMismatchError(
                f"The keyword index at {self.path} was built with analyzer [{row[0]}] but the "
                f"configured one is [{signature}]: rebuild it with 'kb ingest --rebuild' "
                "(or restore the analysis settings)"
            )

    # --- writes ------------------------------------------------------------------------------

    def add(
        self,
        docs: list[Document],
        embeddings: list[list[float]] | None = None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> list[str]:
        """Insert or replace ``docs`` (and their vectors) in one transaction; return their ids.

        Vectors come from ``embeddings[i]`` or ``doc.embedding``; all must have one length.
        ``embedder`` is recorded on first use and checked afterwards.
        """
        if embeddings is not None and len(embeddings) != len(docs):
            raise ValueError(f"{len(docs)} documents but {len(embeddings)} embeddings")
        prepared = []
        for i, doc in enumerate(docs):
            vec = embeddings[i] if embeddings is not None else doc.embedding
            counts = Counter(self.analyzer.terms(keyword_text(doc.text, doc.metadata)))
            prepared.append((doc, vec, counts))
        # The same id twice in one batch: the last one wins, as if added one by one.
        prepared = list({doc.id: (doc, vec, c) for doc, vec, c in prepared}.values())
        dims = {len(v) for _, v, _ in prepared if v is not None}
        if len(dims) > 1:
            raise IndexMismatchError(f"Vectors of different lengths in one batch: {sorted(dims)}")
        with self.transaction() as conn:
            self._check_analyzer(conn, writing=True)
            if dims:
                dim = dims.pop()
                index_dim = self._index_dimension(conn)
                if index_dim is not None and index_dim != dim:
                    raise IndexMismatchError(
                        f"New vectors have {dim} dimensions but the index at {self.path} has "
                        f"{index_dim}: use the embedder that built it or 'kb ingest --rebuild'"
                    )
                if embedder is not None:
                    self._record_embedder(conn, embedder, dim)
            self._delete_ids(conn, [doc.id for doc, _, _ in prepared])
            self._insert(conn, prepared)
        return [doc.id for doc in docs]

    def _index_dimension(self, conn: sqlite3.Connection) -> int | None:
        row = conn.execute("SELECT vec FROM vectors LIMIT 1").fetchone()
        return len(row[0]) // 4 if row else None

    def _term_ids(self, conn: sqlite3.Connection, terms: set[str]) -> dict[str, int]:
        ids: dict[str, int] = {}
        pending = list(terms)
        for start in range(0, len(pending), 500):
            part = pending[start : start + 500]
            marks = ",".join("?" * len(part))
            ids.update(conn.execute(f"SELECT term, id FROM terms WHERE term IN ({marks})", part))
        missing = [t for t in pending if t not in ids]
        if missing:
            next_id = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM terms").fetchone()[0]
            new = {t: next_id + i for i, t in enumerate(missing)}
            conn.executemany("INSERT INTO terms (term, id, df) VALUES (?, ?, 0)", new.items())
            ids.update(new)
        return ids

    def _insert(self, conn: sqlite3.Connection, prepared: list) -> None:
        vocab = set()
        for _, _, counts in prepared:
            vocab.update(counts)
        term_ids = self._term_ids(conn, vocab)
        df_delta: Counter[int] = Counter()
        postings = []
        vectors = []
        total = 0
        src_ids: dict[str, int] = {}
        new_srcs: set[int] = set()
        src_terms: dict[int, set[int]] = {}
        src_growth: Counter[int] = Counter()
        src_chunks: Counter[int] = Counter()
        for doc, vec, counts in prepared:
            length = sum(counts.values())
            by_id = {term_ids[t]: tf for t, tf in counts.items()}
            metadata = dict(doc.metadata)
            source = metadata.get("source")
            source = str(source) if source is not None else None
            src = self._source_id(conn, source, src_ids, new_srcs)
            cur = conn.execute(
                "INSERT INTO chunks (id, text, metadata, created_at, source, text_hash, length,"
                " terms, src) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    doc.id,
                    doc.text,
                    dumps_metadata(metadata),
                    doc.created_at.isoformat(),
                    source,
                    text_hash(doc.text),
                    length,
                    _pack_terms(by_id),
                    src,
                ),
            )
            rowid = cur.lastrowid
            postings.extend((tid, src, rowid, tf, length) for tid, tf in by_id.items())
            df_delta.update(by_id.keys())
            src_terms.setdefault(src, set()).update(by_id)
            src_growth[src] += length
            src_chunks[src] += 1
            total += length
            if vec is not None:
                vectors.append((rowid, _pack_vector(vec)))
        # A term's source frequency grows for each source that did not contain it before
        # (checked before the new postings go in; a new source contained nothing).
        sdf_delta = self._sources_without(conn, src_terms, new_srcs)
        conn.executemany("INSERT INTO postings VALUES (?, ?, ?, ?, ?)", postings)
        conn.executemany(
            "UPDATE terms SET df = df + ?, sdf = sdf + ? WHERE id = ?",
            ((d, sdf_delta.get(t, 0), t) for t, d in df_delta.items()),
        )
        conn.executemany(
            "UPDATE sources SET length = length + ?, chunks = chunks + ? WHERE id = ?",
            ((src_growth[src], src_chunks[src], src) for src in src_chunks),
        )
        conn.executemany("INSERT INTO vectors VALUES (?, ?)", vectors)
        if vectors:
            conn.execute("UPDATE stats SET vector_generation = vector_generation + 1 WHERE id = 1")
        conn.execute(
            "UPDATE stats SET n = n + ?, total_length = total_length + ?, sources = sources + ?"
            " WHERE id = 1",
            (len(prepared), total, len(new_srcs)),
        )

    @staticmethod
    def _sources_without(
        conn: sqlite3.Connection, src_terms: dict[int, set[int]], empty: set[int]
    ) -> Counter[int]:
        """Per term id, how many of ``src_terms``' sources have no posting of it: sources in
        ``empty`` count for all their terms without a lookup."""
        counts: Counter[int] = Counter()
        for src, term_set in src_terms.items():
            if src in empty:
                counts.update(term_set)
                continue
            for tid in term_set:
                found = conn.execute(
                    "SELECT 1 FROM postings WHERE term = ? AND src = ? LIMIT 1", (tid, src)
                ).fetchone()
                if found is None:
                    counts[tid] += 1
        return counts

    @staticmethod
    def _source_id(
        conn: sqlite3.Connection, source: str | None, known: dict[str, int], new: set[int]
    ) -> int:
        """The ``sources`` row of ``source``, created when missing (``new`` collects those).

        A chunk without a source is a source of its own."""
        if source is not None and source in known:
            return known[source]
        row = None
        if source is not None:
            row = conn.execute("SELECT id FROM sources WHERE source = ?", (source,)).fetchone()
        if row is not None:
            src = row[0]
        else:
            src = conn.execute(
                "INSERT INTO sources (source, length, chunks) VALUES (?, 0, 0)", (source,)
            ).lastrowid
            new.add(src)
        if source is not None:
            known[source] = src
        return src

    def delete(self, ids: list[str]) -> bool:
        """Delete documents by id in one transaction; True when at least one existed."""
        return self.remove(ids) > 0

    def remove(self, ids: list[str]) -> int:
        """Delete documents by id in one transaction; returns how many existed."""
        if not ids:
            return 0
        with self.transaction() as conn:
            return self._delete_ids(conn, list(ids))

    def _delete_ids(self, conn: sqlite3.Connection, ids: list[str]) -> int:
        rows = []
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            marks = ",".join("?" * len(part))
            rows.extend(
                conn.execute(
                    f"SELECT doc, length, terms, src FROM chunks WHERE id IN ({marks})", part
                ).fetchall()
            )
        return self._delete_rows(conn, rows)

    def _delete_rows(
        self, conn: sqlite3.Connection, rows: list[tuple[int, int, bytes, int]]
    ) -> int:
        if not rows:
            return 0
        df_delta: Counter[int] = Counter()
        doomed_postings = []
        src_terms: dict[int, set[int]] = {}
        src_shrink: Counter[int] = Counter()
        src_chunks: Counter[int] = Counter()
        total = 0
        for doc, length, packed, src in rows:
            pairs = _unpack_terms(packed)
            doomed_postings.extend((term_id, src, doc) for term_id, _ in pairs)
            df_delta.update(term_id for term_id, _ in pairs)
            src_terms.setdefault(src, set()).update(term_id for term_id, _ in pairs)
            src_shrink[src] += length
            src_chunks[src] += 1
            total += length
        conn.executemany(
            "DELETE FROM postings WHERE term = ? AND src = ? AND doc = ?", doomed_postings
        )
        # A term's source frequency drops for each source left without it; a source that
        # loses all its chunks loses every term, so only partial deletes need checking.
        emptied = set()
        for src, count in src_chunks.items():
            left = conn.execute("SELECT chunks FROM sources WHERE id = ?", (src,)).fetchone()
            if left is None or left[0] <= count:
                emptied.add(src)
        sdf_delta = self._sources_without(conn, src_terms, emptied)
        conn.executemany(
            "UPDATE terms SET df = df - ?, sdf = sdf - ? WHERE id = ?",
            ((d, sdf_delta.get(t, 0), t) for t, d in df_delta.items()),
        )
        conn.executemany("DELETE FROM terms WHERE id = ? AND df <= 0", ((t,) for t in df_delta))
        conn.executemany("DELETE FROM sources WHERE id = ?", ((src,) for src in emptied))
        conn.executemany(
            "UPDATE sources SET length = length - ?, chunks = chunks - ? WHERE id = ?",
            ((src_shrink[s], src_chunks[s], s) for s in src_chunks if s not in emptied),
        )
        docs = [(r[0],) for r in rows]
        conn.executemany("DELETE FROM vectors WHERE doc = ?", docs)
        conn.execute("UPDATE stats SET vector_generation = vector_generation + 1 WHERE id = 1")
        conn.executemany("DELETE FROM chunks WHERE doc = ?", docs)
        conn.execute(
            "UPDATE stats SET n = n - ?, total_length = total_length - ?, sources = sources - ?"
            " WHERE id = 1",
            (len(rows), total, len(emptied)),
        )
        return len(rows)

    def delete_source(self, source: str) -> int:
        """Delete every chunk of ``source`` and its file record; returns the chunk count."""
        with self.transaction() as conn:
            conn.execute("DELETE FROM files WHERE path = ?", (source,))
            return self._delete_source_rows(conn, source)

    def _delete_source_rows(self, conn: sqlite3.Connection, source: str) -> int:
        rows = conn.execute(
            "SELECT doc, length, terms, src FROM chunks WHERE source = ?", (source,)
        ).fetchall()
        return self._delete_rows(conn, rows)

    def delete_where(self, filter: dict[str, Any]) -> int:
        """Delete every chunk whose metadata passes ``filter``; returns how many."""
        where, params = compile_sql(validate_filter(filter))
        with self.transaction() as conn:
            rows = conn.execute(
                f"SELECT doc, length, terms, src FROM chunks WHERE {where}", params
            ).fetchall()
            return self._delete_rows(conn, rows)

    def replace_source(
        self,
        source: str,
        docs: list[Document],
        embeddings: list[list[float]] | None = None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> list[str]:
        """Atomically swap the chunks of ``source`` for ``docs``: no reader sees both or neither."""
        with self.transaction() as conn:
            self._delete_source_rows(conn, source)
            return self.add(docs, embeddings, embedder=embedder)

    def rebuild_keyword_index(self) -> int:
        """Re-tokenise every chunk with the current analyzer (no re-embedding); returns count."""
        with self.transaction() as conn:
            conn.execute("DELETE FROM postings")
            conn.execute("DELETE FROM terms")
            rows = conn.execute("SELECT doc, text, metadata, src FROM chunks").fetchall()
            vocab: set[str] = set()
            counted = []
            for doc, text, metadata, src in rows:
                counts = Counter(self.analyzer.terms(keyword_text(text, json.loads(metadata))))
                vocab.update(counts)
                counted.append((doc, src, counts))
            term_ids = self._term_ids(conn, vocab)
            df: Counter[int] = Counter()
            source_terms: dict[int, set[int]] = {}
            source_length: Counter[int] = Counter()
            total = 0
            for doc, src, counts in counted:
                length = sum(counts.values())
                by_id = {term_ids[t]: tf for t, tf in counts.items()}
                conn.executemany(
                    "INSERT INTO postings VALUES (?, ?, ?, ?, ?)",
                    ((tid, src, doc, tf, length) for tid, tf in by_id.items()),
                )
                conn.execute(
                    "UPDATE chunks SET length = ?, terms = ? WHERE doc = ?",
                    (length, _pack_terms(by_id), doc),
                )
                df.update(by_id.keys())
                source_terms.setdefault(src, set()).update(by_id)
                source_length[src] += length
                total += length
            sdf: Counter[int] = Counter()
            for term_set in source_terms.values():
                sdf.update(term_set)
            conn.executemany(
                "UPDATE terms SET df = ?, sdf = ? WHERE id = ?",
                ((d, sdf[t], t) for t, d in df.items()),
            )
            conn.executemany(
                "UPDATE sources SET length = ? WHERE id = ?",
                ((length, src) for src, length in source_length.items()),
            )
            conn.execute("UPDATE stats SET total_length = ? WHERE id = 1", (total,))
            conn.execute(
                "INSERT OR REPLACE INTO meta VALUES ('analyzer', ?)", (self.keyword_signature,)
            )
            return len(rows)

    # --- file records (incremental sync) ------------------------------------------------------

    def file_records(self) -> dict[str, FileRecord]:
        """Every indexed file, by absolute path."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT path, size, mtime_ns, sha256, settings, chunk_ids, indexed_at FROM files"
            ).fetchall()
        return {
            r[0]: FileRecord(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6]) for r in rows
        }

    def replace_file(
        self,
        record: FileRecord,
        docs: list[Document],
        embeddings: list[list[float]] | None,
        *,
        embedder: EmbedderInfo | None = None,
    ) -> int:
        """Swap a file's chunks and record in one transaction; returns the chunks removed.

        With ``embedder``, the vectors also go to the embedding cache, in the same transaction.
        """
        with self.transaction() as conn:
            removed = self._delete_source_rows(conn, record.path)
            if docs:
                self.add(docs, embeddings, embedder=embedder)
                if embedder is not None and embeddings is not None:
                    self.cache_embeddings(embedder, {d.text: v for d, v in zip(docs, embeddings)})
            self._put_record(conn, record)
            return removed

    def touch_file(self, record: FileRecord) -> None:
        """Update a file's record (new mtime, same content) without touching its chunks."""
        with self.transaction() as conn:
            self._put_record(conn, record)

    @staticmethod
    def _put_record(conn: sqlite3.Connection, record: FileRecord) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                record.path,
                record.size,
                record.mtime_ns,
                record.sha256,
                record.settings,
                json.dumps(record.chunk_ids),
                record.indexed_at,
            ),
        )

    # --- re-embedding (kb ingest --rebuild) ----------------------------------------------------

    def reembed(
        self,
        embed: Any,
        info: EmbedderInfo,
        *,
        batch_size: int = 256,
        progress: Any = None,
    ) -> int:
        """Re-embed every chunk with ``embed`` (texts -> vectors) and switch the index to ``info``.

        New vectors go to a staging table, committed batch by batch, so an interrupted run
        resumes where it stopped; the switch to the new vectors is one transaction, so searches
        never see a mix of two embedders. Returns the number of chunks embedded in this run.
        """
        target = json.dumps({"provider": info.provider, "model": info.model})
        with self.transaction() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS vectors_staging (doc INTEGER PRIMARY KEY, vec BLOB)"
            )
            row = conn.execute("SELECT value FROM meta WHERE key = 'reembed_target'").fetchone()
            if row is None or row[0] != target:
                conn.execute("DELETE FROM vectors_staging")
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('reembed_target', ?)", (target,))
        with self._read() as conn:
            todo = conn.execute(
                "SELECT doc, text FROM chunks WHERE doc NOT IN (SELECT doc FROM vectors_staging)"
                " ORDER BY doc"
            ).fetchall()
            total = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        done_before = total - len(todo)
        for start in range(0, len(todo), batch_size):
            part = todo[start : start + batch_size]
            vectors = embed([text for _, text in part])
            with self.transaction() as conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO vectors_staging VALUES (?, ?)",
                    ((doc, _pack_vector(v)) for (doc, _), v in zip(part, vectors)),
                )
            if progress is not None:
                progress(done_before + start + len(part), total)
        with self.transaction() as conn:
            dims = {r[0] for r in conn.execute("SELECT DISTINCT length(vec) FROM vectors_staging")}
            conn.execute("DELETE FROM vectors")
            conn.execute(
                "INSERT INTO vectors SELECT doc, vec FROM vectors_staging"
                " WHERE doc IN (SELECT doc FROM chunks)"
            )
            conn.execute("DROP TABLE vectors_staging")
            conn.execute("UPDATE stats SET vector_generation = vector_generation + 1 WHERE id = 1")
            conn.execute("DELETE FROM meta WHERE key IN ('reembed_target', 'embedder')")
            if dims:
                self._record_embedder(conn, info, dims.pop() // 4)
        return len(todo)

    # --- embedding cache ---------------------------------------------------------------------

    @staticmethod
    def _cache_key(info: EmbedderInfo) -> str:
        return f"{info.provider}/{info.model}"

    def cached_embeddings(self, info: EmbedderInfo, texts: list[str]) -> dict[str, list[float]]:
        """Vectors already computed by this embedder for any of ``texts``, by text."""
        key = self._cache_key(info)
        by_hash = {text_hash(t): t for t in texts}
        found: dict[str, list[float]] = {}
        hashes = list(by_hash)
        with self._read() as conn:
            for start in range(0, len(hashes), 500):
                part = hashes[start : start + 500]
                marks = ",".join("?" * len(part))
                for h, blob in conn.execute(
                    "SELECT text_hash, vec FROM embedding_cache"
                    f" WHERE embedder = ? AND text_hash IN ({marks})",
                    [key, *part],
                ):
                    found[by_hash[h]] = _unpack_vector(blob)
        return found

    def cache_embeddings(self, info: EmbedderInfo, vectors: dict[str, list[float]]) -> None:
        """Remember vectors by (embedder, text hash) so unchanged text is never re-embedded."""
        key = self._cache_key(info)
        with self.transaction() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO embedding_cache VALUES (?, ?, ?)",
                ((key, text_hash(t), _pack_vector(v)) for t, v in vectors.items()),
            )

    # --- reads -------------------------------------------------------------------------------

    def _rows_to_documents(self, rows: Iterable[tuple]) -> list[Document]:
        return [
            Document(
                id=row[0],
                text=row[1],
                metadata=json.loads(row[2]),
                created_at=datetime.fromisoformat(row[3]),
            )
            for row in rows
        ]

    _DOC_COLUMNS = "id, text, metadata, created_at"

    def _documents_by_rowid(
        self, conn: sqlite3.Connection, rowids: list[int]
    ) -> dict[int, Document]:
        out: dict[int, Document] = {}
        for start in range(0, len(rowids), 500):
            part = rowids[start : start + 500]
            marks = ",".join("?" * len(part))
            rows = conn.execute(
                f"SELECT doc, {self._DOC_COLUMNS} FROM chunks WHERE doc IN ({marks})", part
            ).fetchall()
            for row, doc in zip(rows, self._rows_to_documents(r[1:] for r in rows)):
                out[row[0]] = doc
        return out

    def get(self, ids: list[str], *, with_embeddings: bool = False) -> list[Document]:
        """The stored documents among ``ids``, in the order asked."""
        found: dict[str, Document] = {}
        with self._read() as conn:
            for start in range(0, len(ids), 500):
                part = ids[start : start + 500]
                marks = ",".join("?" * len(part))
                rows = conn.execute(
                    f"SELECT {self._DOC_COLUMNS}, vec FROM chunks LEFT JOIN vectors USING (doc)"
                    f" WHERE id IN ({marks})",
                    part,
                ).fetchall()
                for row, doc in zip(rows, self._rows_to_documents(rows)):
                    if with_embeddings and row[4] is not None:
                        doc.embedding = _unpack_vector(row[4])
                    found[doc.id] = doc
        return [found[i] for i in ids if i in found]

    def list_all(self) -> list[Document]:
        """Every stored document, oldest first."""
        return list(self.iter_documents())

    def iter_documents(
        self,
        filter: dict[str, Any] | None = None,
        *,
        source: str | None = None,
        limit: int | None = None,
    ) -> Iterator[Document]:
        """Documents passing ``filter`` (and of ``source``), oldest first, at most ``limit``."""
        where, params = compile_sql(validate_filter(filter))
        if source is not None:
            where += " AND source = ?"
            params.append(source)
        sql = f"SELECT {self._DOC_COLUMNS} FROM chunks WHERE {where} ORDER BY doc"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        with self._read() as conn:
            rows = conn.execute(sql, params).fetchall()
        yield from self._rows_to_documents(rows)

    def count(self) -> int:
        """Number of stored documents."""
        with self._lock:
            return self._conn.execute("SELECT n FROM stats WHERE id = 1").fetchone()[0]

    def __len__(self) -> int:
        return self.count()

    @property
    def version(self) -> int:
        """Generation counter: changes after every committed write."""
        with self._lock:
            return self._conn.execute("SELECT generation FROM stats WHERE id = 1").fetchone()[0]

    def sources(self) -> list[tuple[str, int]]:
        """Each source with its number of chunks, sorted by source."""
        with self._lock:
            return self._conn.execute(
                "SELECT source, chunks FROM sources WHERE source IS NOT NULL ORDER BY source"
            ).fetchall()

    def stats(self) -> dict[str, Any]:
        """Counts and settings of the index (for ``kb stats``)."""
        with self._read() as conn:
            n, total, generation = conn.execute(
                "SELECT n, total_length, generation FROM stats WHERE id = 1"
            ).fetchone()
            sources = conn.execute(
                "SELECT count(*) FROM sources WHERE source IS NOT NULL"
            ).fetchone()[0]
            vocabulary = conn.execute("SELECT count(*) FROM terms").fetchone()[0]
            vectors = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
            files = conn.execute("SELECT count(*) FROM files").fetchone()[0]
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        size = sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())
        embedder = json.loads(meta["embedder"]) if "embedder" in meta else None
        return {
            "path": str(self.path),
            "chunks": n,
            "sources": sources,
            "files": files,
            "vectors": vectors,
            "vocabulary": vocabulary,
            "avg_chunk_terms": (total / n) if n else 0.0,
            "size_bytes": size,
            "embedder": embedder,
            "analyzer": meta.get("analyzer"),
            "last_ingest": meta.get("last_ingest"),
            "schema_version": SCHEMA_VERSION,
            "generation": generation,
        }

    # --- keyword search ----------------------------------------------------------------------

    def keyword_search(
        self,
        query: str,
        k: int = 5,
        filter: dict[str, Any] | None = None,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        source_weight: float = SOURCE_WEIGHT,
    ) -> list[SearchResult]:
        """BM25 over the persistent inverted index; ``filter`` applies before ranking.

        A chunk scores its own BM25 plus ``source_weight`` times the BM25 of its whole source
        (its file: all its chunks as one text, scored among all sources), so a chunk of a file
        about the query outranks a chunk that only mentions it. With a filter, the source part
        counts only the chunks that pass it. Each query term counts as often as it occurs in
        the query (as the plain formula does). Every hit's ``explain`` holds both parts.
        """
        filter = validate_filter(filter)
        query_counts = self.analyzer.query_counts(query)
        if not query_counts:
            return []
        with self._read() as conn:
            self._check_analyzer(conn, writing=False)
            n, total, n_sources = conn.execute(
                "SELECT n, total_length, sources FROM stats WHERE id = 1"
            ).fetchone()
            if n == 0:
                return []
            wanted = list(query_counts)
            marks = ",".join("?" * len(wanted))
            found = conn.execute(
                f"SELECT id, term, df, sdf FROM terms WHERE term IN ({marks})", wanted
            ).fetchall()
            if not found:
                return []
            # Bound the work for pasted paragraphs: keep the rarest terms.
            found.sort(key=lambda row: row[2])
            found = found[:MAX_SCORED_TERMS]
            chunk_w = {tid: bm25_idf(n, df) * query_counts[t] for tid, t, df, _ in found}
            source_w = {tid: bm25_idf(n_sources, sdf) * query_counts[t] for tid, t, _, sdf in found}
            rows = self._bm25_rows(
                conn,
                chunk_w,
                source_w,
                filter,
                k,
                k1,
                b,
                total / n,
                total / max(n_sources, 1),
                source_weight,
            )
            docs = self._documents_by_rowid(conn, [r[0] for r in rows])
        results = []
        for doc, score, chunk_score, source_score in rows:
            if doc in docs:
                explain = {
                    "bm25_chunk": chunk_score,
                    "bm25_source": source_score,
                    "source_weight": source_weight,
                }
                results.append(SearchResult(docs[doc], float(score), explain))
        return results

    @staticmethod
    def _bm25_rows(
        conn: sqlite3.Connection,
        chunk_w: dict[int, float],
        source_w: dict[int, float],
        filter: dict[str, Any] | None,
        k: int,
        k1: float,
        b: float,
        avgdl: float,
        avgsl: float,
        source_weight: float,
    ) -> list[tuple[int, float, float, float]]:
        """``(chunk rowid, score, chunk BM25, source BM25)`` of the ``k`` best chunks."""
        term_marks = ",".join("?" * len(chunk_w))
        hits_params: list[Any] = list(chunk_w)
        hits_sql = "SELECT p.term, p.src, p.doc, p.tf, p.dl FROM postings p"
        where = f" WHERE p.term IN ({term_marks})"
        if filter:
            # CROSS JOIN keeps postings as the outer loop: the filter is checked only for
            # chunks that contain a query term, not for the whole table.
            fsql, fparams = compile_sql(filter, "c.metadata")
            hits_sql += " CROSS JOIN chunks c ON c.doc = p.doc"
            where += f" AND {fsql}"
            hits_params += fparams
        hits_sql += where

        def weight_case(weights: dict[int, float]) -> tuple[str, list[Any]]:
            sql = "CASE h.term " + " ".join("WHEN ? THEN ?" for _ in weights) + " END"
            return sql, [x for tid, w in weights.items() for x in (tid, w)]

        chunk_case, chunk_params = weight_case(chunk_w)
        chunk_sql = (
            f"SELECT h.doc AS doc, h.src AS src, sum(({chunk_case}) * h.tf * ?"
            " / (h.tf + ? * (? + ? * h.dl))) AS score FROM hits h GROUP BY h.doc"
        )
        chunk_params += [k1 + 1.0, k1, 1.0 - b, b / avgdl if avgdl else 0.0]
        if source_weight == 0.0:
            sql = (
                f"WITH hits AS ({hits_sql}), per_chunk AS ({chunk_sql})"
                " SELECT doc, score, score, 0.0 FROM per_chunk ORDER BY score DESC, doc LIMIT ?"
            )
            return conn.execute(sql, [*hits_params, *chunk_params, int(k)]).fetchall()
        source_case, source_params = weight_case(source_w)
        source_sql = (
            f"SELECT h.src AS src, sum(({source_case}) * h.tf * ?"
            " / (h.tf + ? * (? + ? * s.length))) AS score"
            " FROM (SELECT term, src, sum(tf) AS tf FROM hits GROUP BY term, src) h"
            " JOIN sources s ON s.id = h.src GROUP BY h.src"
        )
        source_params += [k1 + 1.0, k1, 1.0 - b, b / avgsl if avgsl else 0.0]
        sql = (
            f"WITH hits AS ({hits_sql}), per_chunk AS ({chunk_sql}),"
            f" per_source AS ({source_sql})"
            " SELECT c.doc, c.score + ? * s.score AS total, c.score, s.score"
            " FROM per_chunk c JOIN per_source s ON s.src = c.src"
            " ORDER BY total DESC, c.doc LIMIT ?"
        )
        params = [*hits_params, *chunk_params, *source_params, source_weight, int(k)]
        return conn.execute(sql, params).fetchall()

    # --- dense search ------------------------------------------------------------------------

    @property
    def vector_cache_path(self) -> Path:
        """The cache file holding the dense matrix (safe to delete at any time)."""
        return Path(f"{self.path}.vectors-cache")

    def _unit_matrix(self, conn: sqlite3.Connection) -> tuple[Any, Any]:
        generation = conn.execute("SELECT vector_generation FROM stats WHERE id = 1").fetchone()[0]
        if self._matrix is None or self._matrix[0] != generation:
            row = conn.execute("SELECT value FROM meta WHERE key = 'index_id'").fetchone()
            tag = f"{row[0] if row else ''}:{generation}"
            cached = _read_matrix_cache(self.vector_cache_path, tag)
            if cached is None:
                cached = self._load_matrix(conn)
                _write_matrix_cache(self.vector_cache_path, tag, *cached)
            self._matrix = (generation, *cached)
        return self._matrix[1], self._matrix[2]

    def _load_matrix(self, conn: sqlite3.Connection) -> tuple[Any, Any]:
        import numpy as np

        from ..vectors import as_unit_matrix

        rows = conn.execute("SELECT doc, vec FROM vectors ORDER BY doc").fetchall()
        rowids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        if not rows:
            return rowids, np.zeros((0, 0), dtype=np.float32)
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
        return rowids, as_unit_matrix(matrix.reshape(len(rows), -1).copy())

    def search(
        self, query_vec: list[float], k: int = 5, filter: dict[str, Any] | None = None
    ) -> list[SearchResult]:
        """Cosine similarity over every stored vector that passes ``filter``, best first."""
        filter = validate_filter(filter)
        from ..vectors import top_k_cosine

        with self._read() as conn:
            rowids, matrix = self._unit_matrix(conn)
            if rowids.shape[0] == 0:
                return []
            if filter:
                hits = self._filtered_top_k(conn, rowids, matrix, query_vec, k, filter)
            else:
                hits = top_k_cosine(matrix, query_vec, k)
            docs = self._documents_by_rowid(conn, [int(rowids[i]) for i, _ in hits])
        return [
            SearchResult(docs[int(rowids[i])], score) for i, score in hits if int(rowids[i]) in docs
        ]

    def checkpoint(self) -> None:
        """Fold the WAL back into the database file (PASSIVE: never waits for readers)."""
        with self._lock:
            if not self._depth:
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _filtered_top_k(
        self,
        conn: sqlite3.Connection,
        rowids: Any,
        matrix: Any,
        query_vec: Any,
        k: int,
        filter: dict,
    ) -> list[tuple[int, float]]:
        """Exact top-k among documents passing ``filter``.

        Walks the ranking best-first, checking the filter on growing slices of candidates, so a
        filter that most documents pass costs a few metadata lookups instead of a JSON scan of
        the whole table; a very selective filter falls back to computing the allowed set.
        """
        import numpy as np

        from ..filters import matches
        from ..vectors import cosine_scores, top_k_scores

        scores = cosine_scores(matrix, query_vec)
        total = rowids.shape[0]
        checked = 0
        passing: list[tuple[int, float]] = []
        window = max(4 * k, 64)
        while checked < total and window <= 4096:
            ranked = top_k_scores(scores, min(total, checked + window))
            fresh = ranked[checked:]
            metas = self._metadata_by_rowid(conn, [int(rowids[i]) for i, _ in fresh])
            passing.extend(
                (i, score) for i, score in fresh if matches(metas.get(int(rowids[i]), {}), filter)
            )
            checked += len(fresh)
            if len(passing) >= k:
                return passing[:k]
            window *= 4
        if checked >= total:
            return passing[:k]
        where, params = compile_sql(filter)
        allowed = np.fromiter(
            (r[0] for r in conn.execute(f"SELECT doc FROM chunks WHERE {where}", params)),
            dtype=np.int64,
        )
        return top_k_scores(scores, k, np.isin(rowids, allowed))

    def _metadata_by_rowid(self, conn: sqlite3.Connection, rowids: list[int]) -> dict[int, dict]:
        out: dict[int, dict] = {}
        for start in range(0, len(rowids), 500):
            part = rowids[start : start + 500]
            marks = ",".join("?" * len(part))
            for doc, meta in conn.execute(
                f"SELECT doc, metadata FROM chunks WHERE doc IN ({marks})", part
            ):
                out[doc] = json.loads(meta)
        return out

    # --- integrity ---------------------------------------------------------------------------

    def integrity_check(self) -> list[str]:
        """SQLite's integrity check plus kbcli's own invariants; empty list when all is well."""
        problems: list[str] = []
        with self._read() as conn:
            result = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
            if result != ["ok"]:
                problems.extend(result)
            n, total = conn.execute("SELECT n, total_length FROM stats WHERE id = 1").fetchone()
            real_n, real_total = conn.execute(
                "SELECT count(*), coalesce(sum(length), 0) FROM chunks"
            ).fetchone()
            if (n, total) != (real_n, real_total):
                problems.append(
                    f"stats say {n} chunks/{total} terms, table has {real_n}/{real_total}"
                )
            bad_df = conn.execute(
                "SELECT count(*) FROM terms t WHERE df != (SELECT count(*) FROM postings p"
                " WHERE p.term = t.id)"
            ).fetchone()[0]
            if bad_df:
                problems.append(f"{bad_df} terms have a wrong document frequency")
            problems.extend(self._source_problems(conn))
        return problems

    @staticmethod
    def _source_problems(conn: sqlite3.Connection) -> list[str]:
        """Invariants of the source grouping (source-level BM25)."""
        problems = []
        real = {
            src: (length, count)
            for src, length, count in conn.execute(
                "SELECT src, sum(length), count(*) FROM chunks GROUP BY src"
            )
        }
        recorded = {
            src: (length, count)
            for src, length, count in conn.execute("SELECT id, length, chunks FROM sources")
        }
        if real != recorded:
            problems.append(f"{len(set(real.items()) ^ set(recorded.items()))} sources are off")
        stated = conn.execute("SELECT sources FROM stats WHERE id = 1").fetchone()[0]
        if stated != len(recorded):
            problems.append(f"stats say {stated} sources, table has {len(recorded)}")
        misplaced = conn.execute(
            "SELECT count(*) FROM postings p JOIN chunks c ON c.doc = p.doc WHERE p.src != c.src"
        ).fetchone()[0]
        if misplaced:
            problems.append(f"{misplaced} postings name the wrong source")
        bad_sdf = conn.execute(
            "SELECT count(*) FROM terms t WHERE sdf != (SELECT count(DISTINCT src)"
            " FROM postings p WHERE p.term = t.id)"
        ).fetchone()[0]
        if bad_sdf:
            problems.append(f"{bad_sdf} terms have a wrong source frequency")
        return problems
