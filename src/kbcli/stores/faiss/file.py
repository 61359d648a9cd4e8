"""FaissFile: the FAISS index of one SQLite catalog's vectors, kept in ``<db>.faiss``.

A derived file (the ``vectors`` table is the truth): brought up to date by difference when the
vectors' generation moved, rebuilt when missing, damaged, of another format or settings, or when
most vectors changed; written temp -> fsync -> rename -> fsync(folder).
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from kbcli.stores.faiss.index import FaissVectorIndex
from kbcli.stores.sqlite import vectors as sqlite_vectors

FILE_MAGIC = b"KBFAISS2"  # 2: identical vectors held once (older files are rebuilt)
REBUILD_SHARE = 0.5  # a difference touching more than this share of vectors rebuilds instead


class FaissFile:
    """The FAISS index of one database's vectors, kept in ``<db>.faiss`` (a derived file).

    The file holds a header (magic, JSON with the generation tag, the index settings, the
    embedder and the stamps of the vectors it holds) followed by the serialised index. A
    header that does not match, a truncated or unreadable file is treated as missing.
    """

    def __init__(
        self,
        db_path: Path,
        dim: int | None,
        factory: str,
        normalize: bool,
        metric: str,
        ef_search: int | None = None,
    ):
        self.path = Path(f"{db_path}.faiss")
        self.factory, self.normalize, self.metric = factory, normalize, metric
        self.ef_search = ef_search  # a search-time setting: not part of the file's settings
        self.dim = dim
        self._current: tuple[str, FaissVectorIndex, dict[int, int], str] | None = None
        self.rebuilds = 0  # full rebuilds from the catalog (for tests and stats)

    @property
    def settings(self) -> dict[str, object]:
        """The index settings the file records (a file with others is rebuilt)."""
        return {"factory": self.factory, "normalize": self.normalize, "metric": self.metric}

    def _fresh(self) -> FaissVectorIndex:
        return FaissVectorIndex(
            self.dim, self.factory, self.normalize, self.metric, ef_search=self.ef_search
        )

    def index(self, conn: sqlite3.Connection) -> FaissVectorIndex:
        """The index as of ``conn``'s snapshot: the one in memory, the file, brought up to date
        by difference, or rebuilt from the catalog; written back when it changed."""
        tag = sqlite_vectors.generation_tag(conn)
        if self._current is not None and self._current[0] == tag:
            return self._current[1]
        base = self._current if self._current is not None else self._load()
        if base is not None and base[0] == tag:
            self._current = base
            return base[1]
        embedder = _embedder_key(conn)
        current = sqlite_vectors.stamps(conn)
        if base is None or base[3] != embedder:
            index = self._rebuild(conn)
        else:
            index, held = base[1], base[2]
            gone = [r for r, s in held.items() if current.get(r) != s]
            new = [r for r, s in current.items() if held.get(r) != s]
            if len(gone) + len(new) > REBUILD_SHARE * max(len(current), 1):
                index = self._rebuild(conn)
            else:
                index.remove(gone)
                if new:
                    ids, matrix = sqlite_vectors.read_vectors(conn, new)
                    index.upsert(ids, matrix)
        self._current = (tag, index, current, embedder)
        self._save()
        return index

    def _rebuild(self, conn: sqlite3.Connection) -> FaissVectorIndex:
        self.rebuilds += 1
        index = self._fresh()
        ids, matrix = sqlite_vectors.read_vectors(conn, [])
        index.build(ids, matrix, reuse=True)
        return index

    #: set by the store when its database is opened read-only: the index stays in memory
    read_only = False

    def _save(self) -> None:
        if self.read_only:
            return
        assert self._current is not None
        tag, index, held, embedder = self._current
        body = index.serialize()
        rows = sorted(held.items())
        import numpy as np

        stamp_bytes = np.asarray(rows, dtype="<i8").reshape(-1, 2).tobytes()
        header = json.dumps(
            {
                "tag": tag,
                "settings": self.settings,
                "embedder": embedder,
                "dim": index.dim,
                "flat_standin": index._flat_standin,
                "stamps": len(rows),
            }
        ).encode()
        head = FILE_MAGIC + len(header).to_bytes(8, "little") + header
        sqlite_vectors.write_atomic(self.path, [head, stamp_bytes, *body])
        sqlite_vectors.remove_dead_temp_files(self.path)

    def _load(self) -> tuple[str, FaissVectorIndex, dict[int, int], str] | None:
        import numpy as np

        try:
            with open(self.path, "rb") as fh:
                head = fh.read(16)
                size = int.from_bytes(head[8:16], "little")
                total = os.fstat(fh.fileno()).st_size
                if not head.startswith(FILE_MAGIC) or len(head) != 16 or size > total:
                    return None
                header = json.loads(fh.read(size))
                if header.get("settings") != self.settings:
                    return None
                n = int(header["stamps"])
                if total < fh.tell() + 16 * n:
                    return None
                pairs = np.frombuffer(fh.read(16 * n), dtype="<i8").reshape(-1, 2)
                index = self._fresh()
                index.load(fh.read, header["dim"], bool(header["flat_standin"]))
                if fh.tell() != total or not np.array_equal(index.ids(), pairs[:, 0]):
                    return None
            held = dict(zip(pairs[:, 0].tolist(), pairs[:, 1].tolist()))
            return str(header["tag"]), index, held, str(header["embedder"])
        except (OSError, ValueError, KeyError, TypeError, RuntimeError):
            return None

    def close(self) -> None:
        """Drop the index held in memory."""
        self._current = None

    def verify(self, conn: sqlite3.Connection) -> str | None:
        """Why the file of the current generation disagrees with the ``vectors`` table (the
        vectors it holds, by stamp), or None (agrees, missing, or stale)."""
        if not self.path.exists():
            return None
        loaded = self._load()
        if loaded is None:
            try:
                with open(self.path, "rb") as fh:
                    head = fh.read(16)
                size = int.from_bytes(head[8:16], "little")
                with open(self.path, "rb") as fh:
                    fh.seek(16)
                    header = json.loads(fh.read(size))
                if head.startswith(FILE_MAGIC) and header.get("settings") != self.settings:
                    return None  # built with other settings: rebuilt by the next search
            except (OSError, ValueError, AttributeError):
                pass
            return f"{self.path.name} is damaged or cut short (ignored by search)"
        tag, index, held, _ = loaded
        if tag != sqlite_vectors.generation_tag(conn):
            return None
        current = sqlite_vectors.stamps(conn)
        if held != current or len(index) != len(current):
            wrong = len(set(held.items()) ^ set(current.items()))
            return f"{self.path.name} disagrees with the catalog on {wrong} vectors"
        wrong = index.disagreements(*sqlite_vectors.read_vectors(conn, []))
        if wrong:
            return f"{self.path.name} holds other vectors than the catalog for {wrong} chunks"
        return None

    def discard(self) -> None:
        """Delete the FAISS file (and temp files of killed writers); rebuilt on next use."""
        self._current = None
        self.path.unlink(missing_ok=True)
        sqlite_vectors.remove_dead_temp_files(self.path)


def _embedder_key(conn: sqlite3.Connection) -> str:
    row = conn.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
    return row[0] if row else ""
