"""``kb watch``: an index kept in line with its folders as they change.

The folders are indexed once (:func:`kbcli.sync.sync`, as ``kb ingest``), then followed: the
file-system events (``watchfiles``: inotify, FSEvents, ReadDirectoryChangesW) are gathered
until they have been quiet for :data:`QUIET_MS` (at most :data:`GATHER_MAX_MS` after the first),
and the paths they name are applied as one batch: ``sync(..., only=paths)``, the per-file atomic
path and the ``.kbignore`` / ``--ext`` / hidden / symlink rules of ``kb ingest``, a path gone
from disk (a file deleted or renamed away, a folder removed or moved out) leaving the index.
An editor's save-via-rename or a two-step write is one batch, so it is indexed once, whole.

The writer lock is taken per batch (``sync`` takes it) and never while idle, so a cron
``kb ingest`` of the same folder waits at most one batch; a batch that finds the lock taken
longer than ``wait`` is tried again :data:`RETRY_SECONDS` later, nothing lost.

Where events are unavailable (``watchfiles``, a dependency, cannot be imported on this
platform, the inotify watch limit reached,
``--scan-every`` for network shares, where events do not arrive) the folders are scanned
instead: each scan lists the files to index with their size and mtime, and a path that changed
is applied once a later scan sees it unchanged (so a file still being written waits).

With ``follow_symlinks`` each batch syncs the whole folders: through links one file can be
indexed under several paths, and an event names only one of them.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .discovery import DEFAULT_EXTENSIONS, IGNORE_FILE, IGNORED_DIRS, discover, parse_extensions
from .errors import InvalidOptionError, KBError, UnsafePruneError
from .pathnames import source_path
from .sync import sync
from .sync_report import SyncReport

QUIET_MS = 500  # a batch is applied once its events have been quiet this long ...
GATHER_MAX_MS = 1500  # ... or this long after its first event, whichever comes first
SCAN_SECONDS = 2.0  # between scans where events are unavailable
RETRY_SECONDS = 5.0  # before a batch that could not be applied (lock busy, ...) is tried again
WATCH_LIMIT_FIX = (
    "raise it with: sudo sysctl fs.inotify.max_user_watches=524288 (and in /etc/sysctl.conf "
    "to keep it)"
)

Note = Callable[[str], None]


@dataclass(frozen=True)
class WatchSettings:
    """The ``kb ingest`` options a watch applies to every batch."""

    extensions: tuple[str, ...] = DEFAULT_EXTENSIONS
    recursive: bool = True
    metadata: dict[str, Any] | None = None
    prune: bool | None = None
    include_hidden: bool = False
    follow_symlinks: bool = False
    allow_mass_delete: bool = False
    wait: float = 60.0


@dataclass
class Batch:
    """One applied batch: its number (1, 2, ...), how many paths it named, what the sync did,
    and a refused removal (kept, see :class:`~kbcli.errors.UnsafePruneError`), if any."""

    number: int
    paths: int
    report: SyncReport
    refused: str | None = None
    mode: str = "events"

    def to_dict(self) -> dict[str, Any]:
        """The ``kb watch --json`` line of the batch."""
        data = {"event": "batch", "batch": self.number, "paths": self.paths, "mode": self.mode}
        data.update(self.report.to_dict())
        if self.refused:
            data["refused"] = self.refused
        return data


@dataclass
class _Roots:
    """The watched paths, resolved: folders, files named on their own, the database's files."""

    folders: list[Path]
    files: list[Path]
    own: str  # the database's path: its files (-wal, -shm, lock, pack) are never events
    settings: WatchSettings
    watched: list[Path] = field(default_factory=list)

    def relevant(self, path: Path) -> Path | None:
        """The path a batch should look at for an event on ``path``, or None: outside the
        roots, the database's own files, hidden or skipped folders, and a ``.kbignore``
        (its folder instead: the rules changed)."""
        if str(path).startswith(self.own):
            return None
        if path in self.files:
            return path
        s = self.settings
        for root in self.folders:
            if path == root:
                return path
            if not path.is_relative_to(root):
                continue
            parts = path.relative_to(root).parts
            if not s.recursive and len(parts) > 1:
                return None
            if not s.include_hidden and any(
                p.startswith(".") and p != IGNORE_FILE or p in IGNORED_DIRS for p in parts
            ):
                return None
            if parts[-1] == IGNORE_FILE:
                return path.parent
            return path
        return None


class _Events:
    """File-system events through watchfiles' Rust notifier, gathered into batches."""

    mode = "events"

    def __init__(self, paths: list[Path], recursive: bool):
        from watchfiles._rust_notify import RustNotify  # the documented low-level API

        self._notify = RustNotify([str(p) for p in paths], False, False, 0, recursive, True)

    def next(self, stop: threading.Event, timeout: float | None) -> set[Path] | None:
        """The paths of the next batch (empty after ``timeout`` seconds), None once stopped."""
        ms = 0 if timeout is None else max(1, int(timeout * 1000))
        changes = self._notify.watch(GATHER_MAX_MS, QUIET_MS, ms, stop)
        if changes == "stop" or changes == "signal" or stop.is_set():
            return None
        if changes == "timeout":
            return set()
        return {Path(path) for _, path in changes}

    def close(self) -> None:
        self._notify.close()


class _Scans:
    """Periodic scans: a changed path is handed on once a later scan sees it unchanged."""

    mode = "scans"

    def __init__(self, list_files: Callable[[], dict[Path, tuple[int, int, int]]], every: float):
        self._list, self.every = list_files, every
        self._seen = list_files()
        self._moving: set[Path] = set()

    def next(self, stop: threading.Event, timeout: float | None) -> set[Path] | None:
        if stop.wait(self.every if timeout is None else min(timeout, self.every)):
            return None
        now = self._list()
        seen = self._seen
        changed = {p for p in now.keys() | seen.keys() if now.get(p) != seen.get(p)}
        ready = self._moving - changed
        self._moving = (self._moving | changed) - ready
        self._seen = now
        return ready

    def close(self) -> None:
        pass


class Watch:
    """A knowledge base kept in line with ``paths`` (see the module docstring).

    ``scan_every`` scans every that many seconds instead of following events. Notes (the
    fallback to scanning, a batch tried again) go to ``note``. Events on the files of
    ``database`` (its path: ``-wal``, the lock file...) are not changes to index.
    """

    def __init__(
        self,
        kb: Any,
        paths: Iterable[Path],
        settings: WatchSettings | None = None,
        *,
        scan_every: float | None = None,
        note: Note = lambda text: None,
        database: Path | None = None,
    ):
        self.kb, self.note = kb, note
        given = settings or WatchSettings()
        self.settings = settings = replace(given, extensions=parse_extensions(given.extensions))
        self.paths = [Path(p).expanduser() for p in paths]
        found = discover(
            self.paths, settings.extensions, recursive=settings.recursive, only=frozenset()
        )  # checks the paths; walks nothing
        self._roots = _Roots(
            folders=[root for root, _ in found.dir_roots],
            files=list(found.file_roots),
            own=str(Path(database).expanduser().resolve()) if database is not None else "\0",
            settings=settings,
        )
        self.batches = 0
        self.unapplied = 0  # changed paths not applied when follow() returned
        self._source: _Events | _Scans = self._open(scan_every)

    @property
    def mode(self) -> str:
        """``"events"`` or ``"scans"``."""
        return self._source.mode

    @property
    def how(self) -> str:
        """How changes are followed, in words: ``file-system events``, ``a scan every 2 s``."""
        if isinstance(self._source, _Scans):
            return f"a scan every {self._source.every:g} s"
        return "file-system events"

    def _open(self, scan_every: float | None) -> _Events | _Scans:
        if scan_every is not None:
            return _Scans(self._listing, scan_every)
        roots = self._roots
        # A file named on its own is followed through its folder: an editor's save replaces
        # the file, and a watch on the replaced one would see nothing more.
        watched = list(dict.fromkeys([*roots.folders, *(f.parent for f in roots.files)]))
        try:
            return _Events(watched, self.settings.recursive)
        except ImportError:
            reason = (
                "watchfiles, which kbcli installs for file-system events, cannot be imported "
                "here (no wheel for this platform, or a broken install: pip install watchfiles)"
            )
        except OSError as exc:
            reason = _events_failure(exc)
        self.note(f"Note: {reason}; scanning every {SCAN_SECONDS:g} s instead.")
        return _Scans(self._listing, SCAN_SECONDS)

    def _listing(self) -> dict[Path, tuple[int, int, int]]:
        s = self.settings
        found = discover(
            self.paths,
            s.extensions,
            recursive=s.recursive,
            include_hidden=s.include_hidden,
            follow_symlinks=s.follow_symlinks,
        )
        listing = {}
        for path in found.files:
            try:
                st = os.stat(path)
            except OSError:
                continue
            listing[path] = (st.st_size, st.st_mtime_ns, st.st_ino)
        return listing

    def index(self, progress: Any = None) -> SyncReport:
        """The first, full sync of the paths (``kb ingest`` with the same settings;
        ``progress`` as :func:`~kbcli.sync.sync` takes it)."""
        return self._sync(None, progress=progress)

    def follow(self, stop: threading.Event, on_batch: Callable[[Batch], None]) -> None:
        """Apply batches until ``stop`` is set (a batch in flight is finished first)."""
        pending: set[Path] = set()
        failure = None
        while not stop.is_set():
            try:
                changes = self._source.next(stop, RETRY_SECONDS if pending else None)
            except (OSError, RuntimeError) as exc:  # the notifier failed while running
                self._source.close()
                self.note(f"Note: {_events_failure(exc)}; scanning every {SCAN_SECONDS:g} s now.")
                self._source = _Scans(self._listing, SCAN_SECONDS)
                pending.update([*self._roots.folders, *self._roots.files])  # catch up
                continue
            if changes is None:
                break
            pending |= self._relevant(changes)
            if not pending:
                continue
            try:
                batch = self._apply(pending)
            except InvalidOptionError:
                raise  # a watched path is gone: nothing more to follow
            except KBError as exc:
                if str(exc) != failure:
                    failure = str(exc)
                    self.note(f"Note: {exc}; trying again in {RETRY_SECONDS:g} s.")
                continue
            failure = None
            pending = set()
            on_batch(batch)
        self.unapplied = len(pending)

    def close(self) -> None:
        """Stop following events (the knowledge base stays open: its caller closes it)."""
        self._source.close()

    def _relevant(self, changes: set[Path]) -> set[Path]:
        picked = {p for p in map(self._roots.relevant, changes) if p is not None}
        exts = self.settings.extensions
        keep: set[Path] = set()
        gone: list[Path] = []
        for path in picked:
            if path.suffix.lower() in exts or path in self._roots.files:
                keep.add(path)
                continue
            try:
                mode = os.stat(path, follow_symlinks=False).st_mode
            except OSError:
                gone.append(path)
                continue
            if stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
                keep.add(path)  # (another regular file is never indexed)
        if gone:  # another file, or a folder: only worth a batch when something is indexed there
            indexed = {Path(source_path(r)) for r in self.kb.store.file_records()}
            indexed |= {parent for p in indexed for parent in p.parents}
            keep.update(p for p in gone if p in indexed)
        return keep

    def _apply(self, paths: set[Path]) -> Batch:
        started = time.monotonic()
        refused = None
        try:
            report = self._sync(paths)
        except UnsafePruneError as exc:
            refused = str(exc)
            report = self._sync(paths, keep_removed=True)
        self.batches += 1
        report.seconds = time.monotonic() - started
        return Batch(self.batches, len(paths), report, refused, self.mode)

    def _sync(
        self, only: set[Path] | None, keep_removed: bool = False, progress: Any = None
    ) -> SyncReport:
        s = self.settings
        return sync(
            self.kb,
            self.paths,
            extensions=s.extensions,
            recursive=s.recursive,
            metadata=s.metadata,
            prune=False if keep_removed else s.prune,
            include_hidden=s.include_hidden,
            follow_symlinks=s.follow_symlinks,
            allow_mass_delete=s.allow_mass_delete,
            wait=s.wait,
            only=None if s.follow_symlinks else only,
            progress=progress,
        )


def _events_failure(exc: BaseException) -> str:
    """Why file-system events are unavailable, in one clause (the watch-limit fix named)."""
    import errno

    text = str(exc)
    if getattr(exc, "errno", None) == errno.ENOSPC or "watch limit" in text:
        return f"the inotify watch limit is reached ({WATCH_LIMIT_FIX})"
    return f"file-system events are unavailable ({text or type(exc).__name__})"


def batch_line(batch: Batch) -> str:
    """``Applied: 3 updated, 1 removed (0.2 s)``: the stderr line of one batch."""
    r = batch.report
    parts = [
        f"{n} {what}"
        for n, what in (
            (r.added, "added"),
            (r.updated, "updated"),
            (r.metadata_updated, "relabelled"),
            (r.removed, "removed"),
            (len(r.failed), "failed"),
        )
        if n
    ]
    return f"Applied: {', '.join(parts) or 'nothing changed'} ({r.seconds:.1f} s)"


__all__ = ["Batch", "Watch", "WatchSettings", "batch_line"]
