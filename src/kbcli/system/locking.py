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
