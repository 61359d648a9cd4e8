"""Whether a ``kb watch`` is following an index: the marker file it holds while it runs.

A watch holds a shared ``flock`` on ``<database>.watching`` (its pid written in it, for people)
from start to stop (:func:`watching`); ``kb status`` asks :func:`watch_running`, which tries an
exclusive lock without waiting and lets it go at once. The kernel drops a lock when its process
dies, so a marker left by a ``kill -9`` reads as "not running" (a stale pid is never trusted),
and several watches of one index (other folders) share the marker. The last watch to stop
removes the file.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SUFFIX = ".watching"


def marker_path(database: Path) -> Path:
    """Where the marker of the index at ``database`` lives (beside it)."""
    db = Path(database).expanduser().resolve()
    return db.with_name(db.name + SUFFIX)


@contextmanager
def watching(database: Path) -> Iterator[None]:
    """Hold the marker of ``database`` while the block runs (a watch's life)."""
    import fcntl

    path = marker_path(database)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError:  # a folder we cannot write to: a watch still runs, unseen by kb status
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a status holds it for an instant
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        try:  # the last watch out removes the file
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(path)
        except OSError:
            pass
        os.close(fd)


def watch_running(database: Path) -> tuple[bool, int | None]:
    """``(running, pid)``: whether a watch holds ``database``'s marker, and the pid it wrote
    (None when unreadable). Never waits."""
    import fcntl

    path = marker_path(database)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False, None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                return False, None
            first = os.read(fd, 32).split(b"\n", 1)[0].strip()
            return True, int(first) if first.isdigit() else None
        fcntl.flock(fd, fcntl.LOCK_UN)  # nobody holds it: a stale marker
        return False, None
    finally:
        os.close(fd)
