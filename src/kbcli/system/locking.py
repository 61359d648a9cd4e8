"""The lock file that keeps one writer at a time (an index's ingest, the trust records)."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kbcli.errors import DatabaseLockedError


@contextmanager
def lock_file(path: Path, wait: float, holder: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if needed), waiting up to ``wait`` s.

    A separate file, never a database itself: closing a descriptor on an SQLite file would drop
    SQLite's own POSIX locks. ``holder`` names the database in the error message.
    """
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + max(0.0, wait)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise DatabaseLockedError(
                        f"Another kb ingest is writing to {holder}; waited {wait:g} s. "
                        "Try again when it finishes, or raise --wait"
                    ) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        os.close(fd)  # releases the flock


def lock_held(path: Path) -> bool:
    """True when a process holds the :func:`lock_file` lock on ``path`` now, found out without
    taking it: Linux lists every ``flock`` in ``/proc/locks`` by device and inode. Where that
    list cannot be read, a shared lock is tried without waiting and let go at once (a writer
    starting in that instant waits its ``--wait``). A missing file: no one holds it."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    try:
        with open("/proc/locks", "rb") as listing:
            locks = listing.read().decode("ascii", "replace")
    except OSError:
        return _probe(path)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in locks.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 fd:01:123 0 EOF" (" -> ..." lines wait, not hold)
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == inode:
            return True
    return False


def _probe(path: Path) -> bool:
    """Whether a shared ``flock`` on ``path`` is refused right now (taken and let go)."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EAGAIN, errno.EACCES)
    finally:
        os.close(fd)
    return False
