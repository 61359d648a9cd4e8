"""Which files a sync looks at: the walk under the given roots, ``.kbignore`` rules, hidden
files, symbolic links, special files and folders that cannot be listed (:func:`discover`), and
which indexed files it may remove (:func:`check_prune`, the mass-delete guard)."""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbcli.errors import InvalidOptionError, LoaderError, UnsafePruneError
from kbcli.ingest.files import file_kind, open_regular, read_blocks
from kbcli.system.paths import source_name, source_path

# --prune refuses (without --allow-mass-delete) to remove more than half of the files indexed
# under the given folders once at least this many are indexed there; below it, deleting most
# of a handful of notes is ordinary. A folder with nothing to index is always refused.
MASS_DELETE_MIN_INDEXED = 10

DEFAULT_EXTENSIONS = (".md", ".txt", ".pdf", ".docx")
IGNORED_DIRS = frozenset({".git", "node_modules", "__pycache__", ".hg", ".svn"})
IGNORE_FILE = ".kbignore"
IGNORE_FILE_LIMIT = 1 << 20  # bytes of a .kbignore file read at most


def hidden(name: str) -> bool:
    """Whether a file or folder ``name`` is hidden: one dot, then something else (``.git``,
    ``.draft.md``). ``..md`` is a page named ``.``, not hidden (nor ``.`` or ``..``)."""
    return name.startswith(".") and not name.startswith("..")


def parse_extensions(spec: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``".md,PDF, txt"`` -> ``(".md", ".pdf", ".txt")``; an empty list is an error."""
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for part in parts:
        ext = part.strip().lower()
        if not ext:
            continue
        if not ext.startswith("."):
            ext = "." + ext
        if ext not in out:
            out.append(ext)
    if not out:
        raise InvalidOptionError(f"No file extensions in {spec!r}: use e.g. --ext .md,.pdf")
    return tuple(out)


# --- finding files ------------------------------------------------------------------------


@dataclass
class Discovery:
    """Files to index, the roots they were found under, and how many were passed over.

    ``skipped`` counts files not picked (another extension, a ``.kbignore`` rule, hidden);
    ``folders`` the folders not entered (hidden, or :data:`IGNORED_DIRS`, without
    ``include_hidden``); ``special`` counts FIFOs, sockets and devices (never opened);
    ``links`` counts symbolic links not followed (``follow_symlinks`` off, broken, or leading
    outside their root);
    ``unreadable`` lists folders (and entries) that could not be read: files recorded below
    them are never counted as vanished. ``found_per_root`` counts the files to index found
    under each folder root. ``only`` (see :func:`discover`) narrows where it looked.
    """

    files: list[Path]
    dir_roots: list[tuple[Path, bool]]  # (folder, recursive)
    file_roots: list[Path]
    skipped: int = 0
    warnings: list[str] = field(default_factory=list)
    folders: int = 0
    special: int = 0
    links: int = 0
    unreadable: list[Path] = field(default_factory=list)
    found_per_root: dict[Path, int] = field(default_factory=dict)
    only: frozenset[Path] | None = None

    def covers(self, path: str) -> bool:
        """True when the recorded source ``path`` lies where this discovery looked (so it can
        be stale)."""
        p = Path(source_path(path))
        if self.only is not None and not within(p, self.only):
            return False
        return self.in_roots(p)

    def in_roots(self, p: Path) -> bool:
        """True when ``p`` lies under the roots, wherever ``only`` narrowed the walk."""
        if any(p == u or p.is_relative_to(u) for u in self.unreadable):
            return False
        if p in self.file_roots:
            return True
        return any(self._under(p, root, recursive) for root, recursive in self.dir_roots)

    def covered_by(self, path: str, root: Path) -> bool:
        """True when the recorded source ``path`` lies under the folder root ``root``."""
        p = Path(source_path(path))
        return any(r == root and self._under(p, r, recursive) for r, recursive in self.dir_roots)

    @staticmethod
    def _under(p: Path, root: Path, recursive: bool) -> bool:
        if recursive:
            return p != root and p.is_relative_to(root)
        return p.parent == root


class _IgnoreRules:
    """``.kbignore`` files (gitignore syntax), each applying below its own folder."""

    def __init__(self) -> None:
        self.specs: list[tuple[Path, Any]] = []

    def load(self, folder: Path) -> None:
        file = folder / IGNORE_FILE
        try:
            if not stat.S_ISREG(os.stat(file).st_mode):
                return
            fh, _ = open_regular(file)
            with fh:
                data = b"".join(read_blocks(fh, file, IGNORE_FILE_LIMIT))
        except (OSError, LoaderError):
            return
        import pathspec

        lines = data.decode("utf-8", errors="replace").splitlines()
        self.specs.append((folder, pathspec.GitIgnoreSpec.from_lines(lines)))

    def ignored(self, path: Path, is_dir: bool) -> bool:
        for folder, spec in self.specs:
            if path.is_relative_to(folder):
                rel = path.relative_to(folder).as_posix() + ("/" if is_dir else "")
                if spec.match_file(rel):
                    return True
        return False


def within(path: Path, places: frozenset[Path]) -> bool:
    """True when ``path`` is one of ``places`` or lies below one of them."""
    return path in places or any(parent in places for parent in path.parents)


def _exists(path: Path) -> bool:
    """True when ``path`` exists; a path that cannot be checked is a one-line error."""
    try:
        os.stat(path)
        return True
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise InvalidOptionError(
            f"Cannot access {source_name(path)} ({exc.strerror or exc}): check its permissions"
        ) from None


def discover(
    paths: list[Path],
    extensions: tuple[str, ...],
    *,
    recursive: bool = True,
    include_hidden: bool = False,
    follow_symlinks: bool = False,
    only: Collection[Path] | None = None,
) -> Discovery:
    """Walk ``paths`` and return the regular files to index (sorted, no duplicates).

    Skips ``.git``, ``node_modules`` and hidden folders (unless ``include_hidden``) and what
    ``.kbignore`` files exclude. FIFOs, sockets and devices are counted and never opened.
    Symbolic links below a root are not followed unless ``follow_symlinks``; then only when
    they lead inside that root, each file and folder once, and a file reached through a link
    is recorded under the link's path. Paths named on the command line are resolved.

    ``only`` (absolute paths below ``paths``, which need not exist: what ``kb watch`` saw
    change) narrows the walk to those files and folders: the folders leading to them are
    entered (their ``.kbignore`` rules apply as in a full walk), nothing else is.
    """
    missing = [str(p) for p in paths if not _exists(Path(p).expanduser())]
    if missing:
        raise InvalidOptionError(
            f"Path not found: {source_name(missing[0])} (check the path and try again)"
        )
    found: dict[Path, None] = {}
    narrowed = frozenset(only) if only is not None else None
    discovery = Discovery([], [], [], only=narrowed)
    for raw in paths:
        path = Path(raw).expanduser().resolve()
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise InvalidOptionError(
                f"Cannot access {source_name(path)} ({exc.strerror or exc}): check its permissions"
            ) from None
        if stat.S_ISREG(mode):
            discovery.file_roots.append(path)
            if narrowed is not None and path not in narrowed:
                continue
            if path.suffix.lower() in extensions:
                found[path] = None
            else:
                discovery.skipped += 1
                discovery.warnings.append(
                    f"{path}: skipped, extension {path.suffix or '(none)'} is not in --ext"
                )
            continue
        if not stat.S_ISDIR(mode):
            discovery.special += 1
            discovery.warnings.append(f"{path}: {file_kind(mode)}, not a file or folder: skipped")
            continue
        discovery.dir_roots.append((path, recursive))
        count = 0
        for file in _walk(path, extensions, recursive, include_hidden, follow_symlinks, discovery):
            if file not in found:
                count += 1
            found[file] = None
        discovery.found_per_root[path] = discovery.found_per_root.get(path, 0) + count
    discovery.files = sorted(found)
    return discovery


def _link_target(link: Path, root: Path) -> tuple[Path, os.stat_result] | str:
    """Where the symlink ``link`` leads and its stat, or why it is not followed."""
    try:
        real = Path(os.path.realpath(link, strict=True))
        st = os.stat(real)
    except OSError as exc:
        return f"broken symbolic link ({exc.strerror or exc})"
    if real != root and not real.is_relative_to(root):  # component-wise: /docs-x is not in /docs
        return f"symbolic link to {real}, outside {root}"
    return real, st


def _walk(
    root: Path,
    extensions: tuple[str, ...],
    recursive: bool,
    include_hidden: bool,
    follow_symlinks: bool,
    d: Discovery,
) -> Iterator[Path]:
    # With d.only, a folder is walked whole when it is (or lies under) one of those paths,
    # entered when it leads to one of them, passed over otherwise.
    leads = {parent for p in d.only or () for parent in p.parents}
    rules = _IgnoreRules()
    seen_dirs: set[tuple[int, int]] = set()
    real_files: set[tuple[int, int]] = set()
    linked_files: list[tuple[Path, tuple[int, int]]] = []
    stack: list[tuple[Path, bool, bool]] = [(root, False, d.only is None or within(root, d.only))]
    # Folders reached through a link are walked after the real tree, so that a file found
    # both ways is recorded under its real path.
    later: list[tuple[Path, bool, bool]] = []
    while stack or later:
        folder, via_link, whole = stack.pop() if stack else later.pop()
        try:
            st = os.stat(folder)
        except OSError as exc:
            d.unreadable.append(folder)
            d.warnings.append(f"{folder}: cannot read folder ({exc.strerror}); its files are kept")
            continue
        if (st.st_dev, st.st_ino) in seen_dirs:
            continue  # a symlink loop or a folder reached twice
        seen_dirs.add((st.st_dev, st.st_ino))
        rules.load(folder)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            d.unreadable.append(folder)
            d.warnings.append(f"{folder}: cannot list folder ({exc.strerror}); its files are kept")
            continue
        for entry in entries:
            path = Path(entry.path)
            if entry.name == IGNORE_FILE:
                continue
            picked = whole or path in (d.only or ())
            if not picked and path not in leads:
                continue
            if hidden(entry.name) and not include_hidden:
                if picked:  # counted, as every entry passed over is
                    try:
                        a_folder = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        a_folder = False
                    if a_folder:
                        d.folders += 1
                    else:
                        d.skipped += 1
                continue
            try:
                if entry.is_symlink():
                    if not follow_symlinks:
                        d.links += 1
                        continue
                    target = _link_target(path, root)
                    if isinstance(target, str):
                        d.links += 1
                        d.warnings.append(f"{path}: {target}: not followed")
                        continue
                    st, through_link = target[1], True
                else:
                    st, through_link = entry.stat(follow_symlinks=False), via_link
            except OSError as exc:
                d.unreadable.append(path)
                d.warnings.append(f"{path}: cannot read ({exc.strerror}); kept as it was")
                continue
            if stat.S_ISDIR(st.st_mode):
                if not recursive:
                    continue
                if entry.name in IGNORED_DIRS and not include_hidden:
                    d.folders += int(picked)
                    continue
                if rules.ignored(path, True):
                    continue
                (later if through_link else stack).append((path, through_link, picked))
                continue
            if not picked:
                continue
            if not stat.S_ISREG(st.st_mode):
                d.special += 1
                d.warnings.append(f"{path}: {file_kind(st.st_mode)}: skipped, never opened")
                continue
            if rules.ignored(path, False) or path.suffix.lower() not in extensions:
                d.skipped += 1
                continue
            key = (st.st_dev, st.st_ino)
            if through_link:
                linked_files.append((path, key))
            else:
                real_files.add(key)
                yield path
    for path, key in linked_files:
        if key in real_files:
            d.skipped += 1  # the same file, already found under its real path or another link
            continue
        real_files.add(key)
        yield path


# --- the sync -----------------------------------------------------------------------------


def check_prune(
    found: Discovery, records: Collection[str], stale: list[str], extensions: tuple[str, ...]
) -> None:
    """Raise :class:`UnsafePruneError` when removing the indexed files ``stale`` looks like
    an accident.

    Refused: a folder root with no file to index while files are indexed under it (an empty
    or unmounted folder), and removing more than half of the files indexed under the roots
    once at least :data:`MASS_DELETE_MIN_INDEXED` are.
    """
    fix = (
        "nothing was changed; if this is intended, run again with --allow-mass-delete (or "
        "with --no-prune to keep the indexed files)"
    )
    for root, _ in found.dir_roots:
        if found.found_per_root.get(root, 0):
            continue
        if found.only is not None and root not in found.only:
            continue  # the walk did not look at all of it
        going = sum(1 for p in stale if found.covered_by(p, root))
        if going:
            kinds = ",".join(extensions)
            raise UnsafePruneError(
                f"Removing indexed files refused: {source_name(root)} holds no {kinds} file "
                f"to index but {going} indexed file{'' if going == 1 else 's'} under it would "
                f"be removed (is it empty or not mounted?); {fix}"
            )
    indexed = sum(1 for p in records if found.in_roots(Path(source_path(p))))
    if indexed >= MASS_DELETE_MIN_INDEXED and len(stale) * 2 > indexed:
        raise UnsafePruneError(
            f"Removing indexed files refused: this run would remove {len(stale)} of the "
            f"{indexed} files indexed under the given paths (more than half); {fix}"
        )


def on_disk(source: str) -> bool:
    """True unless the file recorded as ``source`` is gone (a path that cannot be checked,
    say for permissions, counts as there: it is kept)."""
    try:
        os.stat(source_path(source))
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return True
