"""The files of a Chroma folder: kbcli's per-collection catalogs beside Chroma's own files.

A collection is a namespace. Each collection ``C`` of a folder built by
:class:`~kbcli.stores.chroma.store.ChromaStore` without ``db`` has its own SQLite catalog
``<folder>/C.kbcli.db`` (documents, keyword index, vectors, file ledger, embedding cache; with
``C.kbcli.db.keyword-pack`` and ``C.kbcli.db.ingest-lock`` beside it), its sync state
``C.kbcli-sync`` and lock ``C.kbcli-lock``. Chroma keeps ``chroma.sqlite3`` and one folder per
segment (named by a UUID), shared by every collection of the folder.

Before catalogs were per collection, every collection of a folder shared ``<folder>/kbcli.db``.
:func:`adopt_shared_catalog` gives each collection that was synced from it (it has a
``C.kbcli-sync``) its own copy, and the only collection of a folder never synced the file
itself; the shared file is deleted once no collection still needs it.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import uuid
from pathlib import Path

from kbcli.errors import InvalidOptionError, StoreError
from kbcli.stores.sqlite.vectors import fsync_dir
from kbcli.system.locking import lock_file

SHARED_CATALOG = "kbcli.db"  # the one catalog of every collection, before per-collection ones
STATE_SUFFIX = ".kbcli-sync"
CHROMA_FILES = tuple(f"chroma.sqlite3{end}" for end in ("", "-wal", "-shm", "-journal"))
# Chroma's rule for collection names (3-512 characters, letters, digits, . _ -, starting and
# ending with a letter or digit): such a name is also a safe file name.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]")


def check_collection_name(name: str) -> str:
    """``name`` when Chroma accepts it as a collection name, else :class:`InvalidOptionError`."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise InvalidOptionError(
            f"Invalid Chroma collection name {str(name)[:60]!r}: use 3-512 letters, digits, "
            "'.', '_' or '-', starting and ending with a letter or digit"
        )
    return name


def catalog_path(folder: Path, collection: str) -> Path:
    """The SQLite catalog of ``collection`` in ``folder``."""
    return folder / f"{collection}.kbcli.db"


def state_path(folder: Path, collection: str) -> Path:
    """The sync state file of ``collection`` in ``folder``."""
    return folder / f"{collection}{STATE_SUFFIX}"


def adopt_shared_catalog(folder: Path, collection: str) -> bool:
    """Give ``collection`` its own copy of the folder's shared catalog of an older kbcli, when
    it was synced from it (or nothing was ever synced in the folder); True when copied.

    The copy is SQLite's online backup (WAL included) into a temporary file renamed into
    place, under the shared catalog's ingest lock; the shared file and its derived files go
    once every collection synced from it has its copy.
    """
    shared = folder / SHARED_CATALOG
    target = catalog_path(folder, collection)
    if target.exists() or not shared.exists():
        return False
    with lock_file(Path(f"{shared}.ingest-lock"), 60.0, str(shared)):
        if target.exists() or not shared.exists():
            return False
        synced = {p.name[: -len(STATE_SUFFIX)] for p in folder.glob(f"*{STATE_SUFFIX}")}
        waiting = {c for c in synced if not catalog_path(folder, c).exists()}
        if synced and collection not in waiting:
            return False  # a new collection beside older ones: it starts empty
        _copy_database(shared, target)
        if not waiting - {collection}:
            for path in folder.glob(f"{SHARED_CATALOG}*"):
                if path.is_file():
                    path.unlink(missing_ok=True)
    return True


def _copy_database(source: Path, target: Path) -> None:
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        src = sqlite3.connect(source)
        try:
            dst = sqlite3.connect(tmp)
            try:
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()
        os.replace(tmp, target)
    except (sqlite3.Error, OSError) as exc:
        tmp.unlink(missing_ok=True)
        raise StoreError(
            f"Cannot copy the shared catalog {source} to {target.name} ({exc}): check the "
            "folder's permissions and free space"
        ) from None
    fsync_dir(target.parent)


def wipe_chroma_files(folder: Path) -> list[str]:
    """Delete Chroma's own files in ``folder`` (its database and segment folders), keeping
    kbcli's catalogs and state files; returns the names deleted. Every collection there is
    rebuilt from its catalog on its next use."""
    gone = []
    for name in CHROMA_FILES:
        path = folder / name
        if path.exists():
            path.unlink()
            gone.append(name)
    for path in folder.iterdir() if folder.is_dir() else ():
        if path.is_dir() and _is_uuid(path.name):
            shutil.rmtree(path)
            gone.append(path.name)
    return gone


def _is_uuid(name: str) -> bool:
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False
