"""``kb watch``: an index kept in line with its folders as they change.

The folders are indexed once (:func:`kbcli.ingest.sync.sync`, as ``kb ingest``), then followed: the
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

A watched folder is the folder its path led to at the start: its identity is the ``(st_dev,
st_ino)`` of that folder and its resolved path, checked before each batch and every
:data:`IDENTITY_SECONDS` (events stop coming from a folder renamed away, so waiting for one is
not enough). A path that now names another folder at the same place (renamed away and made
again, a share mounted or unmounted) is indexed again and followed. A path that now leads
elsewhere (the folder renamed away and a symbolic link put in its place) stops the watch with
one line (exit 2, the index as it was), unless ``follow_symlinks``: then the folder it leads
to is indexed and followed, and the files indexed from the old one leave the index (those
missing from the new one under the mass-delete guard of ``kb ingest``).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kbcli.errors import InvalidOptionError, KBError, UnsafePruneError
from kbcli.ingest.discovery import (
    DEFAULT_EXTENSIONS,
    IGNORE_FILE,
    IGNORED_DIRS,
    MASS_DELETE_MIN_INDEXED,
    discover,
    hidden,
    parse_extensions,
)
from kbcli.ingest.files import file_kind
from kbcli.ingest.report import SyncReport
from kbcli.ingest.sync import Progress, sync
from kbcli.ingest.watch_marker import watching
from kbcli.ingest.writes import Indexable, ledger_store
from kbcli.system.paths import source_name, source_path

QUIET_MS = 500  # a batch is applied once its events have been quiet this long ...
GATHER_MAX_MS = 1500  # ... or this long after its first event, whichever comes first
SCAN_SECONDS = 2.0  # between scans where events are unavailable
RETRY_SECONDS = 5.0  # before a batch that could not be applied (lock busy, ...) is tried again
IDENTITY_SECONDS = 2.0  # between checks that each watched path still leads to its folder
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
    followed: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The ``kb watch --json`` line of the batch."""
        data = {"event": "batch", "batch": self.number, "paths": self.paths, "mode": self.mode}
        data.update(self.report.to_dict())
        if self.refused:
            data["refused"] = self.refused
        if self.followed:
            data["followed"] = self.followed
        return data


@dataclass(frozen=True)
class _Folder:
    """A watched folder: the path as given, where it led (resolved) and that folder's
    ``(st_dev, st_ino)``."""

    given: Path
    real: Path
    identity: tuple[int, int]


def _folders(paths: list[Path]) -> list[_Folder]:
    """The folders among ``paths`` as they are now."""
    out = []
    for given in paths:
        try:
            st = os.stat(given)
        except OSError:
            continue  # (discover has said so)
        if stat.S_ISDIR(st.st_mode):
            out.append(_Folder(given, Path(os.path.realpath(given)), (st.st_dev, st.st_ino)))
    return out


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
                hidden(p) and p != IGNORE_FILE or p in IGNORED_DIRS for p in parts
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
        self._due = time.monotonic() + every

    def next(self, stop: threading.Event, timeout: float | None) -> set[Path] | None:
        wait = max(0.0, self._due - time.monotonic())
        if stop.wait(wait if timeout is None else min(timeout, wait)):
            return None
        if time.monotonic() < self._due:
            return set()  # the caller's timeout came first: no scan yet
        self._due = time.monotonic() + self.every
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
    ``database`` (its path: ``-wal``, the lock file...) are not changes to index; until
    :meth:`close` the watch holds its marker (:mod:`kbcli.ingest.watch_marker`, ``kb status``).
    """

    def __init__(
        self,
        kb: Indexable,
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
        self._folders = _folders(self.paths)
        # Folders a watched path led to before it led elsewhere: their files leave the index
        # with the next batch (old folder -> the path, the folder it leads to now).
        self._leaving: dict[Path, tuple[Path, Path]] = {}
        self._followed: list[dict[str, str]] = []
        if settings.follow_symlinks:
            # A path that leads elsewhere through a link now may have been a real folder when
            # it was indexed: those files go with the first index, as when the watch saw the
            # change itself (the stop message of a watch without the option says so).
            for folder in self._folders:
                own = Path(os.path.abspath(folder.given))
                if own != folder.real:
                    self._leaving[own] = (folder.given, folder.real)
        self._scan_every = scan_every
        self._source: _Events | _Scans = self._open(scan_every)
        self._marker = ExitStack()  # kb status sees the watch while it runs (close ends it)
        if database is not None:
            self._marker.enter_context(watching(database))

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

    def index(self, progress: Progress | None = None) -> SyncReport:
        """The first, full sync of the paths (``kb ingest`` with the same settings;
        ``progress`` as :func:`~kbcli.ingest.sync.sync` takes it)."""
        removed, chunks, kept = self._leave()
        report = self._sync(None, progress=progress)
        report.removed += removed
        report.chunks_removed += chunks
        if kept:
            report.warnings.append(f"{kept}; the files were kept")
        return report

    def follow(self, stop: threading.Event, on_batch: Callable[[Batch], None]) -> None:
        """Apply batches until ``stop`` is set (a batch in flight is finished first)."""
        pending: set[Path] = set()
        failure = None
        retry_at = 0.0
        while not stop.is_set():
            try:
                changes = self._source.next(stop, IDENTITY_SECONDS)
            except (OSError, RuntimeError) as exc:  # the notifier failed while running
                self._source.close()
                self.note(f"Note: {_events_failure(exc)}; scanning every {SCAN_SECONDS:g} s now.")
                self._source = _Scans(self._listing, SCAN_SECONDS)
                pending.update([*self._roots.folders, *self._roots.files])  # catch up
                continue
            if changes is None:
                break
            moved = self._moved_folders()  # raises when one cannot be followed
            if moved:
                pending = {p for p in pending if not any(_under(p, old) for old, _ in moved)}
                pending.update(new for _, new in moved)  # each followed folder synced whole
                changes = set()  # events named the folders as they were
                retry_at = 0.0
            pending |= self._relevant(changes)
            if not pending or (not changes and not moved and time.monotonic() < retry_at):
                continue
            try:
                batch = self._apply(pending)
            except InvalidOptionError:
                raise  # a watched path is gone: nothing more to follow
            except KBError as exc:
                if str(exc) != failure:
                    failure = str(exc)
                    self.note(f"Note: {exc}; trying again in {RETRY_SECONDS:g} s.")
                retry_at = time.monotonic() + RETRY_SECONDS
                continue
            failure = None
            pending = set()
            on_batch(batch)
        self.unapplied = len(pending)

    def _moved_folders(self) -> list[tuple[Path, Path]]:
        """Check that each watched path still leads to its folder; follow those that lead to
        another one (see the module docstring) and return the folders they led to, before and
        now. Raises :class:`InvalidOptionError` (the watch stops, the index as it was) for a
        path gone, no longer a folder, or leading elsewhere without ``follow_symlinks``."""
        moved: list[tuple[_Folder, _Folder]] = []
        for folder in self._folders:
            now = self._folder_now(folder)
            if now.real != folder.real or now.identity != folder.identity:
                moved.append((folder, now))
        if not moved:
            return []
        for old, now in moved:
            name = source_name(old.given)
            if now.real == old.real:
                self.note(f"Note: {name} is another folder now: indexing it again.")
            else:
                self.note(f"Note: {name} now leads to {now.real}: indexing and following it.")
                self._leaving[old.real] = (old.given, now.real)
            self._followed.append({"path": name, "from": str(old.real), "to": str(now.real)})
        found = discover(
            self.paths, self.settings.extensions, recursive=self.settings.recursive,
            only=frozenset(),
        )  # fmt: skip
        self._roots.folders = [root for root, _ in found.dir_roots]
        self._roots.files = list(found.file_roots)
        self._folders = _folders(self.paths)
        self._source.close()  # the old folders' events are no more
        if isinstance(self._source, _Scans):
            self._source = _Scans(self._listing, self._source.every)
        else:
            self._source = self._open(self._scan_every)
        return [(old.real, now.real) for old, now in moved]

    def _folder_now(self, folder: _Folder) -> _Folder:
        """What ``folder``'s path leads to now; raises when the watch cannot go on with it."""
        name = source_name(folder.given)
        try:
            st = os.stat(folder.given)
        except (FileNotFoundError, NotADirectoryError):
            raise InvalidOptionError(
                f"Path not found: {name} (check the path and try again)"
            ) from None
        except OSError as exc:
            raise InvalidOptionError(
                f"Cannot access {name} ({exc.strerror or exc}): check its permissions"
            ) from None
        now = _Folder(folder.given, Path(os.path.realpath(folder.given)), (st.st_dev, st.st_ino))
        if now.real == folder.real and now.identity == folder.identity:
            return now
        stopped = f"kb watch stopped; the index keeps the files indexed from {folder.real}"
        if not stat.S_ISDIR(st.st_mode):
            kind = "a file" if stat.S_ISREG(st.st_mode) else file_kind(st.st_mode)
            raise InvalidOptionError(f"The watched folder {name} is {kind} now: {stopped}")
        if now.real == folder.real:
            return now  # another folder at the same place: indexed again
        if not self.settings.follow_symlinks:
            raise InvalidOptionError(
                f"The watched folder {name} now leads to {now.real}, not {folder.real} (a "
                f"symbolic link, or the folder moved): {stopped}; run kb watch {name} "
                "--follow-symlinks to index and follow where it leads (those files then leave "
                "the index)"
            )
        holder = Path(os.path.realpath(Path(os.path.abspath(folder.given)).parent))
        if holder == now.real or holder.is_relative_to(now.real):
            raise InvalidOptionError(
                f"The watched folder {name} now leads to {now.real}, which holds the folder "
                f"of {name} itself (the whole tree above it): not followed; {stopped}"
            )
        return now

    def close(self) -> None:
        """Stop following events (the knowledge base stays open: its caller closes it)."""
        self._source.close()
        self._marker.close()

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
            indexed = {Path(source_path(r)) for r in ledger_store(self.kb).file_records()}
            indexed |= {parent for p in indexed for parent in p.parents}
            keep.update(p for p in gone if p in indexed)
        return keep

    def _apply(self, paths: set[Path]) -> Batch:
        started = time.monotonic()
        refused = None
        # The files of a folder left behind go first: should this batch stop half-way, the
        # next one indexes the new folder whole, and nothing is left under the old path.
        removed, chunks, kept = self._leave()
        try:
            report = self._sync(paths)
        except UnsafePruneError as exc:
            refused = str(exc)
            report = self._sync(paths, keep_removed=True)
        report.removed += removed
        report.chunks_removed += chunks
        refused = kept or refused
        self.batches += 1
        report.seconds = time.monotonic() - started
        followed, self._followed = self._followed, []
        return Batch(self.batches, len(paths), report, refused, self.mode, followed)

    def _leave(self) -> tuple[int, int, str | None]:
        """Remove from the index the files recorded under the folders watched paths led to
        before (:attr:`_leaving`): those found again (same place below the folder) in the
        folder the path leads to now at once, the others under the mass-delete guard. Returns
        the files and chunks removed and the guard's refusal (those files kept), if any."""
        if not self._leaving:
            return 0, 0, None
        s = self.settings
        store = ledger_store(self.kb)
        recorded = [Path(source_path(p)) for p in store.file_records()]
        for old in [old for old in self._leaving if not any(_under(p, old) for p in recorded)]:
            del self._leaving[old]  # nothing indexed there: nothing to walk for
        there: dict[Path, set[Path]] = {}
        for new in {new for _given, new in self._leaving.values()}:
            walk = discover(
                [new], s.extensions, recursive=s.recursive, include_hidden=s.include_hidden,
                follow_symlinks=s.follow_symlinks,
            )  # fmt: skip
            there[new] = {f.relative_to(new) for f in walk.files if f.is_relative_to(new)}
        removed = chunks = 0
        refusals = []
        # One transaction: a kill leaves all of them or none, and a later run indexes the
        # new folder whole either way.
        with store.writer_lock(s.wait), store.transaction():
            records = store.file_records()
            for old, (given, new) in list(self._leaving.items()):
                found = there[new]
                under = [p for p in records if _under(Path(source_path(p)), old)]
                missing = {p for p in under if Path(source_path(p)).relative_to(old) not in found}
                many = len(under) >= MASS_DELETE_MIN_INDEXED and len(missing) * 2 > len(under)
                guard = bool(missing) and not s.allow_mass_delete and (not found or many)
                for source in under:
                    if guard and source in missing:
                        continue
                    chunks += store.delete_source(source)
                    removed += 1
                if guard:
                    refusals.append(
                        f"Removing indexed files refused: {source_name(given)} now leads to "
                        f"{new}, which lacks {len(missing)} of the {len(under)} files indexed "
                        f"from {old} (empty, or not mounted? watch with --allow-mass-delete "
                        "to let them go)"
                    )
        self._leaving.clear()
        return removed, chunks, " / ".join(refusals) or None

    def _sync(
        self, only: set[Path] | None, keep_removed: bool = False, progress: Progress | None = None
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


def _under(path: Path, folder: Path) -> bool:
    return path == folder or path.is_relative_to(folder)


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
