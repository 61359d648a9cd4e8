"""Reading files safely: regular files only, never more bytes than the limit.

Every read of a document's bytes (the sync's hash, the text and HTML loaders, the PDF and
DOCX workers) goes through :func:`open_regular` and :func:`read_bounded`:

- the file is opened with ``O_NONBLOCK``, so opening a FIFO never waits for a writer, and
  ``fstat`` on the open descriptor refuses anything but a regular file (FIFO, socket, device)
  before a byte is read;
- the size limit counts bytes actually read, whatever ``stat`` said (a file that grows while
  it is read, or a device behind a link, stops at the limit);
- an optional deadline (``time.monotonic()`` value) is checked between blocks.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import LoaderError

BLOCK_SIZE = 1 << 20
MB = 1 << 20


def file_kind(mode: int) -> str:
    """A short name for the type of file ``mode`` describes ("FIFO", "socket" ...)."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def not_regular(path: str | Path, mode: int) -> LoaderError:
    """The error for a path that is not a regular file."""
    return LoaderError(f"{path}: not a regular file ({file_kind(mode)}): not read")


def too_large(path: str | Path, limit: int) -> LoaderError:
    """The error for a file over ``limit`` bytes."""
    return LoaderError(
        f"{path}: the file is over the {limit / MB:g} MB limit: raise limits.max_file_mb to load it"
    )


def open_regular(
    path: str | Path, *, follow_symlinks: bool = True
) -> tuple[BinaryIO, os.stat_result]:
    """Open ``path`` for reading if it is a regular file; returns the file and its ``fstat``.

    Raises LoaderError for a FIFO, socket, device or folder (and, with
    ``follow_symlinks=False``, for a symbolic link) and OSError for other failures.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise LoaderError(
                f"{path}: is a symbolic link: not followed (kb ingest --follow-symlinks)"
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(path, st.st_mode)
    except BaseException:
        os.close(fd)
        raise
    # Outside the try: from the moment the file object exists it owns the descriptor, so an
    # interrupt (Ctrl-C, SIGTERM) landing here leaks it at worst, never closes it twice (a
    # second close raised EBADF in place of the interrupt, or closed a descriptor another
    # thread had just been given). ``open`` is a C call: no Python frame for it to land in.
    return open(fd, "rb", buffering=0), st


def read_blocks(
    fh: BinaryIO,
    path: str | Path,
    limit: int | None,
    *,
    deadline: float | None = None,
    timeout: float | None = None,
    block_size: int = BLOCK_SIZE,
) -> Iterator[bytes]:
    """Yield ``fh``'s bytes in blocks; LoaderError past ``limit`` bytes or the ``deadline``."""
    total = 0
    while True:
        want = block_size if limit is None else min(block_size, limit - total + 1)
        block = fh.read(want)
        if not block:
            return
        total += len(block)
        if limit is not None and total > limit:
            raise too_large(path, limit)
        if deadline is not None and time.monotonic() > deadline:
            raise timed_out(path, timeout)
        yield block


def timed_out(path: str | Path, timeout: float | None) -> LoaderError:
    """The error for a file that took longer than ``timeout`` seconds."""
    took = f"longer than {timeout:g} s" if timeout is not None else "too long"
    return LoaderError(
        f"{path}: reading took {took} and was stopped: raise limits.file_timeout if the file "
        "is just large"
    )


def read_bounded(
    path: str | Path,
    limit: int | None,
    *,
    follow_symlinks: bool = True,
    timeout: float | None = None,
) -> bytes:
    """The bytes of the regular file ``path``: at most ``limit``, within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout if timeout is not None else None
    fh, _ = open_regular(path, follow_symlinks=follow_symlinks)
    with fh:
        return b"".join(read_blocks(fh, path, limit, deadline=deadline, timeout=timeout))


def limit_bytes(max_file_mb: float | None) -> int | None:
    """``limits.max_file_mb`` as a byte count (None: no limit)."""
    return None if max_file_mb is None else int(max_file_mb * MB)
