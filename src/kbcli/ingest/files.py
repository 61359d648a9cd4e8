"""Reading files safely: regular files only, never more bytes than the limit.

Every read of a document's bytes (the sync's hash, the text and HTML loaders, the PDF and
DOCX workers) goes through :func:`open_regular` and :func:`read_bounded`:

- the file is opened with ``O_NONBLOCK``, so opening a FIFO never waits for a writer, and
  ``fstat`` on the open descriptor refuses anything but a regular file (FIFO, socket, device)
  before a byte is read;
- the size limit counts bytes actually read, whatever ``stat`` said (a file that grows while
  it is read, or a device behind a link, stops at the limit);
- an optional deadline (``time.monotonic()`` value) is checked between blocks.

A sync reads a changed file once (:func:`read_content`: hashed while read, the bytes handed to
the text loader). That one read holds one version of the file when its ``fstat`` is the same
before and after it and the file last changed :data:`SETTLED_NS` before it began (git's "racy"
rule: a write during the read would leave a later change time, even on a file system whose
clock counts in ticks or, as FAT, in 2 s steps); otherwise the caller hashes the file again.
A parser in the worker process is handed the expected SHA-256 and hashes what it reads
itself (:class:`FileChanged` when it differs), so its read and the sync's must agree.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from kbcli.errors import LoaderError

BLOCK_SIZE = 1 << 20
MB = 1 << 20
# A file whose last change (mtime or ctime) is older than this when its read begins, and whose
# fstat did not move during the read, was not written while it was read (module docstring).
SETTLED_NS = 3_000_000_000


class FileChanged(LoaderError):
    """The bytes read do not have the SHA-256 the caller expected: the file changed since."""


@dataclass
class FileContent:
    """One read of a regular file: the SHA-256 of its bytes, its ``fstat`` when opened, the
    bytes themselves (None when not kept) and whether the read is known to hold one version
    of the file (``settled``, see the module docstring)."""

    sha256: str
    stat: os.stat_result
    data: bytes | bytearray | None
    settled: bool


def read_content(
    path: str | Path, limit: int | None, *, follow_symlinks: bool = True, keep: bool = True
) -> FileContent:
    """Read ``path`` once (a regular file, at most ``limit`` bytes), hashing while reading;
    ``keep`` keeps the bytes."""
    started = time.time_ns()
    digest = hashlib.sha256()
    data = bytearray()
    fh, st = open_regular(path, follow_symlinks=follow_symlinks)
    with fh:
        for block in read_blocks(fh, path, limit):
            digest.update(block)
            if keep:
                data += block
        after = os.fstat(fh.fileno())
    changed = max(after.st_mtime_ns, after.st_ctime_ns)
    settled = _version(st) == _version(after) and changed < started - SETTLED_NS
    return FileContent(digest.hexdigest(), st, data if keep else None, settled)


def _version(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


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
    took = f" ({timeout:g} s)" if timeout is not None else ""
    return LoaderError(
        f"{path}: reading took longer than limits.file_timeout{took} and was stopped: raise "
        "limits.file_timeout if the file is just large"
    )


def read_bounded(
    path: str | Path,
    limit: int | None,
    *,
    follow_symlinks: bool = True,
    timeout: float | None = None,
    sha256: str | None = None,
) -> bytes:
    """The bytes of the regular file ``path``: at most ``limit``, within ``timeout`` seconds.
    With ``sha256``, :class:`FileChanged` unless the bytes read have that SHA-256."""
    deadline = time.monotonic() + timeout if timeout is not None else None
    fh, _ = open_regular(path, follow_symlinks=follow_symlinks)
    with fh:
        data = b"".join(read_blocks(fh, path, limit, deadline=deadline, timeout=timeout))
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise FileChanged(f"{path}: the file changed while it was being read")
    return data


def limit_bytes(max_file_mb: float | None) -> int | None:
    """``limits.max_file_mb`` as a byte count (None: no limit)."""
    return None if max_file_mb is None else int(max_file_mb * MB)
