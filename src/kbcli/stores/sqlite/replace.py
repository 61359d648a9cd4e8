"""An index put in the place of a live one (``kb copy --replace``), safely for its readers.

Moving a database file over one in use corrupts it: the readers' write-ahead log and shared
memory (``-wal``, ``-shm``, found by name) are then applied to the new file by the next process
that opens it (SQLite's "How To Corrupt", renaming a database in use). Instead the new index is
written into the live file through SQLite's backup API, in one write transaction, under the
writer lock a ``kb ingest`` or ``kb watch`` batch takes: a running ``kb mcp`` or ``kb watch``
keeps its connection and sees the new index at its next transaction, never a mix. Derived files
beside the live database (keyword pack, vector cache) name the index they were built from and
are rebuilt when they no longer match.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kbcli.errors import DatabaseLockedError, StoreError
from kbcli.system.locking import lock_file


def replace_database(new: Path, live: Path, wait: float) -> None:
    """Write the SQLite database ``new`` over ``live`` (see the module docstring), waiting at
    most ``wait`` seconds for the writer lock and for readers' locks."""
    with lock_file(Path(f"{live}.ingest-lock"), wait, str(live)):
        source = sqlite3.connect(str(new))
        target = sqlite3.connect(str(live), timeout=wait)
        try:
            target.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
            source.backup(target)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise DatabaseLockedError(
                    f"{live} stayed locked for {wait:g} s: try again when its writer finishes"
                ) from None
            raise StoreError(f"Cannot write the copy into {live}: {exc}") from None
        finally:
            source.close()
            target.close()


def remove_database(path: Path) -> None:
    """Delete a kb database file that nothing uses and the files kept beside it."""
    for file in path.parent.glob(f"{path.name}*"):
        if file.name == path.name or file.name[len(path.name)] in "-.":
            file.unlink(missing_ok=True)
